"""The gateway's metrics, its `/metrics` endpoint, and the run its log lines concern."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, generate_latest

from waybill.common.logs import bind_run
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

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    app.add_middleware(RunLogContext)
    if tracing_on():
        from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware

        app.add_middleware(OpenTelemetryMiddleware, excluded_urls="/ok,/metrics")
