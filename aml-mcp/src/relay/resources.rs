//! Resources when the gate fronts several servers (ADR 033). A resource's URI is global, so
//! it is not renamed; the gate learns whose it is from the `resources/list` and
//! `resources/templates/list` pages the client walks. A URI (or template) that two servers
//! list is left out of the later one's page and logged; reading it is refused, naming both.
//! `resources/read`, `resources/subscribe`, `resources/unsubscribe` and a
//! `completion/complete` for a resource go to the URI's server: one that listed it, else the
//! one whose template's fixed beginning is the longest match, else the first server still
//! there.

use std::ops::Range;

use serde_json::value::RawValue;

use super::jsonrpc::{range_in, splice, Envelope, Members};
use super::machine::{ServerId, State};

/// Where a resource request goes, or why it is refused (a URI two servers listed).
pub(crate) fn target(state: &State, uri: &str) -> Result<ServerId, String> {
    if let Some(owner) = state.resources.get(uri) {
        return owner_of(state, uri, *owner);
    }
    let by_template = state
        .templates
        .iter()
        .filter(|(template, _)| uri.starts_with(fixed_start(template)))
        .max_by_key(|(template, _)| fixed_start(template).len());
    match by_template {
        Some((template, owner)) => owner_of(state, template, *owner),
        None => Ok(state.default_server_for("resources/read")),
    }
}

fn owner_of(state: &State, uri: &str, owner: Owner) -> Result<ServerId, String> {
    match owner {
        Owner::One(server) => Ok(server),
        Owner::Two(first, second) => Err(format!(
            "{uri:?} is listed by two servers ({} and {}); the gate sends it to neither",
            state.server_name(first),
            state.server_name(second)
        )),
    }
}

/// The part of a URI template before its first expression.
fn fixed_start(template: &str) -> &str {
    template.split('{').next().unwrap_or_default()
}

/// Whose a listed URI is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    One(ServerId),
    /// Listed by two servers (the first two seen): sent to neither.
    Two(ServerId, ServerId),
}

/// The URI a resource request names: `params.uri`, or `params.ref.uri` of a
/// `completion/complete` for a resource.
pub(crate) fn uri_of(method: &str, env: &Envelope<'_>) -> Option<String> {
    let params = Members::parse(env.params?).ok()?;
    let uri = match method {
        "completion/complete" => {
            let reference = Members::parse(params.get("ref")?).ok()?;
            (reference.get("type")?.get() == "\"ref/resource\"").then_some(())?;
            reference.get("uri")?
        }
        _ => params.get("uri")?,
    };
    serde_json::from_str(uri.get()).ok()
}

/// Whether `method` names a resource by URI.
pub(crate) fn names_a_resource(method: &str) -> bool {
    matches!(
        method,
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" | "completion/complete"
    )
}

/// `server`'s `resources/list` (or `resources/templates/list`) answer, noting whose each URI
/// is, less any another server listed first (logged).
pub(crate) fn note_page(state: &mut State, server: ServerId, method: &str, answer: Vec<u8>) -> Vec<u8> {
    let (list, member) = match method {
        "resources/list" => ("resources", "uri"),
        _ => ("resourceTemplates", "uriTemplate"),
    };
    let Some((range, items)) = items(&answer, list) else {
        return answer;
    };
    let mut out = vec![b'['];
    for item in items {
        let uri = Members::parse(item)
            .ok()
            .and_then(|m| m.get(member))
            .and_then(|u| serde_json::from_str::<String>(u.get()).ok());
        if let Some(uri) = uri {
            let known = match member {
                "uri" => &mut state.resources,
                _ => &mut state.templates,
            };
            let owner = match known.get(&uri).copied() {
                None => Owner::One(server),
                Some(Owner::One(first)) if first != server => Owner::Two(first, server),
                Some(owner) => owner,
            };
            known.insert(uri.clone(), owner);
            if owner != Owner::One(server) {
                if let Owner::Two(first, second) = owner {
                    tracing::warn!(target: "aml_mcp::relay", uri = %uri, first = %state.server_name(first),
                                   second = %state.server_name(second),
                                   "two servers list one resource URI: it is left out and sent to neither");
                }
                continue;
            }
        }
        if out.len() > 1 {
            out.push(b',');
        }
        out.extend_from_slice(item.get().as_bytes());
    }
    out.push(b']');
    splice(&answer, &mut [(range, &out)])
}

fn items<'a>(answer: &'a [u8], list: &str) -> Option<(Range<usize>, Vec<&'a RawValue>)> {
    let env = Envelope::parse(answer).ok()?;
    let found = Members::parse(env.result?).ok()?.get(list)?;
    let items: Vec<&RawValue> = serde_json::from_str(found.get()).ok()?;
    Some((range_in(answer, found), items))
}
