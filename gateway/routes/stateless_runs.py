"""Stateless runs: `/runs`, `/runs/stream`, `/runs/wait` and `/runs/batch`. Each
runs on a temporary thread of its own, deleted after the run when the body asks
(`on_completion="delete"`); a batch payload may name a thread instead."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Coroutine
from typing import Annotated, Any

from fastapi import APIRouter, Body, HTTPException, Request, Response
from fastapi.responses import JSONResponse

from waybill.common import codec
from waybill.gateway.peers import Peers, call
from waybill.gateway.project_auth import apart_from_request
from waybill.gateway.response_schemas import error_responses, event_stream, one_run, run_list
from waybill.gateway.routes.run_admission import (
    authorized_run,
    idempotency_key,
    run_request,
    start_run,
)
from waybill.gateway.routes.run_results import (
    CancelledIfLeft,
    final_values,
    result_response,
    run_headers,
    run_stream,
)
from waybill.gateway.routes.threads import peers_of, remove_thread
from waybill.gateway.run_schemas import BatchRunCreate, RunCreate
from waybill.gateway.streams import sse_frames, wait_for_end
from waybill.v1 import admission_pb2, common_pb2

router = APIRouter(tags=["runs"], responses=error_responses())

# A batch item's auth filters, by resource.
Filters = dict[str, dict[str, Any]]

STATELESS_THREADS = uuid.UUID("6f0e3a52-1c0b-4f55-9a43-0f5d1d6c7a10")


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
    response = run_stream(request, run, sse_frames(peers.journal, run.run_id))
    if body.on_disconnect == "cancel":
        return CancelledIfLeft(response, peers, run)
    return response


@router.post("/runs/wait")
async def wait_stateless_run(body: RunCreate, request: Request) -> Response:
    peers = peers_of(request)
    run = await start_stateless_run(peers, body, request)
    leaving = body.on_disconnect == "cancel"
    return await result_response(request, run, stateless_result(peers, run, body), leaving)


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


async def authorized_batch_run(
    request: Request, one: BatchRunCreate
) -> tuple[BatchRunCreate, Filters]:
    """The item as the project's handlers left it, and the filters they returned for it."""
    thread_id = str(one.thread_id) if one.thread_id is not None else ""
    return await apart_from_request(authorized_run(request, thread_id, one))


def batch_request(
    one: BatchRunCreate, filters: Filters, request: Request
) -> admission_pb2.StartRunRequest:
    if one.thread_id is None:
        start = stateless_request(one, str(uuid.uuid4()), request)
    else:
        start = run_request(str(one.thread_id), one, request)
    if filters:
        start.auth_filters_json = codec.dumps(filters)
    return start


@router.post("/runs/batch", responses=run_list("The runs, all admitted"))
async def create_stateless_runs(
    body: Annotated[list[BatchRunCreate], Body(max_length=1000)], request: Request
) -> list[dict[str, Any]]:
    """Background runs, all or none admitted: on the thread a payload names (as
    `langgraph-sdk`'s `create_batch` allows), or stateless as `POST /runs` makes one."""
    if not body:
        return []
    peers = peers_of(request)
    authorized = [await authorized_batch_run(request, one) for one in body]
    batch = admission_pb2.StartRunsRequest(
        runs=[batch_request(one, filters, request) for one, filters in authorized]
    )
    reply = await call(peers.admission.StartRuns(batch))
    for run, (one, _) in zip(reply.runs, authorized, strict=True):
        if one.thread_id is None:
            in_background(request, drop_after_end(peers, run, one))
    return [codec.run_to_dict(run) for run in reply.runs]
