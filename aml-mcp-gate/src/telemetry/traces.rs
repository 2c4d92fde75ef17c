//! `--otlp-endpoint URL` (feature `otel`): one OpenTelemetry span per `tools/call`, exported
//! as OTLP/HTTP protobuf to `URL/v1/traces` (`otlp`, ADR 025).
//!
//! The span is made when the relay ends the call (the relay's [`CallObserver`]), from the
//! gate's outcome: `aml.digest`, `aml.decision`, `aml.reason`, `aml.tool`, `aml.server`,
//! `aml.status`. Its parent is the client's W3C `traceparent` from `params._meta`, or else
//! the POST's `traceparent` header, when valid; otherwise it starts a trace of its own. An
//! HTTP (`--upstream`) server is sent the span as the forwarded POST's `traceparent` header
//! ([`CallObserver::forward_trace`]), so its spans can be the gate's children. The call only
//! queues a small record; the exporter, a task of the gate's runtime, batches,
//! encodes and posts them, and logs a failed export. A call never waits for one (a full
//! queue drops spans, and says how many).

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use aml_mcp::relay::{CallObserver, ForwardedCall, ObservedCall, TransportTrace};
use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};
use tokio::sync::{mpsc, oneshot};

use super::otlp::{self, Ended, Queue, EXPORT_TIMEOUT};

/// The gate's tracer: one span per call.
#[derive(Debug)]
pub(crate) struct Traces {
    queue: Arc<Queue>,
    ids: RandomIdGenerator,
    /// Asks the exporter to export now; closed (dropped) to stop it.
    flushes: std::sync::Mutex<Option<mpsc::Sender<otlp::Flush>>>,
}

/// Checks an `--otlp-endpoint` value and gives the URL spans are posted to: `URL/v1/traces`,
/// unless the URL already names a path.
pub(crate) fn traces_url(value: &str) -> Result<String, String> {
    let bad = |why: &str| {
        format!("--otlp-endpoint {value:?}: {why}; expected an OTLP/HTTP URL such as http://127.0.0.1:4318")
    };
    let rest = match value.split_once("://") {
        Some(("http", rest)) => rest,
        Some(("https", _)) => {
            return Err(bad(
                "https is not built in (no TLS in the gate); send to a local collector over http",
            ))
        }
        Some((_, _)) => return Err(bad("the scheme must be http")),
        None => return Err(bad("not a URL")),
    };
    let uri: http::Uri = value.parse().map_err(|e| bad(&format!("{e}")))?;
    if uri.host().is_none_or(str::is_empty) || rest.contains('@') || uri.query().is_some() {
        return Err(bad("it needs a host, and no user information or query"));
    }
    let path = uri.path();
    Ok(match path {
        "" | "/" => format!("{}/v1/traces", value.trim_end_matches('/')),
        _ => value.to_owned(),
    })
}

impl Traces {
    /// The tracer for a gate in front of `server`, exporting to `url` (from [`traces_url`])
    /// from a task on `runtime`.
    pub(crate) fn start(
        url: &str,
        server: String,
        runtime: tokio::runtime::Handle,
    ) -> Result<Traces, String> {
        let headers = otlp::env_headers()?;
        let queue = Arc::new(Queue::default());
        let (flushes, requests) = mpsc::channel(4);
        otlp::spawn(
            &runtime,
            url.to_owned(),
            headers,
            &server,
            Arc::clone(&queue),
            requests,
        );
        Ok(Traces {
            queue,
            ids: RandomIdGenerator::default(),
            flushes: std::sync::Mutex::new(Some(flushes)),
        })
    }

    /// Exports every span queued so far (bounded); for the benchmark, which counts the
    /// export's CPU in the round that made the spans.
    #[allow(dead_code)] // the gate flushes at shutdown only; benches/telemetry.rs calls it
    pub(crate) async fn flush(&self) {
        let sender = self.flushes.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let Some(sender) = sender else { return };
        let (done, exported) = oneshot::channel();
        if sender.send(done).await.is_ok() {
            bounded("", exported).await;
        }
    }

    /// Exports every span still queued (bounded), then stops the exporter.
    pub(crate) async fn shutdown(&self) {
        let sender = self.flushes.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(sender) = sender else { return };
        let (done, exported) = oneshot::channel();
        if sender.send(done).await.is_ok() {
            drop(sender);
            bounded(" at exit", exported).await;
        }
    }
}

