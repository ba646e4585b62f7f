"""/threads/{tid}/runs: create, stream, wait, join, list, get, delete; stateless
/runs (one, or a batch); /runs/cancel for several runs at once."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Coroutine
from typing import Annotated, Any, Literal
from uuid import UUID

import grpc
from fastapi import APIRouter, Body, Header, HTTPException, Query, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from waybill.common import codec
from waybill.common.tracing import run_span
from waybill.gateway.observability import observed_stream
from waybill.gateway.peers import Peers, call
from waybill.gateway.project_auth import authorize, stamped_metadata
from waybill.gateway.project_http import shape_run
from waybill.gateway.routes.threads import forget_runs, peers_of, remove_thread
from waybill.gateway.schemas import (
    INT32_MAX,
    BatchRunCreate,
    RunCreate,
    RunsCancel,
    error_responses,
    event_stream,
    no_body,
    one_run,
    run_list,
)
from waybill.gateway.streams import (
    opened_sse_frames,
    resume_point,
    sse_frames,
    sse_response,
    wait_for_end,
)
from waybill.v1 import admission_pb2, common_pb2, runner_pb2

router = APIRouter(tags=["runs"], responses=error_responses())

STATELESS_THREADS = uuid.UUID("6f0e3a52-1c0b-4f55-9a43-0f5d1d6c7a10")


def run_headers(thread_id: str, run_id: str) -> dict[str, str]:
    # `Content-Location` tells useStream the run id; `Location` lets the SDK
    # reconnect to the run's stream with Last-Event-ID.
    return {
        "Content-Location": f"/threads/{thread_id}/runs/{run_id}",
        "Location": f"/threads/{thread_id}/runs/{run_id}/stream",
    }


def idempotency_key(request: Request) -> str:
    return request.headers.get("idempotency-key", "").strip()


def run_request(
    thread_id: str, body: RunCreate, request: Request, key: str = ""
) -> admission_pb2.StartRunRequest:
    kwargs = shape_run(body.kwargs(), request.headers, request.app.state.http)
    return admission_pb2.StartRunRequest(
        thread_id=thread_id,
        assistant_id=body.assistant_id,
        kwargs_json=codec.dumps(kwargs),
        metadata_json=codec.dumps(body.metadata or {}),
        multitask_strategy=codec.MULTITASK_VALUES[body.multitask_strategy or "enqueue"],
        if_not_exists=body.if_not_exists,
        after_seconds=body.after_seconds or 0,
        idempotency_key=key,
    )


async def start_run(
    peers: Peers, thread_id: str, body: RunCreate, request: Request
) -> common_pb2.Run:
    body = await authorized_run(request, thread_id, body)
    request_message = run_request(thread_id, body, request, idempotency_key(request))
    return await call(peers.admission.StartRun(request_message))


async def authorized_run(request: Request, thread_id: str, body: RunCreate) -> Any:
    """The project's `threads.create_run` handler sees the run (LangGraph's
    `RunsCreate`); the metadata it stamps is the run's (and so its thread's). Its
    `assistants.read` handler's filter applies to the run's assistant, unless that
    is a graph's system assistant (admission checks), as on LangGraph Platform."""
    value = {
        "thread_id": thread_id,
        "assistant_id": body.assistant_id,
        "run_id": None,
        "status": "pending",
        "metadata": dict(body.metadata or {}),
        "prevent_insert_if_inflight": True,
        "multitask_strategy": body.multitask_strategy or "enqueue",
        "if_not_exists": body.if_not_exists,
        "after_seconds": body.after_seconds or 0,
        "kwargs": body.kwargs(),
    }
    await authorize(request, "assistants", "read", {"assistant_id": body.assistant_id})
    if await authorize(request, "threads", "create_run", value) is None and value["metadata"] == (
        body.metadata or {}
    ):
        return body
    return body.model_copy(update={"metadata": stamped_metadata(value)})


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


