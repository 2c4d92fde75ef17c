//! Answers the relay writes: the server's reply with the client's id and the verdict added
//! (every other value keeps its bytes), the relay's own `isError` results, and the filtered
//! `tools/list` result.

use aml_core::strict;
use serde_json::value::RawValue;
use serde_json::Value;

use std::ops::Range;

use super::jsonrpc::{json_string, range_in, result_response, splice, Envelope, Members};
use super::machine::Reply;
use super::tools::RelayTools;
use crate::{ResultStatus, VERDICT_META_KEY};

/// [`VERDICT_META_KEY`] as JSON text (it needs no escapes).
const VERDICT_KEY_JSON: &str = "\"aml.action-boundary/verdict\"";

/// The server's reply to a forwarded request, with the client's id and, when `verdict` is
/// given, the verdict under the result's `_meta` (or an error's `data`).
pub(crate) fn relay_reply(reply: &Reply, client_id: &[u8], verdict: Option<&str>) -> Vec<u8> {
    let message = &reply.message[..];
    let mut edits: Vec<(Range<usize>, Vec<u8>)> = vec![(reply.id.clone(), client_id.to_vec())];
    if let Some(verdict) = verdict {
        let (body, member) = match &reply.body {
            Ok(result) => (result, "_meta"),
            Err(error) => (error, "data"),
        };
        if let Some(edit) = add_verdict(message, body.clone(), member, verdict) {
            edits.push(edit);
        }
    }
    let mut edits: Vec<_> = edits.iter().map(|(r, b)| (r.clone(), b.as_slice())).collect();
    splice(message, &mut edits)
}

/// Why the verdict cannot be added to the server's answer without guessing what the client
/// will read, if it cannot: the result (an error) must be a JSON object with each member once,
/// and its `_meta` (`data`) absent or such an object too. Otherwise a server could hide the
/// verdict or put its own beside it (`{"_meta":{},"_meta":{…forged…}}`, which most parsers
/// read as the last one), or change what the client reads (`"isError"` twice).
pub(crate) fn unsplicable(reply: &Reply) -> Option<String> {
    let (range, what, member) = match &reply.body {
        Ok(result) => (result, "result", "_meta"),
        Err(error) => (error, "error", "data"),
    };
    let body: &RawValue = match serde_json::from_slice(&reply.message[range.clone()]) {
        Ok(body) => body,
        Err(e) => return Some(format!("its {what} is not JSON ({e})")),
    };
    let members = match Members::parse(body) {
        Ok(members) => members,
        Err(e) => return Some(format!("its {what} is not an object with each member once ({e})")),
    };
    match members.get(member).map(Members::parse) {
        Some(Err(e)) => Some(format!(
            "its {what}'s {member:?} is not an object with each member once ({e})"
        )),
        _ => None,
    }
}

/// What the gate takes a call's result to be: the result as the strict parser reads it when
/// it is strict JSON (the same parser as for client messages; every number kept exactly),
/// else its text as a JSON string, with why it is not strict JSON. The call record's and the
/// verdict's `result_digest` is of this value as compact JSON with sorted keys: for a result
/// that is not strict JSON, that is the SHA-256 of its exact text written as one JSON string
/// (ADR 007).
pub(crate) fn read_result(text: &[u8], max_bytes: usize) -> (Value, Option<String>) {
    let limits = strict::Limits {
        max_bytes,
        ..strict::Limits::default()
    };
    let why = match strict::parse_slice_with(text, limits) {
        Ok(value) => match strict::first_inexact_number(text) {
            None => return (value, None),
            Some(inexact) => inexact.to_string(),
        },
        Err(e) => e.to_string(),
    };
    // Server messages are checked to be UTF-8 before they are routed.
    let text = String::from_utf8_lossy(text).into_owned();
    (Value::String(text), Some(why))
}

/// A result's status read from its top-level members alone (`isError`, `resultType`), for
/// a result the strict parser refused; `returned` when they cannot be read.
pub(crate) fn lenient_status(reply: &Reply) -> ResultStatus {
    let members = reply
        .body
        .as_ref()
        .ok()
        .and_then(|range| serde_json::from_slice::<&RawValue>(&reply.message[range.clone()]).ok())
        .and_then(|result| Members::parse(result).ok());
    let member = |name: &str| members.as_ref().and_then(|m| m.get(name)).map(RawValue::get);
    if member("isError") == Some("true") {
        ResultStatus::ToolError
    } else if member("resultType") == Some("\"input_required\"") {
        ResultStatus::InputRequired
    } else {
        ResultStatus::Returned
    }
}