/// Waits for the exporter's answer, at most as long as an export may take.
async fn bounded(when: &str, exported: oneshot::Receiver<()>) {
    match tokio::time::timeout(EXPORT_TIMEOUT + Duration::from_secs(1), exported).await {
        Ok(Ok(())) => {}
        Ok(Err(_)) | Err(_) => tracing::warn!("otlp: spans not all exported{when} (timed out)"),
    }
}

impl CallObserver for Traces {
    fn call_ended(&self, call: &ObservedCall<'_>) {
        let outcome = call.outcome;
        let receipt = outcome.receipt();
        let decision = outcome.plan().map_or("none", |plan| plan.decision().as_str());
        let (status, reason) = match (receipt, outcome.refusal()) {
            (Some(receipt), _) => (receipt.execution_status().as_str(), receipt.reason().as_str()),
            // As the metrics say: refused before any plan, so blocked.
            (None, Some(refusal)) => ("blocked", refusal.as_str()),
            (None, None) => ("blocked", "host_error"),
        };
        let parent = parent_of(call.meta, call.trace);
        // A call forwarded with a trace context of the gate's: the span is the one the
        // server was told is its parent.
        let own = call
            .forwarded
            .and_then(|f| parse_traceparent(f.traceparent(), None));
        let (trace_id, span_id) = match (&own, &parent) {
            (Some(own), _) => (own.trace_id(), own.span_id()),
            (None, Some(parent)) => (parent.trace_id(), self.ids.new_span_id()),
            (None, None) => (self.ids.new_trace_id(), self.ids.new_span_id()),
        };
        let parent_span = parent.as_ref().map(|p| p.span_id().to_bytes());
        let trace_state = parent
            .map(|p| p.trace_state().header())
            .filter(|s| !s.is_empty())
            .map(String::into_boxed_str);
        let unix_nanos = |at: std::time::SystemTime| {
            at.duration_since(UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        };
        let start = unix_nanos(call.started);
        self.queue.push(Ended {
            trace_id: trace_id.to_bytes(),
            span_id: span_id.to_bytes(),
            parent: parent_span,
            trace_state,
            tool: call.tool.into(),
            digest: receipt.and_then(|r| r.proposal_sha256()),
            decision,
            reason,
            status,
            failed: status == "unknown" || reason == "host_error",
            start_unix_nanos: start,
            end_unix_nanos: start.saturating_add(u64::try_from(call.elapsed.as_nanos()).unwrap_or(u64::MAX)),
        });
    }

    /// The gate's span as the server's parent: the client's trace (or a new one), a span id
    /// of the gate's, the client's valid `tracestate`.
    fn forward_trace(&self, call: &ForwardedCall<'_>) -> Option<TransportTrace> {
        let parent = parent_of(call.meta, call.trace);
        let trace_id = parent
            .as_ref()
            .map_or_else(|| self.ids.new_trace_id(), SpanContext::trace_id);
        let span_id = self.ids.new_span_id();
        let state = parent.map(|p| p.trace_state().header()).filter(|s| !s.is_empty());
        Some(TransportTrace::new(traceparent(trace_id, span_id), state))
    }
}

/// The version-00, sampled `traceparent` of a span.
fn traceparent(trace_id: TraceId, span_id: SpanId) -> String {
    let mut text = String::with_capacity(55);
    text.push_str("00-");
    push_hex(&mut text, &trace_id.to_bytes());
    text.push('-');
    push_hex(&mut text, &span_id.to_bytes());
    text.push_str("-01");
    text
}

/// Lower-case hex, as W3C Trace Context writes ids.
fn push_hex(out: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 15)]));
    }
}

/// The call's parent: its own `_meta` first (MCP's place for it), then the POST's headers.
fn parent_of(meta: Option<&str>, trace: Option<&TransportTrace>) -> Option<SpanContext> {
    meta.and_then(meta_traceparent).or_else(|| {
        let trace = trace?;
        parse_traceparent(trace.traceparent(), trace.tracestate())
    })
}

/// The `traceparent` member of a `_meta` object's raw text, if it is a valid W3C one, with
/// its `tracestate` member.
fn meta_traceparent(meta: &str) -> Option<SpanContext> {
    #[derive(serde::Deserialize)]
    struct Meta<'a> {
        #[serde(borrow)]
        traceparent: Option<std::borrow::Cow<'a, str>>,
        // Any JSON: a tracestate that is no string is dropped, the parent still continued.
        #[serde(default)]
        tracestate: Option<serde_json::Value>,
    }
    let meta: Meta<'_> = serde_json::from_str(meta).ok()?;
    let state = meta.tracestate.as_ref().and_then(serde_json::Value::as_str);
    parse_traceparent(meta.traceparent.as_deref()?, state)
}

