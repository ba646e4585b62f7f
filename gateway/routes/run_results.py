"""How a run's answer goes out: its events as SSE (interrupted if the creating
client leaves, when it asked), or its final values as JSON, kept alive with
newlines while the run works. Shared by the thread-scoped and stateless runs."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import grpc
from fastapi import HTTPException, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from waybill.common import codec
from waybill.common.tracing import run_span
from waybill.gateway.observability import observed_stream
from waybill.gateway.peers import Peers, call
from waybill.gateway.streams import sse_response, wait_for_end
from waybill.v1 import admission_pb2, common_pb2, runner_pb2


def run_headers(thread_id: str, run_id: str) -> dict[str, str]:
    # `Content-Location` tells useStream the run id; `Location` lets the SDK
    # reconnect to the run's stream with Last-Event-ID.
    return {
        "Content-Location": f"/threads/{thread_id}/runs/{run_id}",
        "Location": f"/threads/{thread_id}/runs/{run_id}/stream",
    }


async def final_values(peers: Peers, run: common_pb2.Run) -> Any:
    """What `wait` and `join` return: the thread's values, or `__error__`."""
    with run_span("gateway.wait", run.run_id, run.thread_id):
        error = await wait_for_end(peers.journal, run.run_id)
    if error is not None:
        return {"__error__": error}
    reply = await call(
        peers.runner.GetThreadState(
            runner_pb2.GetThreadStateRequest(thread_id=run.thread_id, graph_id=run.graph_id)
        )
    )
    state = codec.loads(reply.json, {})
    values = state.get("values")
    if state.get("interrupts") and isinstance(values, dict):
        # LangGraph Platform shows a pause in the output itself.
        values = {**values, "__interrupt__": state["interrupts"]}
    return values


def run_stream(request: Request, run: common_pb2.Run, frames: AsyncIterator[bytes]) -> Response:
    return sse_response(
        observed_stream(run, frames),
        run_headers(run.thread_id, run.run_id),
        request.app.state.settings.sse_heartbeat_seconds,
        request.app.state.settings.stream_drain_seconds,
    )


async def cancel_on_disconnect(
    peers: Peers, run: common_pb2.Run, frames: AsyncIterator[bytes]
) -> AsyncIterator[bytes]:
    """The creating client went away before the stream ended: interrupt its run."""
    finished = False
    try:
        async for frame in frames:
            yield frame
        finished = True
    finally:
        if not finished:
            await asyncio.shield(cancel_quietly(peers, run))


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
    request: Request, run: common_pb2.Run, result: Coroutine[Any, Any, Any]
) -> Response:
    """A run's result as JSON (an error is `{"__error__": …}`, status 200, as on
    LangGraph Platform). Ready within one keep-alive interval, it is a plain
    response (a failure keeps its own status); otherwise the body starts with a
    newline every interval until the result follows."""
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
    return StreamingResponse(
        kept_alive(task, interval), media_type="application/json", headers=headers
    )


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
