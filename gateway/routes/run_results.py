"""How a run's answer goes out: its events as SSE, or its final values as JSON,
kept alive with newlines while the run works; either interrupts the run if the
client leaves first, when it asked. Shared by the thread-scoped and stateless runs."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import grpc
from fastapi import HTTPException, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.types import Message, Receive, Scope, Send

from waybill.common import codec
from waybill.common.tracing import run_span
from waybill.gateway.observability import observed_stream
from waybill.gateway.peers import Peers
from waybill.gateway.run_output import run_output
from waybill.gateway.streams import sse_response
from waybill.v1 import admission_pb2, common_pb2


def run_headers(thread_id: str, run_id: str) -> dict[str, str]:
    # `Content-Location` tells useStream the run id; `Location` lets the SDK
    # reconnect to the run's stream with Last-Event-ID.
    return {
        "Content-Location": f"/threads/{thread_id}/runs/{run_id}",
        "Location": f"/threads/{thread_id}/runs/{run_id}/stream",
    }


async def final_values(peers: Peers, run: common_pb2.Run, from_thread: bool = True) -> Any:
    """What `wait` and `join` return (run_output.py): the run's last `values`, or
    `__error__`."""
    with run_span("gateway.wait", run.run_id, run.thread_id):
        return await run_output(peers, run, from_thread)


def run_stream(request: Request, run: common_pb2.Run, frames: AsyncIterator[bytes]) -> Response:
    return sse_response(
        observed_stream(run, frames),
        run_headers(run.thread_id, run.run_id),
        request.app.state.settings.sse_heartbeat_seconds,
        request.app.state.settings.stream_drain_seconds,
    )


class CancelledIfLeft(Response):
    """`inner`, interrupting the run when the client leaves before its last byte
    (a stream that ends, drained on a restart included, is not a leaving)."""

    def __init__(self, inner: Response, peers: Peers, run: common_pb2.Run) -> None:
        self.inner = inner
        self.peers = peers
        self.run = run
        self.status_code = inner.status_code
        self.raw_headers = inner.raw_headers
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        sent_all = False

        async def watched(message: Message) -> None:
            nonlocal sent_all
            await send(message)
            last = message["type"] == "http.response.body" and not message.get("more_body")
            sent_all = sent_all or last

        try:
            await self.inner(scope, receive, watched)
        finally:
            if not sent_all:
                await asyncio.shield(cancel_quietly(self.peers, self.run))
        if self.background is not None:
            await self.background()


async def cancel_quietly(peers: Peers, run: common_pb2.Run) -> None:
    request = admission_pb2.CancelRunRequest(
        thread_id=run.thread_id, run_id=run.run_id, action="interrupt"
    )
    with contextlib.suppress(grpc.aio.AioRpcError):  # already finished: nothing to do
        await peers.admission.CancelRun(request)


def result_headers(thread_id: str, run_id: str) -> dict[str, str]:
    # As LangGraph Platform: `Location` is where the same result can be awaited again.
    return {
        "Content-Location": f"/threads/{thread_id}/runs/{run_id}",
        "Location": f"/threads/{thread_id}/runs/{run_id}/join",
    }


async def result_response(
    request: Request,
    run: common_pb2.Run,
    result: Coroutine[Any, Any, Any],
    cancel_on_leave: bool = False,
) -> Response:
    """A run's result as JSON (an error is `{"__error__": …}`, status 200, as on
    LangGraph Platform). Ready within one keep-alive interval, it is a plain
    response (a failure keeps its own status); otherwise the body starts with a
    newline every interval until the result follows. With `cancel_on_leave`, a
    client that leaves before the result interrupts the run."""
    interval = request.app.state.settings.wait_keepalive_seconds
    headers = result_headers(run.thread_id, run.run_id)
    task = asyncio.ensure_future(result)
    # Not cancelled if the client leaves: a stateless run's clean-up is part of it.
    request.app.state.background.add(task)
    task.add_done_callback(request.app.state.background.discard)
    task.add_done_callback(settled)
    await asyncio.wait({task}, timeout=interval)
    if task.done():
        return JSONResponse(task.result(), headers=headers)
    response = StreamingResponse(
        kept_alive(task, interval), media_type="application/json", headers=headers
    )
    if cancel_on_leave:
        return CancelledIfLeft(response, request.app.state.peers, run)
    return response


async def kept_alive(task: asyncio.Future[Any], interval: float) -> AsyncIterator[bytes]:
    """Newlines (leading whitespace JSON parsers skip) until `task` is done, then its JSON."""
    yield b"\n"  # one interval has passed already
    while not task.done():
        await asyncio.wait({task}, timeout=interval)
        if not task.done():
            yield b"\n"
    yield codec.dumps(late_result(task))


def late_result(task: asyncio.Future[Any]) -> Any:
    """The result; a failure after the status went out is told in the body instead."""
    try:
        return task.result()
    except HTTPException as failure:
        return {"__error__": {"error": "HTTPException", "message": str(failure.detail)}}
    except Exception as failure:
        return {"__error__": {"error": type(failure).__name__, "message": str(failure)}}


def settled(task: asyncio.Future[Any]) -> None:
    """Marks a failure seen: one whose client left is not logged as never retrieved."""
    if not task.cancelled():
        task.exception()
