//! The span exporter of `--otlp-endpoint` (ADR 025): each ended call is queued as a small
//! record; a task on the gate's runtime encodes up to [`BATCH`] of them as one OTLP/HTTP
//! protobuf request (`ExportTraceServiceRequest`, the `opentelemetry-proto` types, resource
//! and scope written once) and posts it. The request's messages are kept from batch to
//! batch and refilled in place, so a steady stream of calls allocates nothing to encode.
//!
//! A call never waits for an export: when [`QUEUE`] records wait already, a new one is
//! dropped and counted, and the count is logged with the next export.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aml_core::Sha256Digest;
use opentelemetry_http::{Bytes, HttpClient, Request};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{
    span::SpanKind, status::StatusCode, ResourceSpans, ScopeSpans, Span, Status,
};
use prost::Message as _;
use tokio::sync::{mpsc, oneshot, Notify};

/// Records encoded into one request.
pub(crate) const BATCH: usize = 512;
/// Records that may wait for the exporter; more are dropped.
pub(crate) const QUEUE: usize = 4 * BATCH;
/// The longest a record waits when fewer than [`BATCH`] are queued.
const DELAY: Duration = Duration::from_secs(1);
/// How long one export may take.
pub(crate) const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The span attributes, in the order `fill` writes them.
const ATTRIBUTES: [&str; 6] = [
    "aml.digest",
    "aml.decision",
    "aml.reason",
    "aml.tool",
    "aml.server",
    "aml.status",
];

/// One ended call, as the span exporter needs it.
#[derive(Debug)]
pub(crate) struct Ended {
    pub(crate) trace_id: [u8; 16],
    pub(crate) span_id: [u8; 8],
    /// The client's span, when the call continued its trace.
    pub(crate) parent: Option<[u8; 8]>,
    /// The client's `tracestate`, when valid and not empty.
    pub(crate) trace_state: Option<Box<str>>,
    pub(crate) tool: Box<str>,
    pub(crate) digest: Option<Sha256Digest>,
    pub(crate) decision: &'static str,
    pub(crate) reason: &'static str,
    pub(crate) status: &'static str,
    /// An `unknown` dispatch or a host error: the span's status is an error.
    pub(crate) failed: bool,
    pub(crate) start_unix_nanos: u64,
    pub(crate) end_unix_nanos: u64,
}

/// The records waiting for the exporter.
#[derive(Debug, Default)]
pub(crate) struct Queue {
    ended: Mutex<Vec<Ended>>,
    dropped: AtomicU64,
    full_batch: Notify,
}

impl Queue {
    /// Queues one record (or drops it when [`QUEUE`] wait already); wakes the exporter
    /// when a batch is full.
    pub(crate) fn push(&self, ended: Ended) {
        let mut queued = self.ended.lock().unwrap_or_else(|p| p.into_inner());
        if queued.len() >= QUEUE {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        queued.push(ended);
        let full = queued.len() == BATCH;
        drop(queued);
        if full {
            self.full_batch.notify_one();
        }
    }

    /// Moves every queued record into `into` (emptied first, its capacity kept).
    fn take(&self, into: &mut Vec<Ended>) {
        into.clear();
        let mut queued = self.ended.lock().unwrap_or_else(|p| p.into_inner());
        std::mem::swap(&mut *queued, into);
    }
}

/// A request to export what is queued now; answered when it has been.
pub(crate) type Flush = oneshot::Sender<()>;

/// The headers every export request carries besides its content type: the OpenTelemetry
/// variable `OTEL_EXPORTER_OTLP_TRACES_HEADERS`, else `OTEL_EXPORTER_OTLP_HEADERS` (a
/// collector's token, say).
pub(crate) fn env_headers() -> Result<Vec<(http::HeaderName, http::HeaderValue)>, String> {
    for name in ["OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"] {
        match std::env::var(name) {
            Ok(value) => return parse_headers(&value).map_err(|why| format!("{name}: {why}")),
            Err(std::env::VarError::NotPresent) => {}
            Err(std::env::VarError::NotUnicode(_)) => return Err(format!("{name}: not UTF-8")),
        }
    }
    Ok(Vec::new())
}

/// `key=value` pairs separated by commas, values percent-encoded, as the OpenTelemetry
/// specification writes the headers variables; anything else is refused, not skipped.
fn parse_headers(text: &str) -> Result<Vec<(http::HeaderName, http::HeaderValue)>, String> {
    let mut headers = Vec::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("{pair:?} is not key=value"))?;
        let name = http::HeaderName::from_bytes(key.trim().as_bytes())
            .map_err(|_| format!("{:?} is not a header name", key.trim()))?;
        let decoded: Vec<u8> = percent_encoding::percent_decode_str(value.trim()).collect();
        let value = http::HeaderValue::from_bytes(&decoded)
            .map_err(|_| format!("the value of {name} is not a header value"))?;
        headers.push((name, value));
    }
    Ok(headers)
}

