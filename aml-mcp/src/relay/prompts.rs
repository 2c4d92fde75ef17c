//! Prompts when the gate fronts several servers (ADR 033). Prompts are not in the host's
//! tools file, so their names are learnt from the `prompts/list` pages the client walks: each
//! prompt is shown under its server's naming (`prefix`: `<server>__<name>`; `on_conflict`:
//! the bare name, unless a page of another server showed it first this session; `never`: the
//! bare name, and a prompt another server already showed is left out and logged), and
//! `prompts/get` goes to the prompt's server under the server's own name. A prompt whose
//! shown name another server's prompt already has, under any naming, is left out and logged.

use std::ops::Range;

use serde_json::value::RawValue;

use super::answer::push_members;
use super::jsonrpc::{json_string, range_in, splice, Envelope, Members};
use super::machine::{Relay, ServerId, State};
use super::names::{Naming, SEPARATOR};

/// Where a `prompts/get` (or a `completion/complete` for a `ref/prompt`) goes: the
/// prompt's server, and its own name when the client used another. A name this session has
/// not listed goes by its prefix when it names a server, else to the first server still
/// there that offers prompts, as it is.
pub(crate) fn target(state: &State, env: &Envelope<'_>) -> (ServerId, Option<String>) {
    let Some(name) = prompt_name(env) else {
        return (state.default_server_for("prompts/get"), None);
    };
    if let Some((server, own)) = state.prompts.get(&name) {
        return (*server, (*own != name).then(|| own.clone()));
    }
    let prefixed = name.split_once(SEPARATOR).and_then(|(server, own)| {
        let index = (0..state.servers).find(|s| state.server_name(*s) == server)?;
        Some((index, own.to_owned()))
    });
    match prefixed {
        Some((server, own)) => (server, Some(own)),
        None => (state.default_server_for("prompts/get"), None),
    }
}

fn prompt_name(env: &Envelope<'_>) -> Option<String> {
    serde_json::from_str(name_member(env)?.get()).ok()
}

/// `params.name` of a `prompts/get`, or `params.ref.name` of a `completion/complete` for a
/// `ref/prompt`.
fn name_member<'a>(env: &Envelope<'a>) -> Option<&'a RawValue> {
    let params = Members::parse(env.params?).ok()?;
    if env.method.as_deref() != Some("completion/complete") {
        return params.get("name");
    }
    let reference = Members::parse(params.get("ref")?).ok()?;
    (reference.get("type")?.get() == "\"ref/prompt\"").then_some(())?;
    reference.get("name")
}

/// Whether a `completion/complete` is for a prompt.
pub(crate) fn is_prompt_completion(env: &Envelope<'_>) -> bool {
    env.method.as_deref() == Some("completion/complete") && name_member(env).is_some()
}

/// `message` (a `prompts/get`, or a completion for a prompt) with the prompt's name replaced
/// by `own`.
pub(crate) fn with_own_name(message: &[u8], own: &str) -> Option<Vec<u8>> {
    let env = Envelope::parse(message).ok()?;
    let name = name_member(&env)?;
    Some(splice(
        message,
        &mut [(range_in(message, name), json_string(own).as_bytes())],
    ))
}

/// `server`'s `prompts/list` answer with each prompt under the name the client is to see,
/// noting each for `prompts/get`.
pub(crate) fn expose_page(relay: &Relay, state: &mut State, server: ServerId, answer: Vec<u8>) -> Vec<u8> {
    let Some((range, items)) = prompt_items(&answer) else {
        return answer;
    };
    let routes = relay.tools.routes();
    let naming = routes
        .servers()
        .get(server)
        .map_or(Naming::Prefix, |(_, naming)| *naming);
    let server_name = state.server_name(server);
    let mut out = vec![b'['];
    for item in items {
        let members = Members::parse(item).ok();
        let own = members
            .as_ref()
            .and_then(|m| m.get("name"))
            .and_then(|n| serde_json::from_str::<String>(n.get()).ok());
        let (Some(members), Some(own)) = (members, own) else {
            push_item(&mut out, item.get().as_bytes());
            continue;
        };
        let taken = |name: &str| state.prompts.get(name).is_some_and(|(s, _)| *s != server);
        let shown = match naming {
            Naming::Prefix => format!("{server_name}{SEPARATOR}{own}"),
            Naming::OnConflict if taken(&own) => format!("{server_name}{SEPARATOR}{own}"),
            Naming::Never if taken(&own) => {
                tracing::warn!(target: "aml_mcp::relay", server = %server_name, prompt = %own,
                               "a prompt another server already shows under this name is left out (names = \"never\")");
                continue;
            }
            _ => own.clone(),
        };
        // A name another server's prompt is already shown under (its bare name spelling this
        // one's prefixed name, say) stays that prompt's.
        if state
            .prompts
            .get(&shown)
            .is_some_and(|(s, o)| *s != server || *o != own)
        {
            tracing::warn!(target: "aml_mcp::relay", server = %server_name, prompt = %own, shown = %shown,
                           "a prompt whose shown name another server's prompt already has is left out");
            continue;
        }
        if shown == own {
            push_item(&mut out, item.get().as_bytes());
        } else {
            let mut renamed = vec![b'{'];
            if push_members(&mut renamed, &members, &["name"]) {
                renamed.push(b',');
            }
            renamed.extend_from_slice(b"\"name\":");
            renamed.extend_from_slice(json_string(&shown).as_bytes());
            renamed.push(b'}');
            push_item(&mut out, &renamed);
        }
        state.prompts.insert(shown, (server, own));
    }
    out.push(b']');
    splice(&answer, &mut [(range, &out)])
}

fn push_item(out: &mut Vec<u8>, item: &[u8]) {
    if out.len() > 1 {
        out.push(b',');
    }
    out.extend_from_slice(item);
}

/// Where an answer's `result.prompts` is, and its items.
fn prompt_items(answer: &[u8]) -> Option<(Range<usize>, Vec<&RawValue>)> {
    let env = Envelope::parse(answer).ok()?;
    let list = Members::parse(env.result?).ok()?.get("prompts")?;
    let items: Vec<&RawValue> = serde_json::from_str(list.get()).ok()?;
    Some((range_in(answer, list), items))
}
