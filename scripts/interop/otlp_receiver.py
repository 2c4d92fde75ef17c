"""An OTLP/HTTP trace receiver for the gate's tests (aml-mcp-gate/tests/it/traces.rs).

Listens on 127.0.0.1:0 and prints `otlp receiver on PORT` once ready. Every POST to
/v1/traces is decoded with the official `opentelemetry-proto` package
(ExportTraceServiceRequest, protobuf) and each span is appended to OUT as one JSON line:
trace and span ids (hex), parent span id, name, kind, start and end (ns), the resource's
service.name, the span's attributes (string values), and the headers of the POST that
carried it (names in lower case). A body that does not decode is
answered 400 and written as {"error": ...}. Runs until killed.

    python otlp_receiver.py OUT.jsonl
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

OUT = sys.argv[1]


def value_of(any_value):
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def spans_of(request, headers):
    for resource_spans in request.resource_spans:
        resource = {a.key: value_of(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield {
                    "trace_id": span.trace_id.hex(),
                    "span_id": span.span_id.hex(),
                    "parent_span_id": span.parent_span_id.hex(),
                    "trace_state": span.trace_state,
                    "name": span.name,
                    "kind": span.kind,
                    "start_ns": span.start_time_unix_nano,
                    "end_ns": span.end_time_unix_nano,
                    "service": resource.get("service.name"),
                    "scope": scope_spans.scope.name,
                    "attributes": {a.key: value_of(a.value) for a in span.attributes},
                    "post_headers": headers,
                }


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        lines = []
        try:
            if self.path != "/v1/traces":
                raise ValueError(f"posted to {self.path}, not /v1/traces")
            if self.headers.get("content-type") != "application/x-protobuf":
                raise ValueError(f"content-type {self.headers.get('content-type')}")
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            headers = {k.lower(): v for k, v in self.headers.items()}
            lines = [json.dumps(span) for span in spans_of(request, headers)]
            status, answer = 200, ExportTraceServiceResponse().SerializeToString()
        except Exception as e:  # noqa: BLE001 - reported to the test
            lines = [json.dumps({"error": str(e)})]
            status, answer = 400, b""
        with open(OUT, "a", encoding="utf-8") as out:
            for line in lines:
                out.write(line + "\n")
        self.send_response(status)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"otlp receiver on {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