@router.post("/threads/{thread_id}/runs", responses=one_run("The run, admitted"))
async def create_run(thread_id: UUID, body: RunCreate, request: Request) -> JSONResponse:
    run = await start_run(peers_of(request), str(thread_id), body, request)
    return JSONResponse(codec.run_to_dict(run), headers=run_headers(run.thread_id, run.run_id))


@router.post(
    "/threads/{thread_id}/runs/stream",
    response_class=Response,
    responses=event_stream("The run's events, as Server-Sent Events"),
)
async def stream_run(thread_id: UUID, body: RunCreate, request: Request) -> Response:
    peers = peers_of(request)
    run = await start_run(peers, str(thread_id), body, request)
    frames = sse_frames(peers.journal, run.run_id)
    if body.on_disconnect == "cancel":
        frames = cancel_on_disconnect(peers, run, frames)
    return run_stream(request, run, frames)


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


@router.post("/threads/{thread_id}/runs/wait")
async def wait_run(thread_id: UUID, body: RunCreate, request: Request) -> Response:
    peers = peers_of(request)
    run = await start_run(peers, str(thread_id), body, request)
    return await result_response(request, run, final_values(peers, run))


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


@router.get("/threads/{thread_id}/runs", responses=run_list("The thread's runs"))
async def list_runs(
    thread_id: UUID,
    request: Request,
    limit: Annotated[int, Query(ge=1, le=1000)] = 10,
    offset: Annotated[int, Query(ge=0, le=INT32_MAX)] = 0,
    status: str | None = None,
) -> list[dict[str, Any]]:
    await authorize(request, "threads", "search", {"thread_id": thread_id, "metadata": {}})
    reply = await call(
        peers_of(request).admission.ListRuns(
            admission_pb2.ListRunsRequest(
                thread_id=str(thread_id),
                limit=limit,
                offset=offset,
                status=codec.RUN_STATUS_VALUES.get(status or "", common_pb2.RUN_STATUS_UNSPECIFIED),
            )
        )
    )
    return [codec.run_to_dict(run) for run in reply.runs if not codec.rolling_back(run)]


async def get_run_record(peers: Peers, thread_id: UUID, run_id: UUID) -> common_pb2.Run:
    return await call(
        peers.admission.GetRun(
            admission_pb2.GetRunRequest(thread_id=str(thread_id), run_id=str(run_id))
        )
    )


@router.get("/threads/{thread_id}/runs/{run_id}", responses=one_run("The run"))
async def get_run(thread_id: UUID, run_id: UUID, request: Request) -> dict[str, Any]:
    await authorize(request, "threads", "read", {"thread_id": thread_id})
    run = await get_run_record(peers_of(request), thread_id, run_id)
    if codec.rolling_back(run):
        raise HTTPException(404, f"Run {run_id} not found on thread {thread_id}.")
    return codec.run_to_dict(run)


@router.delete("/threads/{thread_id}/runs/{run_id}", status_code=204)
async def delete_run(thread_id: UUID, run_id: UUID, request: Request) -> Response:
    await authorize(request, "threads", "delete", {"thread_id": thread_id, "run_id": run_id})
    peers = peers_of(request)
    await call(
        peers.admission.DeleteRun(
            admission_pb2.GetRunRequest(thread_id=str(thread_id), run_id=str(run_id))
        )
    )
    await forget_runs(peers, [str(run_id)])  # its events and receipt go with it
    return Response(status_code=204)


@router.get(
    "/threads/{thread_id}/runs/{run_id}/stream",
    response_class=Response,
    responses=event_stream("The run's events, as Server-Sent Events"),
)
async def join_stream(
    thread_id: UUID,
    run_id: UUID,
    request: Request,
    last_event_id: str | None = Header(default=None),
    stream_mode: list[str] = Query(default=[]),
) -> Response:
    await authorize(request, "threads", "read", {"thread_id": thread_id})
    peers = peers_of(request)
    run = await get_run_record(peers, thread_id, run_id)
    from_seq, live_only = resume_point(last_event_id)
    modes = joined_modes(stream_mode)
    frames = await opened_sse_frames(peers.journal, run.run_id, from_seq, live_only, modes)
    return run_stream(request, run, frames)