/// Starts the exporter on `runtime`: it posts to `url`, with `headers`, until `flushes` is
/// closed, then exports what is left and ends.
pub(crate) fn spawn(
    runtime: &tokio::runtime::Handle,
    url: String,
    headers: Vec<(http::HeaderName, http::HeaderValue)>,
    server: &str,
    queue: Arc<Queue>,
    flushes: mpsc::Receiver<Flush>,
) {
    let client = opentelemetry_http::hyper::HyperClient::with_default_connector(EXPORT_TIMEOUT, None);
    let exporter = Exporter {
        client,
        url,
        headers,
        queue,
        encoder: Encoder::new(server),
        taken: Vec::with_capacity(QUEUE),
    };
    runtime.spawn(exporter.run(flushes));
}

struct Exporter {
    client: opentelemetry_http::hyper::HyperClient,
    url: String,
    headers: Vec<(http::HeaderName, http::HeaderValue)>,
    queue: Arc<Queue>,
    encoder: Encoder,
    taken: Vec<Ended>,
}

impl Exporter {
    async fn run(mut self, mut flushes: mpsc::Receiver<Flush>) {
        loop {
            let flush = tokio::select! {
                () = self.queue.full_batch.notified() => None,
                () = tokio::time::sleep(DELAY) => None,
                flush = flushes.recv() => match flush {
                    Some(flush) => Some(flush),
                    None => {
                        self.export_queued().await;
                        return;
                    }
                },
            };
            self.export_queued().await;
            if let Some(flush) = flush {
                let _ = flush.send(());
            }
        }
    }

    /// Exports every record queued now, [`BATCH`] per request.
    async fn export_queued(&mut self) {
        self.queue.take(&mut self.taken);
        let dropped = self.queue.dropped.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            tracing::warn!("otlp: {dropped} spans dropped: more than {QUEUE} were waiting for the exporter");
        }
        let taken = std::mem::take(&mut self.taken);
        for batch in taken.chunks(BATCH) {
            let body = self.encoder.encode(batch);
            self.post(body).await;
        }
        self.taken = taken;
    }

    async fn post(&self, body: Bytes) {
        let mut request = match Request::post(&self.url).body(body) {
            Ok(request) => request,
            Err(e) => return tracing::warn!("otlp: cannot build a request to {}: {e}", self.url),
        };
        let headers = request.headers_mut();
        for (name, value) in &self.headers {
            headers.append(name, value.clone());
        }
        headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/x-protobuf"),
        );
        match tokio::time::timeout(EXPORT_TIMEOUT, self.client.send_bytes(request)).await {
            Ok(Ok(response)) if response.status().is_success() => {}
            Ok(Ok(response)) => tracing::warn!(
                "otlp: {} answered {}; those spans are lost",
                self.url,
                response.status()
            ),
            Ok(Err(e)) => tracing::warn!(
                "otlp: cannot export spans to {}: {e}; those spans are lost",
                self.url
            ),
            Err(_) => tracing::warn!(
                "otlp: cannot export spans to {}: no answer within {EXPORT_TIMEOUT:?}; those spans are lost",
                self.url
            ),
        }
    }
}

/// Writes `ExportTraceServiceRequest` bodies. The spans' messages are kept and refilled for
/// each batch. The framing around them (the one `ResourceSpans` and its one `ScopeSpans`) is
/// written here: prost, given the whole request, would measure every span again at each of
/// the three levels that hold it.
struct Encoder {
    /// `ResourceSpans.resource` (field 1), encoded once.
    resource: Vec<u8>,
    /// `ScopeSpans.scope` (field 1), encoded once.
    scope: Vec<u8>,
    spans: Vec<Span>,
    /// Each span as `ScopeSpans.spans` (field 2), for one batch.
    encoded: Vec<u8>,
    server: String,
}

/// The protobuf key of a length-delimited field 1 and field 2 (tag << 3 | wire type 2).
const FIELD_1: u8 = 0x0a;
const FIELD_2: u8 = 0x12;

