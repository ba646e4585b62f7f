"""OpenTelemetry traces: one trace per run, across every service.

Off unless a backend is configured: an OTLP endpoint (`WAYBILL_OTLP_ENDPOINT`, or
the standard `OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT`, over gRPC or, with
`OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf`, HTTP), or Langfuse's keys. Otherwise
nothing is installed, and `run_span` only tags the log context. The standard
`OTEL_*` variables are honoured (service name, resource attributes, headers).

When on, a run's trace id *is* its run id (the UUID's 128 bits): any process that
works on a run opens its spans in that trace without being told, which matters
because a run travels on paths no request context follows (a runner's long-lived
`Work` stream, a takeover by another runner). gRPC calls are instrumented, and
carry the run in OpenTelemetry baggage; `RunAttributes` copies it onto every
span, so the auto-made gRPC server spans carry run_id / thread_id too.
"""

from __future__ import annotations

import base64
import logging
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import baggage, context, trace
from opentelemetry.sdk.trace import Span, SpanProcessor

from waybill.common.extras import needs_extra
from waybill.common.logs import bind_run
from waybill.common.settings import get_settings

log = logging.getLogger("waybill.tracing")

RUN_ATTRIBUTE = "waybill.run_id"
THREAD_ATTRIBUTE = "waybill.thread_id"

_tracer: trace.Tracer | None = None  # None: tracing is off


def tracing_endpoint() -> str | None:
    """The OTLP collector: `WAYBILL_OTLP_ENDPOINT`, else the standard variables."""
    settings = get_settings()
    return (
        settings.otlp_endpoint
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )


def otlp_protocol() -> str:
    """`grpc` (the default) or `http/protobuf`, as the OTel SDKs read it."""
    return (
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "grpc"
    ).strip()


def tracing_on() -> bool:
    return _tracer is not None


def start_tracing(service: str) -> bool:
    """Install the exporters and the gRPC instrumentation, before any channel or
    server is made. False (and nothing installed) when no backend is configured:
    an OTLP endpoint, or Langfuse's keys."""
    global _tracer
    if _tracer is not None:
        return True
    with needs_extra("otel", "tracing (an OTLP endpoint or Langfuse keys are set)"):
        exporters = span_exporters()
        if not exporters:
            return False
        from opentelemetry.instrumentation.grpc import (
            GrpcAioInstrumentorClient,
            GrpcAioInstrumentorServer,
        )
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    settings = get_settings()
    provider = TracerProvider(resource=service_resource(service))
    provider.add_span_processor(RunAttributes())
    delay = int(settings.otlp_export_seconds * 1000)
    for where, exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=delay))
        log.info("tracing on: spans go to %s", where)
    trace.set_tracer_provider(provider)
    GrpcAioInstrumentorClient().instrument()
    GrpcAioInstrumentorServer().instrument()
    _tracer = trace.get_tracer("waybill")
    return True


def service_resource(service: str) -> Any:
    """`OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` as the SDK reads them; the
    service name defaults to `waybill-<service>`, and `waybill.service` always says
    which process it is (several may share one OTEL_SERVICE_NAME)."""
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource

    resource = Resource.create({"waybill.service": service})
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: f"waybill-{service}"}))
    return resource


def span_exporters() -> list[tuple[str, Any]]:
    """(where, exporter) for each configured backend."""
    exporters = []
    endpoint = tracing_endpoint()
    if endpoint:
        exporter = _otlp_exporter(endpoint, otlp_protocol())
        if exporter is not None:
            exporters.append((f"{endpoint} (OTLP {otlp_protocol()})", exporter))
    langfuse = _langfuse_exporter()
    if langfuse is not None:
        exporters.append(langfuse)
    return exporters


def _otlp_exporter(endpoint: str, protocol: str) -> Any:
    """The exporter reads the rest of the standard variables itself (headers,
    certificates, compression, timeout). `WAYBILL_OTLP_ENDPOINT` is a base URL."""
    waybill_endpoint = get_settings().otlp_endpoint
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(endpoint=endpoint, insecure=endpoint.startswith("http://"))
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HTTPSpanExporter,
        )

        # Given no endpoint, it reads OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as-is, or
        # OTEL_EXPORTER_OTLP_ENDPOINT plus /v1/traces: the spec's rule.
        if waybill_endpoint:
            return HTTPSpanExporter(endpoint=waybill_endpoint.rstrip("/") + "/v1/traces")
        return HTTPSpanExporter()
    log.error("tracing: OTLP protocol %r is not supported (grpc, http/protobuf): no OTLP", protocol)
    return None


