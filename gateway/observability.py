"""The gateway's metrics, its `/metrics` endpoint, and the run its log lines concern."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Response
from opentelemetry import trace
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, generate_latest

from waybill.common.logs import bind_run
from waybill.common.metrics import register_build_info
from waybill.common.tracing import run_span, tracing_on
from waybill.v1 import common_pb2

STREAMS_ACTIVE = Gauge("waybill_gateway_streams_active", "SSE streams of run events open now.")
STREAMS_OPENED = Counter("waybill_gateway_streams", "SSE streams of run events opened.")
STREAMS_ENDED = Counter(
    "waybill_gateway_streams_ended",
    "SSE streams closed, by how: the run's log ended, or the client left first.",
    ["how"],
)

_RUN_PATH = re.compile(r"/threads/([0-9a-fA-F-]{36})(?:/runs/([0-9a-fA-F-]{36}))?")


async def observed_stream(
    run: common_pb2.Run, frames: AsyncIterator[bytes]
) -> AsyncIterator[bytes]:
    """One SSE stream: counted while open, and a span in the run's trace (tracing on).
    Counted once a stream, never per event."""
    STREAMS_OPENED.inc()
    STREAMS_ACTIVE.inc()
    how = "client_left"
    try:
        with run_span("gateway.stream", run.run_id, run.thread_id):
            async for frame in frames:
                yield frame
            how = "complete"
    finally:
        STREAMS_ACTIVE.dec()
        STREAMS_ENDED.labels(how).inc()


class RunLogContext:
    """Tags a request's log lines (uvicorn's access line included) with the thread
    and run its path names. Pure ASGI, so the tags reach the endpoint's task."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            found = _RUN_PATH.match(scope.get("path", ""))
            if found:
                bind_run(run_id=found.group(2), thread_id=found.group(1))
        await self.app(scope, receive, send)


def install(app: FastAPI) -> None:
    """`/metrics`, the log tags, and (tracing on) a server span per HTTP request."""
    register_build_info("gateway")

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    app.add_middleware(RunLogContext)
    if tracing_on():
        from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware

        app.add_middleware(RouteSpanName)  # inside the server span's middleware
        # No span per ASGI receive/send: an SSE stream would make one per event.
        app.add_middleware(
            OpenTelemetryMiddleware,
            excluded_urls="/ok,/metrics",
            exclude_spans=["receive", "send"],
        )


class RouteSpanName:
    """HTTP server spans named `METHOD /route/{template}` (with `http.route`), as the
    semantic conventions ask: a literal path (ids in it) would make every span name
    unique. The route is known once routing has run, so the span (opened by the
    OpenTelemetry middleware around this one) is renamed when the response starts,
    before that middleware ends it; a path no route matched keeps its default name."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        span = trace.get_current_span()

        async def named_send(message: Any) -> None:
            if message["type"] == "http.response.start":
                template = getattr(scope.get("route"), "path", None)
                if template and span.is_recording():
                    span.update_name(f"{scope.get('method', 'HTTP')} {template}")
                    span.set_attribute("http.route", str(template))
            await send(message)

        await self.app(scope, receive, named_send)
