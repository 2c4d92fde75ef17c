//! The W3C Trace Context headers of a client's POST, handed to the relay beside its messages
//! (for the gate's span; never sent on to the server).

use aml_mcp::relay::{Inbound, TransportTrace};
use bytes::Bytes;
use hyper::header::HeaderMap;

/// The POST's `traceparent` (when there is exactly one, as text) and its `tracestate`
/// headers (several joined with `,`, as W3C Trace Context combines them). Whether they are
/// valid is for the observer to decide.
pub(super) fn of(headers: &HeaderMap) -> Option<TransportTrace> {
    let mut parents = headers.get_all("traceparent").iter();
    let parent = parents.next()?.to_str().ok()?;
    if parents.next().is_some() {
        // Two parents: neither can be trusted to be the caller's.
        return None;
    }
    let states: Vec<&str> = headers
        .get_all("tracestate")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    let state = (!states.is_empty()).then(|| states.join(","));
    Some(TransportTrace::new(parent, state))
}

/// One message for the relay, with the POST's trace headers if it had them.
pub(super) fn inbound(message: Bytes, trace: Option<&TransportTrace>) -> Inbound {
    match trace {
        Some(trace) => Inbound::Traced {
            message,
            trace: trace.clone(),
        },
        None => Inbound::Message(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_traceparent_is_kept_with_every_tracestate_joined() {
        let mut headers = HeaderMap::new();
        assert!(of(&headers).is_none());
        headers.insert(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
                .parse()
                .unwrap(),
        );
        let trace = of(&headers).unwrap();
        assert_eq!(
            trace.traceparent(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
        assert_eq!(trace.tracestate(), None);
        headers.append("tracestate", "a=1".parse().unwrap());
        headers.append("tracestate", "b=2".parse().unwrap());
        assert_eq!(of(&headers).unwrap().tracestate(), Some("a=1,b=2"));
        headers.append(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b8-01"
                .parse()
                .unwrap(),
        );
        assert!(of(&headers).is_none(), "two traceparent headers are ignored");
    }

    #[test]
    fn messages_without_trace_headers_stay_plain() {
        let plain = inbound(Bytes::from_static(b"{}"), None);
        assert_eq!(plain, Inbound::Message(Bytes::from_static(b"{}")));
        let trace = TransportTrace::new("x", None);
        assert!(matches!(
            inbound(Bytes::new(), Some(&trace)),
            Inbound::Traced { .. }
        ));
    }
}
