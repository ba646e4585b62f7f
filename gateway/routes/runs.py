"""/threads/{tid}/runs: create, stream, wait, join, list, get, delete, cancel;
/runs/cancel for several runs at once. Stateless runs (`/runs`, `/runs/stream`,
`/runs/wait`, `/runs/batch`) are in stateless_runs.py; the StartRun request a
body becomes in run_admission.py; streams and results in run_results.py."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi import APIRouter, Header, HTTPException, Query, Request, Response
from fastapi.responses import JSONResponse

from waybill.common import codec
from waybill.gateway.peers import call
from waybill.gateway.project_auth import authorize
from waybill.gateway.response_schemas import error_responses, event_stream, one_run, run_list
from waybill.gateway.routes.run_admission import get_run_record, start_run
from waybill.gateway.routes.run_results import (
    CancelledIfLeft,
    final_values,
    result_response,
    run_headers,
    run_stream,
)
from waybill.gateway.routes.threads import forget_runs, peers_of
from waybill.gateway.run_schemas import RunCreate, RunsCancel
from waybill.gateway.schemas import INT32_MAX
from waybill.gateway.streams import opened_sse_frames, resume_point, sse_frames
from waybill.v1 import admission_pb2, common_pb2

router = APIRouter(tags=["runs"], responses=error_responses())


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
    response = run_stream(request, run, sse_frames(peers.journal, run.run_id))
    if body.on_disconnect == "cancel":
        return CancelledIfLeft(response, peers, run)
    return response


@router.post("/threads/{thread_id}/runs/wait")
async def wait_run(thread_id: UUID, body: RunCreate, request: Request) -> Response:
    peers = peers_of(request)
    run = await start_run(peers, str(thread_id), body, request)
    leaving = body.on_disconnect == "cancel"
    return await result_response(request, run, final_values(peers, run), leaving)


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
    cancel_on_disconnect: bool = False,
) -> Response:
    await authorize(request, "threads", "read", {"thread_id": thread_id})
    peers = peers_of(request)
    run = await get_run_record(peers, thread_id, run_id)
    if cancel_on_disconnect:
        await may_cancel(request, thread_id, run_id)
    from_seq, live_only = resume_point(last_event_id)
    modes = joined_modes(stream_mode)
    frames = await opened_sse_frames(peers.journal, run.run_id, from_seq, live_only, modes)
    response = run_stream(request, run, frames)
    if cancel_on_disconnect:
        return CancelledIfLeft(response, peers, run)
    return response


async def may_cancel(request: Request, thread_id: UUID, run_id: UUID) -> None:
    """A join that cancels when its client leaves needs what a cancel needs."""
    if not request.state.principal.allows("runs:cancel"):
        raise HTTPException(403, "This API key lacks the 'runs:cancel' scope.")
    await authorize(request, "threads", "update", _cancel_value(thread_id, [run_id], "interrupt"))


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
    responses={200: {"description": "With wait=true: the run has ended; its output, as join's"}},
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
    # As LangGraph Platform: 200 with the run's last `values` once it has ended.
    return await result_response(request, run, final_values(peers, run, from_thread=False))


@router.get("/threads/{thread_id}/runs/{run_id}/join")
async def join_run(
    thread_id: UUID, run_id: UUID, request: Request, cancel_on_disconnect: bool = False
) -> Response:
    await authorize(request, "threads", "read", {"thread_id": thread_id})
    peers = peers_of(request)
    run = await get_run_record(peers, thread_id, run_id)
    if cancel_on_disconnect:
        await may_cancel(request, thread_id, run_id)
    return await result_response(request, run, final_values(peers, run), cancel_on_disconnect)


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