/// A W3C Trace Context `traceparent` (version-traceid-parentid-flags), as the specification
/// reads it: version `ff`, an all-zero id, upper-case hex or (for version 00) anything after
/// the flags make it invalid. A later version's extra fields are ignored. Its `tracestate`
/// is kept when valid, and dropped (the parent still continued) when not, as the
/// specification says.
pub(crate) fn parse_traceparent(value: &str, tracestate: Option<&str>) -> Option<SpanContext> {
    let value = value.trim_matches([' ', '\t']);
    let hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let mut parts = value.splitn(5, '-');
    let (version, trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let extra = parts.next();
    if !hex(version, 2) || version == "ff" || (version == "00" && extra.is_some()) {
        return None;
    }
    if !hex(trace, 32) || !hex(span, 16) || flags.len() < 2 || !hex(&flags[..2], 2) {
        return None;
    }
    if version == "00" && flags.len() != 2 {
        return None;
    }
    let trace = TraceId::from_hex(trace).ok().filter(|t| *t != TraceId::INVALID)?;
    let span = SpanId::from_hex(span).ok().filter(|s| *s != SpanId::INVALID)?;
    let flags = u8::from_str_radix(&flags[..2], 16).ok()?;
    let state = tracestate
        .and_then(|s| s.parse::<TraceState>().ok())
        .unwrap_or_default();
    Some(SpanContext::new(
        trace,
        span,
        TraceFlags::new(flags) & TraceFlags::SAMPLED,
        true,
        state,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_valid_traceparent_is_continued_and_an_invalid_one_ignored() {
        let sc = parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", None).unwrap();
        assert_eq!(sc.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(sc.span_id().to_string(), "00f067aa0ba902b7");
        assert!(sc.is_sampled() && sc.is_remote());
        assert!(parse_traceparent(
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later",
            None
        )
        .is_some());
        for bad in [
            "",
            "garbage",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
        ] {
            assert!(parse_traceparent(bad, None).is_none(), "{bad:?}");
        }
        let meta = r#"{"progressToken": 1, "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"}"#;
        assert!(meta_traceparent(meta).is_some_and(|sc| !sc.is_sampled()));
        assert!(meta_traceparent(r#"{"traceparent": 7}"#).is_none());
        let with_state = r#"{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate": "vendor=a1,other=b2"}"#;
        let state = meta_traceparent(with_state).unwrap().trace_state().header();
        assert_eq!(state, "vendor=a1,other=b2");
        // A bad tracestate is dropped; the parent is still continued.
        for bad in [r#""not a list""#, "7", r#""Upper=x""#] {
            let meta = format!(
                r#"{{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate": {bad}}}"#
            );
            let sc = meta_traceparent(&meta).unwrap_or_else(|| panic!("{meta}"));
            assert_eq!(sc.trace_state().header(), "", "{bad}");
        }
        assert!(meta_traceparent("[]").is_none());
    }

    #[test]
    fn the_traceparent_sent_upstream_is_read_back_as_the_same_span() {
        let (trace, span) = (
            TraceId::from(0x0af7_6519_16cd_43dd_8448_eb21_1c80_319c),
            SpanId::from(0xb7),
        );
        let text = traceparent(trace, span);
        assert_eq!(text, "00-0af7651916cd43dd8448eb211c80319c-00000000000000b7-01");
        let read = parse_traceparent(&text, None).unwrap();
        assert_eq!((read.trace_id(), read.span_id()), (trace, span));
        assert!(read.is_sampled());
    }

    #[test]
    fn the_endpoint_is_an_http_url_and_spans_go_to_v1_traces() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318").unwrap(),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://127.0.0.1:4318/").unwrap(),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://collector:4318/custom/traces").unwrap(),
            "http://collector:4318/custom/traces"
        );
        for bad in [
            "127.0.0.1:4318",
            "https://x:4318",
            "grpc://x:4317",
            "http://",
            "http://u:p@x:4318",
            "http:// x",
        ] {
            assert!(traces_url(bad).is_err(), "{bad:?}");
        }
    }
}
