//! The host's registered tools against the tools the server advertises: a registered tool
//! the server does not list is most likely a typo in the tools file (or a server that lost a
//! tool), which would otherwise show only as a tool that never appears. Warned once for each
//! set of missing tools a session sees (its first complete list, and again when a reload or
//! the server changes it).

use std::collections::BTreeSet;

use super::machine::{Relay, State};

/// Notes one page of the server's `tools/list` (the names it lists); `last` when it has no
/// `nextCursor`, which completes the list the pages since the last complete one make up.
pub(crate) fn page(relay: &Relay, state: &mut State, names: impl IntoIterator<Item = String>, last: bool) {
    // With several servers each lists only its own tools, under its own names (ADR 033).
    if relay.tools.routes().listed() {
        return;
    }
    state.listing.extend(names);
    if !last {
        return;
    }
    let advertised = std::mem::take(&mut state.listing);
    let registered = relay.tools.gate().gate().catalog();
    let missing: BTreeSet<String> = registered
        .tools()
        .map(|tool| tool.name().to_owned())
        .filter(|name| !advertised.contains(name))
        .collect();
    if missing == state.missing_warned {
        return;
    }
    for tool in missing.difference(&state.missing_warned) {
        tracing::warn!(target: "aml_mcp::relay", tool = %tool,
                       "the tools file registers a tool the server does not list: it is never listed or callable (a typo in its name?)");
    }
    state.missing_warned = missing;
}