LANGFUSE_OTLP_PATH = "/api/public/otel/v1/traces"


def _langfuse_exporter() -> tuple[str, Any] | None:
    """Langfuse takes OTLP over HTTP, authenticated by its key pair: switched on by
    its usual variables (LANGFUSE_PUBLIC_KEY, LANGFUSE_SECRET_KEY, LANGFUSE_HOST)."""
    public, secret = os.environ.get("LANGFUSE_PUBLIC_KEY"), os.environ.get("LANGFUSE_SECRET_KEY")
    if not (public and secret):
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HTTPSpanExporter,
    )

    host = (
        os.environ.get("LANGFUSE_HOST")
        or os.environ.get("LANGFUSE_BASE_URL")
        or "https://cloud.langfuse.com"
    )
    endpoint = host.rstrip("/") + LANGFUSE_OTLP_PATH
    token = base64.b64encode(f"{public}:{secret}".encode()).decode()
    return f"{endpoint} (Langfuse)", HTTPSpanExporter(
        endpoint=endpoint, headers={"Authorization": f"Basic {token}"}
    )


def _run_parent(run_id: str, current: context.Context) -> context.Context:
    """The context of the run's trace (trace id = the run id), keeping `current`'s baggage."""
    trace_id = uuid.UUID(run_id).int
    span_id = (trace_id & 0xFFFFFFFFFFFFFFFF) or 1
    parent = trace.SpanContext(
        trace_id,
        span_id,
        is_remote=True,
        trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
    )
    return trace.set_span_in_context(trace.NonRecordingSpan(parent), current)


@contextmanager
def run_span(
    name: str,
    run_id: str,
    thread_id: str | None = None,
    user_id: str | None = None,
    **attributes: Any,
) -> Iterator[None]:
    """Work on one run: its log lines carry the run, and (tracing on) a span in
    the run's trace wraps it, linked to the request span it was opened in."""
    if _tracer is None or not _is_uuid(run_id):
        bind_run(run_id, thread_id, user_id)
        yield
        return
    here = context.get_current()
    if not thread_id and baggage.get_baggage(RUN_ATTRIBUTE, here) == run_id:
        thread_id = _str(baggage.get_baggage(THREAD_ATTRIBUTE, here))  # the caller's run
    bind_run(run_id, thread_id, user_id)
    current = trace.get_current_span(here).get_span_context()
    links = [trace.Link(current)] if current.is_valid and current.trace_id != _id(run_id) else []
    parent = _run_parent(run_id, here)
    parent = baggage.set_baggage(RUN_ATTRIBUTE, run_id, parent)
    if thread_id:
        parent = baggage.set_baggage(THREAD_ATTRIBUTE, thread_id, parent)
    else:  # a long-lived stream's baggage names another run's thread
        parent = baggage.remove_baggage(THREAD_ATTRIBUTE, parent)
    token = context.attach(parent)
    try:
        span_attributes = {RUN_ATTRIBUTE: run_id, **attributes}
        if thread_id:
            span_attributes[THREAD_ATTRIBUTE] = thread_id
        with _tracer.start_as_current_span(name, attributes=span_attributes, links=links):
            yield
    finally:
        context.detach(token)


def _str(value: object) -> str | None:
    return str(value) if value else None


def _id(run_id: str) -> int:
    return uuid.UUID(run_id).int


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


class RunAttributes(SpanProcessor):
    """Every span started where a run is in the baggage carries its ids."""

    def on_start(self, span: Span, parent_context: context.Context | None = None) -> None:
        for key in (RUN_ATTRIBUTE, THREAD_ATTRIBUTE):
            value = baggage.get_baggage(key, parent_context)
            if value and not (span.attributes or {}).get(key):
                span.set_attribute(key, str(value))