/// The edit that puts the verdict into `object[member]` (an object; created when absent). A
/// verdict the server wrote itself is dropped: only the gate's counts.
fn add_verdict(
    message: &[u8],
    object: Range<usize>,
    member: &str,
    verdict: &str,
) -> Option<(Range<usize>, Vec<u8>)> {
    let object_text = &message[object.clone()];
    let members: Members<'_> = serde_json::from_slice(object_text).ok()?;
    let mut entry = String::with_capacity(VERDICT_KEY_JSON.len() + 1 + verdict.len());
    entry.push_str(VERDICT_KEY_JSON);
    entry.push(':');
    entry.push_str(verdict);
    match members.get(member) {
        Some(existing) => {
            let mut out = Vec::with_capacity(existing.get().len() + entry.len() + 2);
            out.push(b'{');
            if let Ok(inner) = Members::parse(existing) {
                if push_members(&mut out, &inner, &[VERDICT_META_KEY]) {
                    out.push(b',');
                }
            } else if member == "data" {
                // A non-object `data` stays as the server wrote it.
                return None;
            }
            out.extend_from_slice(entry.as_bytes());
            out.push(b'}');
            Some((range_in(message, existing), out))
        }
        None => {
            let at = object.start + 1;
            let mut text = Vec::with_capacity(member.len() + entry.len() + 6);
            text.extend_from_slice(json_string(member).as_bytes());
            text.extend_from_slice(b":{");
            text.extend_from_slice(entry.as_bytes());
            text.push(b'}');
            if !members.0.is_empty() {
                text.push(b',');
            }
            Some((at..at, text))
        }
    }
}

/// Writes each of `members` but those named in `except` as `"key":value`, comma-separated,
/// values as their bytes; whether it wrote any.
pub(crate) fn push_members(out: &mut Vec<u8>, members: &Members<'_>, except: &[&str]) -> bool {
    let mut wrote = false;
    for (key, value) in members.0.iter().filter(|(k, _)| !except.contains(&&**k)) {
        if wrote {
            out.push(b',');
        }
        wrote = true;
        out.extend_from_slice(json_string(key).as_bytes());
        out.push(b':');
        out.extend_from_slice(value.get().as_bytes());
    }
    wrote
}

/// The server's answer to `initialize` (or `server/discover`) with the client's id, less the
/// capability to take task-augmented `tools/call` (`capabilities.tasks.requests.tools.call`):
/// the gate refuses those (it cannot gate a task's later result), so a client should not be
/// told it may send one. Everything else keeps its bytes.
pub(crate) fn without_task_calls(reply: &Reply, client_id: &[u8]) -> Vec<u8> {
    let message = &reply.message[..];
    let task_calls = || {
        let result: &RawValue = serde_json::from_slice(&message[reply.body.clone().ok()?]).ok()?;
        let mut object = result;
        for member in ["capabilities", "tasks", "requests", "tools"] {
            object = Members::parse(object).ok()?.get(member)?;
        }
        let members = Members::parse(object).ok()?;
        members.get("call")?;
        Some((object, members))
    };
    let mut edits = vec![(reply.id.clone(), client_id.to_vec())];
    if let Some((tools, members)) = task_calls() {
        let mut out = vec![b'{'];
        push_members(&mut out, &members, &["call"]);
        out.push(b'}');
        edits.push((range_in(message, tools), out));
    }
    let mut edits: Vec<_> = edits.iter().map(|(r, b)| (r.clone(), b.as_slice())).collect();
    splice(message, &mut edits)
}

/// The relay's own answer to a call that has no server result: an `isError` result that says
/// why, with the verdict.
pub(crate) fn error_result(client_id: &[u8], explanation: &str, verdict: &str) -> bytes::Bytes {
    let result = format!(
        "{{\"content\":[{{\"type\":\"text\",\"text\":{}}}],\"isError\":true,\"resultType\":\"complete\",\"_meta\":{{{VERDICT_KEY_JSON}:{verdict}}}}}",
        json_string(explanation),
    );
    result_response(client_id, result.as_bytes())
}