impl Encoder {
    fn new(server: &str) -> Encoder {
        let text = |key: &str, value: &str| KeyValue {
            key: key.to_owned(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(value.to_owned())),
            }),
            ..Default::default()
        };
        let resource = Resource {
            attributes: vec![text("service.name", "aml-mcp-gate")],
            ..Default::default()
        };
        let scope = InstrumentationScope {
            name: "aml-mcp-gate".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            ..Default::default()
        };
        Encoder {
            resource: ResourceSpans {
                resource: Some(resource),
                ..Default::default()
            }
            .encode_to_vec(),
            scope: ScopeSpans {
                scope: Some(scope),
                ..Default::default()
            }
            .encode_to_vec(),
            spans: Vec::new(),
            encoded: Vec::new(),
            server: server.to_owned(),
        }
    }

    /// The protobuf body of one request holding `batch`.
    fn encode(&mut self, batch: &[Ended]) -> Bytes {
        self.spans.truncate(batch.len());
        self.spans.resize_with(batch.len(), new_span);
        self.encoded.clear();
        for (span, ended) in self.spans.iter_mut().zip(batch) {
            fill(span, ended, &self.server);
            self.encoded.push(FIELD_2);
            // A Vec grows as needed: encoding into one cannot fail.
            let _ = span.encode_length_delimited(&mut self.encoded);
        }
        let scope_spans = self.scope.len() + self.encoded.len();
        let resource_spans = self.resource.len() + 1 + prost::length_delimiter_len(scope_spans) + scope_spans;
        let mut body = Vec::with_capacity(1 + prost::length_delimiter_len(resource_spans) + resource_spans);
        body.push(FIELD_1);
        let _ = prost::encode_length_delimiter(resource_spans, &mut body);
        body.extend_from_slice(&self.resource);
        body.push(FIELD_2);
        let _ = prost::encode_length_delimiter(scope_spans, &mut body);
        body.extend_from_slice(&self.scope);
        body.extend_from_slice(&self.encoded);
        Bytes::from(body)
    }
}

fn new_span() -> Span {
    let attributes = ATTRIBUTES
        .iter()
        .map(|key| KeyValue {
            key: (*key).to_owned(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(String::new())),
            }),
            ..Default::default()
        })
        .collect();
    Span {
        kind: SpanKind::Server as i32,
        attributes,
        ..Default::default()
    }
}

/// W3C flags (always sampled: every call is recorded) and OTLP's "the parent is known to be
/// remote or not" bits.
const SAMPLED: u32 = 0x01;
const HAS_IS_REMOTE: u32 = 0x100;
const IS_REMOTE: u32 = 0x200;

fn fill(span: &mut Span, ended: &Ended, server: &str) {
    replace(&mut span.trace_id, &ended.trace_id);
    replace(&mut span.span_id, &ended.span_id);
    replace(
        &mut span.parent_span_id,
        ended.parent.as_ref().map_or(&[][..], |p| &p[..]),
    );
    span.trace_state.clear();
    span.trace_state
        .push_str(ended.trace_state.as_deref().unwrap_or(""));
    span.flags = SAMPLED | HAS_IS_REMOTE | if ended.parent.is_some() { IS_REMOTE } else { 0 };
    span.name.clear();
    span.name.push_str("tools/call ");
    span.name.push_str(&ended.tool);
    span.start_time_unix_nano = ended.start_unix_nanos;
    span.end_time_unix_nano = ended.end_unix_nanos;
    let digest = ended.digest.map(|d| d.hex());
    let digest = digest.as_ref().map_or("", |d| d.as_str());
    let values = [
        digest,
        ended.decision,
        ended.reason,
        &ended.tool,
        server,
        ended.status,
    ];
    for (attribute, value) in span.attributes.iter_mut().zip(values) {
        set_text(attribute, value);
    }
    span.status = ended.failed.then(|| Status {
        message: ended.reason.to_owned(),
        code: StatusCode::Error as i32,
    });
}

fn replace(bytes: &mut Vec<u8>, with: &[u8]) {
    bytes.clear();
    bytes.extend_from_slice(with);
}