def joined_modes(values: list[str]) -> set[str]:
    """The modes a join asks for: `langgraph-sdk` repeats `stream_mode` once per mode,
    and LangGraph Platform also reads one JSON array (`["values","custom"]`)."""
    modes: set[str] = set()
    for value in values:
        parsed = json_list(value) if value.startswith("[") else None
        if parsed is not None:
            modes.update(str(mode) for mode in parsed)
        elif value:
            modes.add(value)  # not a JSON array: one mode's name, as the reference reads it
    return modes


def json_list(text: str) -> list[Any] | None:
    try:
        parsed = codec.loads(text)
    except ValueError:  # orjson's decode error is one
        return None
    return parsed if isinstance(parsed, list) else None


@router.post(
    "/threads/{thread_id}/runs/{run_id}/cancel",
    status_code=202,
    response_class=Response,
    responses=no_body(204, "Cancelled, and (with wait=true) the run has ended"),
)
async def cancel_run(
    thread_id: UUID,
    run_id: UUID,
    request: Request,
    wait: bool = False,
    action: Literal["interrupt", "rollback"] = "interrupt",
) -> Response:
    await authorize(request, "threads", "update", _cancel_value(thread_id, [run_id], action))
    peers = peers_of(request)
    run = await call(
        peers.admission.CancelRun(
            admission_pb2.CancelRunRequest(
                thread_id=str(thread_id), run_id=str(run_id), action=action
            )
        )
    )
    if not wait:
        return Response(status_code=202)
    await wait_for_end(peers.journal, run.run_id)
    return Response(status_code=204)


@router.get("/threads/{thread_id}/runs/{run_id}/join")
async def join_run(thread_id: UUID, run_id: UUID, request: Request) -> Response:
    await authorize(request, "threads", "read", {"thread_id": thread_id})
    peers = peers_of(request)
    run = await get_run_record(peers, thread_id, run_id)
    return await result_response(request, run, final_values(peers, run))


@router.post("/runs/cancel", status_code=204)
async def cancel_runs(
    body: RunsCancel,
    request: Request,
    action: Literal["interrupt", "rollback"] = "interrupt",
) -> Response:
    """Cancel several runs through the durable cancel path; 404 when none matches."""
    value = _cancel_value(body.thread_id, body.run_ids or [], action, body.status)
    await authorize(request, "threads", "update", value)
    await call(
        peers_of(request).admission.CancelRuns(
            admission_pb2.CancelRunsRequest(
                thread_id=str(body.thread_id or ""),
                run_ids=[str(run_id) for run_id in body.run_ids or []],
                status=body.status or "",
                action=action,
            )
        )
    )
    return Response(status_code=204)


def _cancel_value(
    thread_id: Any, run_ids: list[Any], action: str, status: str | None = None
) -> dict[str, Any]:
    """What a `threads.update` handler sees for a cancel (as on LangGraph Platform)."""
    return {
        "thread_id": thread_id,
        "action": action,
        "metadata": {"run_ids": run_ids, "status": status},
    }


# ---- stateless runs: a temporary thread per run ---------------------------------


def stateless_request(
    body: RunCreate, thread_id: str, request: Request
) -> admission_pb2.StartRunRequest:
    stateless = body.model_copy(update={"if_not_exists": "create"})
    return run_request(thread_id, stateless, request)


async def start_stateless_run(peers: Peers, body: RunCreate, request: Request) -> common_pb2.Run:
    stateless = body.model_copy(update={"if_not_exists": "create"})
    return await start_run(peers, temporary_thread_id(request), stateless, request)