/// The server's `tools/list` reply with only the tools the host lists (and `visible` lets
/// through: pins), each under the name the client sees (`shown` gives it from the
/// server's own, ADR 033) with the host's input schema, and the client's id. `None` when
/// the reply cannot be read.
pub(crate) fn filter_tools_list(
    reply: &[u8],
    client_id: &[u8],
    tools: &RelayTools,
    shown: &dyn Fn(&str) -> Option<String>,
    visible: &dyn Fn(&str, &str) -> bool,
) -> Option<Vec<u8>> {
    let env = Envelope::parse(reply).ok()?;
    let mut edits = vec![(range_in(reply, env.id?), client_id.to_vec())];
    if let Some(result) = env.result {
        let list = Members::parse(result).ok()?.get("tools")?;
        let items: Vec<&RawValue> = serde_json::from_str(list.get()).ok()?;
        let mut out = Vec::with_capacity(list.get().len());
        out.push(b'[');
        for item in items {
            let members = Members::parse(item).ok()?;
            let own: String = serde_json::from_str(members.get("name")?.get()).ok()?;
            let Some(name) = shown(&own) else { continue };
            let Some(schema) = tools.listed(&name).filter(|_| visible(&name, &own)) else {
                continue;
            };
            if out.len() > 1 {
                out.push(b',');
            }
            out.push(b'{');
            let renamed = name != own;
            let except: &[&str] = if renamed {
                &["inputSchema", "name"]
            } else {
                &["inputSchema"]
            };
            if push_members(&mut out, &members, except) {
                out.push(b',');
            }
            if renamed {
                out.extend_from_slice(b"\"name\":");
                out.extend_from_slice(json_string(&name).as_bytes());
                out.push(b',');
            }
            out.extend_from_slice(b"\"inputSchema\":");
            out.extend_from_slice(schema.to_string().as_bytes());
            out.push(b'}');
        }
        out.push(b']');
        edits.push((range_in(reply, list), out));
    }
    let mut edits: Vec<_> = edits.iter().map(|(r, b)| (r.clone(), b.as_slice())).collect();
    Some(splice(reply, &mut edits))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parsed(message: &[u8]) -> Reply {
        let env = Envelope::parse(message).unwrap();
        let body = match (env.result, env.error) {
            (Some(r), _) => Ok(range_in(message, r)),
            (None, e) => Err(range_in(message, e.unwrap())),
        };
        Reply {
            id: range_in(message, env.id.unwrap()),
            body,
            message: bytes::Bytes::copy_from_slice(message),
        }
    }

    #[test]
    fn the_verdict_is_added_and_everything_else_keeps_its_bytes() {
        let verdict = json!({"mcp_result_status": "returned"}).to_string();
        let reply = br#"{"jsonrpc":"2.0","id":5,"result":{"content":[{"type":"text","text":"n=1.50"}],"x":9007199254740993}}"#;
        let out = relay_reply(&parsed(reply), b"\"c-1\"", Some(&verdict));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"jsonrpc":"2.0","id":"c-1","result":{"_meta":{"aml.action-boundary/verdict":{"mcp_result_status":"returned"}},"content":[{"type":"text","text":"n=1.50"}],"x":9007199254740993}}"#
        );
        let with_meta = br#"{"jsonrpc":"2.0","id":5,"result":{"_meta":{"k":1.0,"aml.action-boundary/verdict":"forged"}}}"#;
        let out = relay_reply(&parsed(with_meta), b"1", Some(&verdict));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"jsonrpc":"2.0","id":1,"result":{"_meta":{"k":1.0,"aml.action-boundary/verdict":{"mcp_result_status":"returned"}}}}"#
        );
        let empty = br#"{"jsonrpc":"2.0","id":5,"result":{}}"#;
        let out = relay_reply(&parsed(empty), b"1", Some(&verdict));
        assert!(out.ends_with(
            br#""result":{"_meta":{"aml.action-boundary/verdict":{"mcp_result_status":"returned"}}}}"#
        ));
        let error = br#"{"jsonrpc":"2.0","id":5,"error":{"code":-32602,"message":"m"}}"#;
        let out = relay_reply(&parsed(error), b"1", Some(&verdict));
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            v["error"]["data"][VERDICT_META_KEY],
            json!({"mcp_result_status": "returned"})
        );
        assert_eq!(v["error"]["code"], -32602);
    }

    #[test]
    fn the_task_call_capability_is_taken_out_of_the_handshake_and_nothing_else() {
        let reply = br#"{"jsonrpc":"2.0","id":3,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{"listChanged":true},"tasks":{"list":{},"requests":{"tools":{"call":{},"x.example":1.50}}}},"serverInfo":{"name":"s","version":"1"}}}"#;
        let out = without_task_calls(&parsed(reply), b"\"c\"");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"jsonrpc":"2.0","id":"c","result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{"listChanged":true},"tasks":{"list":{},"requests":{"tools":{"x.example":1.50}}}},"serverInfo":{"name":"s","version":"1"}}}"#
        );
        let plain = br#"{"jsonrpc":"2.0","id":3,"result":{"capabilities":{"tools":{}}}}"#;
        let out = without_task_calls(&parsed(plain), b"9");
        assert_eq!(
            &out[..],
            &br#"{"jsonrpc":"2.0","id":9,"result":{"capabilities":{"tools":{}}}}"#[..]
        );
    }

    #[test]
    fn the_verdict_key_text_is_the_key_as_json() {
        assert_eq!(VERDICT_KEY_JSON, json_string(VERDICT_META_KEY));
    }

    #[test]
    fn error_results_parse_as_mcp_results() {
        let out = error_result(
            b"3",
            "refused \"x\"",
            &json!({"rejection": "inexact_number"}).to_string(),
        );
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["id"], 3);
        assert_eq!(v["result"]["isError"], true);
        assert_eq!(v["result"]["content"][0]["text"], "refused \"x\"");
        assert_eq!(
            v["result"]["_meta"][VERDICT_META_KEY]["rejection"],
            "inexact_number"
        );
    }
}