/// Sets an attribute's string value, reusing the string it holds (made by [`new_span`]).
fn set_text(attribute: &mut KeyValue, text: &str) {
    match &mut attribute.value {
        Some(AnyValue {
            value: Some(any_value::Value::StringValue(held)),
        }) => {
            held.clear();
            held.push_str(text);
        }
        other => {
            *other = Some(AnyValue {
                value: Some(any_value::Value::StringValue(text.to_owned())),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

    use super::*;

    fn ended(tool: &str, parent: Option<[u8; 8]>, failed: bool) -> Ended {
        Ended {
            trace_id: [7; 16],
            span_id: [9; 8],
            parent,
            trace_state: parent.map(|_| "vendor=a1".into()),
            tool: tool.into(),
            digest: Some(Sha256Digest::of(tool.as_bytes())),
            decision: "allow",
            reason: if failed { "tool_failed" } else { "dispatched" },
            status: if failed { "unknown" } else { "dispatched" },
            failed,
            start_unix_nanos: 10,
            end_unix_nanos: 25,
        }
    }

    #[test]
    fn a_batch_decodes_as_the_calls_it_holds_and_a_refill_keeps_nothing_of_the_last() {
        let mut encoder = Encoder::new("npx");
        let first = [ended("echo", Some([3; 8]), false), ended("get-sum", None, true)];
        let _ = encoder.encode(&first);
        let second = [ended("get-env", None, false)];
        let body = encoder.encode(&second);
        let decoded = ExportTraceServiceRequest::decode(body).unwrap();
        let resource = &decoded.resource_spans[0];
        let service = &resource.resource.as_ref().unwrap().attributes[0];
        assert_eq!(service.key, "service.name");
        let spans = &resource.scope_spans[0].spans;
        assert_eq!(spans.len(), 1, "the refill holds this batch only");
        let span = &spans[0];
        assert_eq!(span.name, "tools/call get-env");
        assert_eq!(
            (span.trace_id.as_slice(), span.span_id.as_slice()),
            (&[7; 16][..], &[9; 8][..])
        );
        assert!(span.parent_span_id.is_empty() && span.trace_state.is_empty());
        assert_eq!(span.flags, SAMPLED | HAS_IS_REMOTE);
        assert_eq!(span.status, None);
        let attributes: Vec<(&str, String)> = span
            .attributes
            .iter()
            .map(|a| match &a.value.as_ref().unwrap().value {
                Some(any_value::Value::StringValue(s)) => (a.key.as_str(), s.clone()),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            attributes[0],
            ("aml.digest", Sha256Digest::of(b"get-env").to_string())
        );
        assert_eq!(attributes[3], ("aml.tool", "get-env".to_owned()));
        assert_eq!(attributes[4], ("aml.server", "npx".to_owned()));

        let body = encoder.encode(&first);
        // The hand-written framing is byte for byte prost's for the whole request.
        let whole = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: ResourceSpans::decode(&encoder.resource[..]).unwrap().resource,
                scope_spans: vec![ScopeSpans {
                    scope: ScopeSpans::decode(&encoder.scope[..]).unwrap().scope,
                    spans: encoder.spans.clone(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        assert_eq!(body, whole.encode_to_vec());
        let decoded = ExportTraceServiceRequest::decode(body).unwrap();
        let spans = &decoded.resource_spans[0].scope_spans[0].spans;
        assert_eq!(spans[0].parent_span_id, [3; 8]);
        assert_eq!(spans[0].trace_state, "vendor=a1");
        assert_eq!(spans[0].flags, SAMPLED | HAS_IS_REMOTE | IS_REMOTE);
        assert_eq!(spans[1].status.as_ref().unwrap().code, StatusCode::Error as i32);
        assert_eq!(spans[1].status.as_ref().unwrap().message, "tool_failed");
    }

    #[test]
    fn the_headers_variable_is_read_as_the_specification_writes_it_and_a_bad_one_refused() {
        let headers = parse_headers("api-key=secret%20one, x-tenant = a ,").unwrap();
        let shown: Vec<(&str, &[u8])> = headers.iter().map(|(n, v)| (n.as_str(), v.as_bytes())).collect();
        assert_eq!(shown, [("api-key", &b"secret one"[..]), ("x-tenant", b"a")]);
        assert!(parse_headers("").unwrap().is_empty());
        for bad in ["novalue", "bad name=x", "k=a%0Ab"] {
            assert!(parse_headers(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_full_queue_drops_and_counts_instead_of_growing() {
        let queue = Queue::default();
        for _ in 0..QUEUE + 3 {
            queue.push(ended("echo", None, false));
        }
        let mut taken = Vec::new();
        queue.take(&mut taken);
        assert_eq!(taken.len(), QUEUE);
        assert_eq!(queue.dropped.load(Ordering::Relaxed), 3);
        queue.take(&mut taken);
        assert!(taken.is_empty());
    }
}
