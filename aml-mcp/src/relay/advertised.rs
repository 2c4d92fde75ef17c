//! The host's registered tools against the tools the server advertises: a registered tool
//! the server does not list is most likely a typo in the tools file (or a server that lost a
//! tool), which would otherwise show only as a tool that never appears. Warned once for each
//! set of missing tools a session sees (its first complete list, and again when a reload or
//! the server changes it).

use std::collections::BTreeSet;

use super::machine::{Relay, ServerId, State};

/// Notes one page of `server`'s `tools/list` (the names it lists, its own); `last` when it
/// has no `nextCursor`, which completes the list the pages since its last complete one make
/// up. With several servers (ADR 033) each is checked against the tools registered as its.
pub(crate) fn page(
    relay: &Relay,
    state: &mut State,
    server: ServerId,
    names: impl IntoIterator<Item = String>,
    last: bool,
) {
    let Some(listing) = state.listing.get_mut(server) else {
        return;
    };
    listing.extend(names);
    if !last {
        return;
    }
    let advertised = std::mem::take(listing);
    let routes = relay.tools.routes();
    let registered = relay.tools.gate().gate().catalog();
    let missing: BTreeSet<String> = registered
        .tools()
        .map(|tool| tool.name())
        .filter(|name| matches!(routes.resolve(name), Some((its, own)) if its == server && !advertised.contains(own)))
        .map(str::to_owned)
        .collect();
    let Some(warned) = state.missing_warned.get_mut(server) else {
        return;
    };
    if missing == *warned {
        return;
    }
    let listed = routes.listed();
    for tool in missing.difference(warned) {
        if listed {
            let name = routes.servers().get(server).map_or("", |(name, _)| name.as_str());
            tracing::warn!(target: "aml_mcp::relay", tool = %tool, server = name,
                           "the tools file registers a tool its server does not list: it is never listed or callable (a typo in its name?)");
        } else {
            tracing::warn!(target: "aml_mcp::relay", tool = %tool,
                           "the tools file registers a tool the server does not list: it is never listed or callable (a typo in its name?)");
        }
    }
    *warned = missing;
}
