"""An OTLP/HTTP trace receiver on loopback: what a collector (Tempo, Jaeger, Langfuse) receives from Parley.

It serves ``POST /v1/traces`` on 127.0.0.1 and a free port, decodes each body as an ``ExportTraceServiceRequest``
with ``opentelemetry-proto`` (protobuf, gzip or not, as the OTLP/HTTP exporter sends it) and keeps every span, with
the service that sent it, for a test to read.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.support.loopback import LoopbackPeer, ServedInThread
from tests.support.workers import wait_until


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as received: ids in hex (``parent`` empty for a root), attributes decoded."""

    service: str
    trace_id: str
    span_id: str
    parent: str
    name: str
    kind: int
    attributes: dict[str, Any]
    links: list[tuple[str, str]] = field(default_factory=list)
    error: bool = False
    start_ns: int = 0
    end_ns: int = 0
    resource: dict[str, Any] = field(default_factory=dict)


class OtlpReceiver(LoopbackPeer):
    """``receiver.url`` is what ``OTEL_EXPORTER_OTLP_ENDPOINT`` names; ``receiver.spans`` what arrived so far."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    raw = gzip.decompress(raw)
                if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                receiver._take(ExportTraceServiceRequest.FromString(raw))
                body = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.http = ServedInThread(Handler)

    def _take(self, request: ExportTraceServiceRequest) -> None:
        got: list[ReceivedSpan] = []
        for rs in request.resource_spans:
            resource = {a.key: _value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    got.append(ReceivedSpan(
                        service=str(resource.get("service.name", "")), trace_id=s.trace_id.hex(),
                        span_id=s.span_id.hex(), parent=s.parent_span_id.hex(), name=s.name, kind=s.kind,
                        attributes={a.key: _value(a.value) for a in s.attributes},
                        links=[(lk.trace_id.hex(), lk.span_id.hex()) for lk in s.links],
                        error=s.status.code == 2, start_ns=s.start_time_unix_nano, end_ns=s.end_time_unix_nano,
                        resource=resource))
        with self._lock:
            self.requests += 1
            self.spans.extend(got)

    def named(self, name: str) -> list[ReceivedSpan]:
        with self._lock:
            return [s for s in self.spans if s.name == name]

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        with self._lock:
            return [s for s in self.spans if s.trace_id == trace_id]

    def wait_for(self, check: Callable[[], bool], timeout: float = 30.0) -> bool:
        return bool(wait_until(check, timeout))


def otel_env(receiver: OtlpReceiver, service: str) -> dict[str, str]:
    """The standard variables that send a process's traces to ``receiver``, exported within 100 ms."""
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_SERVICE_NAME": service,
            "OTEL_BSP_SCHEDULE_DELAY": "100"}