def temporary_thread_id(request: Request) -> str:
    """A fresh thread per stateless run; a retry with the same Idempotency-Key
    names the same one, so that it is recognised as the same request."""
    key = idempotency_key(request)
    if not key:
        return str(uuid.uuid4())
    principal = request.state.principal
    return str(uuid.uuid5(STATELESS_THREADS, f"{principal.user_id}\n{key}"))


async def drop_temporary_thread(peers: Peers, run: common_pb2.Run, body: RunCreate) -> None:
    if body.on_completion == "delete":
        with contextlib.suppress(HTTPException):  # already gone is fine
            await remove_thread(peers, run.thread_id)


async def drop_after_end(peers: Peers, run: common_pb2.Run, body: RunCreate) -> None:
    if body.on_completion != "delete":
        return
    await wait_for_end(peers.journal, run.run_id)
    await drop_temporary_thread(peers, run, body)


def in_background(request: Request, work: Coroutine[Any, Any, None]) -> None:
    """Work that outlives the request; the app keeps a reference until it is done."""
    task = asyncio.create_task(work)
    request.app.state.background.add(task)
    task.add_done_callback(request.app.state.background.discard)


@router.post(
    "/runs/stream",
    response_class=Response,
    responses=event_stream("The run's events, as Server-Sent Events"),
)
async def stream_stateless_run(body: RunCreate, request: Request) -> Response:
    peers = peers_of(request)
    run = await start_stateless_run(peers, body, request)
    in_background(request, drop_after_end(peers, run, body))
    frames = sse_frames(peers.journal, run.run_id)
    if body.on_disconnect == "cancel":
        frames = cancel_on_disconnect(peers, run, frames)
    return run_stream(request, run, frames)


@router.post("/runs/wait")
async def wait_stateless_run(body: RunCreate, request: Request) -> Response:
    peers = peers_of(request)
    run = await start_stateless_run(peers, body, request)
    return await result_response(request, run, stateless_result(peers, run, body))


async def stateless_result(peers: Peers, run: common_pb2.Run, body: RunCreate) -> Any:
    result = await final_values(peers, run)  # the run has ended
    await drop_temporary_thread(peers, run, body)
    return result


@router.post("/runs", responses=one_run("The run, admitted"))
async def create_stateless_run(body: RunCreate, request: Request) -> JSONResponse:
    peers = peers_of(request)
    run = await start_stateless_run(peers, body, request)
    in_background(request, drop_after_end(peers, run, body))
    return JSONResponse(codec.run_to_dict(run), headers=run_headers(run.thread_id, run.run_id))


async def authorized_batch_run(request: Request, one: BatchRunCreate) -> BatchRunCreate:
    thread_id = str(one.thread_id) if one.thread_id is not None else ""
    authorized: BatchRunCreate = await authorized_run(request, thread_id, one)
    return authorized


def batch_request(one: BatchRunCreate, request: Request) -> admission_pb2.StartRunRequest:
    if one.thread_id is None:
        return stateless_request(one, str(uuid.uuid4()), request)
    return run_request(str(one.thread_id), one, request)


@router.post("/runs/batch", responses=run_list("The runs, all admitted"))
async def create_stateless_runs(
    body: Annotated[list[BatchRunCreate], Body(max_length=1000)], request: Request
) -> list[dict[str, Any]]:
    """Background runs, all or none admitted: on the thread a payload names (as
    `langgraph-sdk`'s `create_batch` allows), or stateless as `POST /runs` makes one."""
    if not body:
        return []
    peers = peers_of(request)
    body = [await authorized_batch_run(request, one) for one in body]
    batch = admission_pb2.StartRunsRequest(runs=[batch_request(one, request) for one in body])
    reply = await call(peers.admission.StartRuns(batch))
    for run, one in zip(reply.runs, body, strict=True):
        if one.thread_id is None:
            in_background(request, drop_after_end(peers, run, one))
    return [codec.run_to_dict(run) for run in reply.runs]
