//! List requests when the gate fronts several servers (ADR 033): the servers' lists are
//! walked in the host's order, one page per server, under the gate's own cursor
//! `"<server>.<that server's cursor>"` (the server's part empty for its first page). A list
//! request goes to one server; its answer's `nextCursor` names the same server's next
//! page, else the next server still there, else nothing.

use std::borrow::Cow;
use std::ops::Range;

use serde_json::value::RawValue;

use super::answer::push_members;
use super::jsonrpc::{json_string, range_in, splice, Envelope, Members};
use super::machine::{ServerId, State};

/// The list methods paged across the servers.
pub(crate) fn is_paged(method: &str) -> bool {
    matches!(
        method,
        "tools/list" | "prompts/list" | "resources/list" | "resources/templates/list"
    )
}

/// A list request's server, and the request as that server is to get it.
pub(crate) type Paged<'m> = (ServerId, Cow<'m, [u8]>);

/// Where a list request goes, and the request as that server is to get it (its cursor the
/// server's own, or none for its first page); `None` when no server still there lists
/// that (the list is empty); why not, when its cursor is not one the gate gave, or names a
/// server that is gone or lists no such thing.
pub(crate) fn route<'m>(
    state: &State,
    message: &'m [u8],
    env: &Envelope<'_>,
) -> Result<Option<Paged<'m>>, String> {
    let params = env.params.and_then(|p| Members::parse(p).ok().map(|m| (p, m)));
    let cursor = params.as_ref().and_then(|(_, members)| members.get("cursor"));
    let method = env.method.as_deref().unwrap_or_default();
    let Some(cursor) = cursor else {
        return Ok(next_there(state, method, 0).map(|first| (first, Cow::Borrowed(message))));
    };
    let unknown = || "the cursor is not one this gate gave".to_owned();
    let text: String = serde_json::from_str(cursor.get()).map_err(|_| unknown())?;
    let (server, own) = text.split_once('.').ok_or_else(unknown)?;
    // As the gate writes it: decimal digits, no sign, no leading zero.
    let canonical = !server.is_empty()
        && server.bytes().all(|b| b.is_ascii_digit())
        && (server == "0" || !server.starts_with('0'));
    let server: ServerId = match canonical {
        true => server.parse().map_err(|_| unknown())?,
        false => return Err(unknown()),
    };
    if server >= state.servers || state.gone(server).is_some() {
        return Err(format!(
            "the cursor's server ({}) is not there",
            state.server_name(server)
        ));
    }
    // The gate names only servers that list this in its cursors.
    if !state.offers(server, method) {
        return Err(unknown());
    }
    if !own.is_empty() {
        let edit = (range_in(message, cursor), json_string(own));
        return Ok(Some((
            server,
            Cow::Owned(splice(message, &mut [(edit.0, edit.1.as_bytes())])),
        )));
    }
    // The server's first page: no cursor at all.
    let Some((raw, members)) = params else {
        return Err(unknown());
    };
    let mut without = vec![b'{'];
    push_members(&mut without, &members, &["cursor"]);
    without.push(b'}');
    Ok(Some((
        server,
        Cow::Owned(splice(message, &mut [(range_in(message, raw), &without)])),
    )))
}

/// The `result` of a list no server still there has: empty.
pub(crate) fn empty_result(method: &str) -> &'static str {
    match method {
        "tools/list" => r#"{"tools":[]}"#,
        "prompts/list" => r#"{"prompts":[]}"#,
        "resources/list" => r#"{"resources":[]}"#,
        _ => r#"{"resourceTemplates":[]}"#,
    }
}

/// The first server still there at or after `from` that offers what `method` lists.
fn next_there(state: &State, method: &str, from: ServerId) -> Option<ServerId> {
    (from..state.servers).find(|s| state.gone(*s).is_none() && state.offers(*s, method))
}

/// `answer` (the client's answer to a list request `server` answered) with the gate's
/// `nextCursor`: the server's next page, else the next server's first, else none.
pub(crate) fn with_gate_cursor(state: &State, server: ServerId, method: &str, answer: Vec<u8>) -> Vec<u8> {
    let Some((result, members)) = result_members(&answer) else {
        return answer;
    };
    let own = members
        .get("nextCursor")
        .and_then(|c| serde_json::from_str::<String>(c.get()).ok());
    let next = match own {
        Some(own) => Some(format!("{server}.{own}")),
        None => next_there(state, method, server + 1).map(|next| format!("{next}.")),
    };
    let mut out = vec![b'{'];
    let wrote = push_members(&mut out, &members, &["nextCursor"]);
    if let Some(next) = next {
        if wrote {
            out.push(b',');
        }
        out.extend_from_slice(b"\"nextCursor\":");
        out.extend_from_slice(json_string(&next).as_bytes());
    }
    out.push(b'}');
    splice(&answer, &mut [(result, &out)])
}

/// Where an answer's `result` is, and its members.
fn result_members(answer: &[u8]) -> Option<(Range<usize>, Members<'_>)> {
    let env = Envelope::parse(answer).ok()?;
    let result: &RawValue = env.result?;
    Some((range_in(answer, result), Members::parse(result).ok()?))
}
