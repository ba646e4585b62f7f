"""/threads: create, read, patch, delete, search, count; state and history from the runner."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Header, HTTPException, Query, Request, Response

from waybill.common import codec
from waybill.gateway.peers import Peers, call
from waybill.gateway.project_auth import authorize, stamped_metadata
from waybill.gateway.response_schemas import error_responses, event_stream, one_thread
from waybill.gateway.run_stopping import stop_active_runs
from waybill.gateway.schemas import (
    CheckpointConfig,
    Superstep,
    ThreadCount,
    ThreadCreate,
    ThreadHistory,
    ThreadPatch,
    ThreadPrune,
    ThreadSearch,
    ThreadStateAtCheckpoint,
    ThreadStateUpdate,
    ThreadTTLBody,
)
from waybill.gateway.streams import sse_response
from waybill.gateway.thread_select import checked_extract, shaped
from waybill.gateway.thread_stream import parse_last_event_id, parse_modes, thread_stream
from waybill.v1 import admission_pb2, common_pb2, delivery_pb2, journal_pb2, runner_pb2

router = APIRouter(tags=["threads"], responses=error_responses())


def peers_of(request: Request) -> Peers:
    return request.app.state.peers  # type: ignore[no-any-return]


@router.post("/threads", responses=one_thread("The thread"))
async def create_thread(body: ThreadCreate, request: Request) -> dict[str, Any]:
    if body.thread_id is not None and not codec.is_uuid(body.thread_id):
        raise HTTPException(422, f"thread_id '{body.thread_id}' is not a UUID")
    value = {"thread_id": body.thread_id, "metadata": body.metadata, "if_exists": body.if_exists}
    await authorize(request, "threads", "create", value)
    metadata = stamped_metadata(value)
    graph_id = str(metadata.get("graph_id") or "")
    if body.supersteps and not graph_id:
        raise HTTPException(400, "supersteps need the thread's graph: give its graph_id.")
    peers = peers_of(request)
    thread = await call(
        peers.admission.CreateThread(
            admission_pb2.CreateThreadRequest(
                thread_id=body.thread_id or "",
                metadata_json=codec.dumps(metadata),
                if_exists=body.if_exists,
                ttl=_ttl(body.ttl),
            )
        )
    )
    if body.supersteps:
        await _apply_supersteps(peers, thread.thread_id, graph_id, body.supersteps)
    return codec.thread_to_dict(thread)


def _ttl(ttl: ThreadTTLBody | None) -> common_pb2.ThreadTTL | None:
    """A create's or an update's `ttl` for admission (None: not sent)."""
    if ttl is None:
        return None
    return common_pb2.ThreadTTL(strategy=ttl.strategy, minutes=ttl.ttl)


async def _apply_supersteps(
    peers: Peers, thread_id: str, graph_id: str, supersteps: list[Superstep]
) -> None:
    steps = [step.model_dump(exclude_none=True) for step in supersteps]
    await call(
        peers.runner.BulkUpdateThreadState(
            runner_pb2.BulkUpdateThreadStateRequest(
                thread_id=thread_id, graph_id=graph_id, supersteps_json=codec.dumps(steps)
            )
        )
    )


@router.post("/threads/search")
async def search_threads(body: ThreadSearch, request: Request) -> list[dict[str, Any]]:
    try:
        extract = checked_extract(body.extract) if body.extract else None
    except ValueError as error:
        raise HTTPException(422, str(error)) from None
    searched = _search_value(body)  # the handler may add to its metadata
    await authorize(request, "threads", "search", searched)
    reply = await call(
        peers_of(request).admission.SearchThreads(
            admission_pb2.SearchThreadsRequest(
                metadata_json=codec.dumps(stamped_metadata(searched)),
                values_json=codec.dumps(body.values or {}),
                status=body.status or "",
                ids=[str(thread_id) for thread_id in body.ids or []],
                sort_by=body.sort_by or "",
                sort_order=body.sort_order or "",
                limit=body.limit,
                offset=body.offset,
            )
        )
    )
    threads = [codec.thread_to_dict(thread) for thread in reply.threads]
    return [shaped(thread, body.select, extract) for thread in threads]


@router.post("/threads/count")
async def count_threads(body: ThreadCount, request: Request) -> int:
    searched = _search_value(body)  # the handler may add to its metadata
    await authorize(request, "threads", "search", searched)
    reply = await call(
        peers_of(request).admission.CountThreads(
            admission_pb2.CountThreadsRequest(
                metadata_json=codec.dumps(stamped_metadata(searched)),
                values_json=codec.dumps(body.values or {}),
                status=body.status or "",
            )
        )
    )
    return reply.count


@router.post("/threads/prune")
async def prune_threads(body: ThreadPrune, request: Request) -> dict[str, int]:
    """LangGraph's bulk prune: `delete` deletes each thread as `DELETE /threads/{id}`
    would; `keep_latest` keeps the thread and its newest checkpoints. A thread that
    is missing, not the caller's or running is skipped, not an error."""
    thread_ids = [str(thread_id) for thread_id in body.thread_ids]
    await authorize(request, "threads", "delete", {"thread_ids": thread_ids})
    prune = remove_thread if body.strategy == "delete" else _keep_latest
    pruned = 0
    for thread_id in thread_ids:
        pruned += await _pruned(prune, peers_of(request), thread_id)
    return {"pruned_count": pruned}


async def _pruned(
    prune: Callable[[Peers, str], Awaitable[None]], peers: Peers, thread_id: str
) -> int:
    try:
        await prune(peers, thread_id)
    except HTTPException as refused:
        if refused.status_code in (404, 409):  # not there (or not yours), or busy
            return 0
        raise
    return 1


async def _keep_latest(peers: Peers, thread_id: str) -> None:
    thread = await call(
        peers.admission.GetThread(admission_pb2.GetThreadRequest(thread_id=thread_id))
    )
    if thread.status == "busy":  # its run is writing checkpoints: leave them
        raise HTTPException(409, f"Thread {thread_id} has a run in progress.")
    await call(
        peers.runner.PruneThreadState(runner_pb2.PruneThreadStateRequest(thread_id=thread_id))
    )


@router.get("/threads/{thread_id}", responses=one_thread("The thread"))
async def get_thread(thread_id: UUID, request: Request, include: str = "") -> dict[str, Any]:
    """`?include=ttl` adds the thread's TTL (`strategy`, `ttl_minutes`, `expires_at`)
    when it has one, as LangGraph Platform's does."""
    await authorize(request, "threads", "read", {"thread_id": thread_id})
    thread = await call(
        peers_of(request).admission.GetThread(
            admission_pb2.GetThreadRequest(thread_id=str(thread_id))
        )
    )
    shown = codec.thread_to_dict(thread)
    if "ttl" in {field.strip() for field in include.split(",")} and thread.HasField("ttl"):
        shown["ttl"] = {
            "strategy": thread.ttl.strategy,
            "ttl_minutes": thread.ttl.minutes,
            "expires_at": thread.ttl.expires_at or None,
        }
    return shown


@router.patch("/threads/{thread_id}", responses=one_thread("The thread, its metadata merged"))
async def patch_thread(thread_id: UUID, body: ThreadPatch, request: Request) -> dict[str, Any]:
    value = {"thread_id": thread_id, "metadata": body.metadata}
    await authorize(request, "threads", "update", value)
    thread = await call(
        peers_of(request).admission.PatchThread(
            admission_pb2.PatchThreadRequest(
                thread_id=str(thread_id),
                metadata_json=codec.dumps(stamped_metadata(value)),
                ttl=_ttl(body.ttl),
            )
        )
    )
    return codec.thread_to_dict(thread)


@router.delete("/threads/{thread_id}", status_code=204)
async def delete_thread(thread_id: UUID, request: Request) -> Response:
    await authorize(request, "threads", "delete", {"thread_id": thread_id})
    await remove_thread(peers_of(request), str(thread_id))
    return Response(status_code=204)


async def remove_thread(peers: Peers, thread_id: str) -> None:
    """Its active runs stopped (cancelled, as LangGraph Platform does), then the
    thread: admission deletes it with its runs and what hangs off them elsewhere
    (the runs' events and receipts, the checkpoints and the workspace)."""
    await stop_active_runs(peers, thread_id)
    await call(  # still refused (409) if a run started meanwhile
        peers.admission.DeleteThread(admission_pb2.DeleteThreadRequest(thread_id=thread_id))
    )


async def forget_runs(peers: Peers, run_ids: list[str], thread_id: str = "") -> None:
    """Deleted runs' events (journal) and receipts (delivery; all of `thread_id`'s too)."""
    if run_ids:
        await call(peers.journal.Forget(journal_pb2.ForgetRequest(run_ids=run_ids)))
    await call(
        peers.delivery.ForgetReceipts(
            delivery_pb2.ForgetReceiptsRequest(thread_id=thread_id, run_ids=run_ids)
        )
    )


async def _graph_of(peers: Peers, thread_id: UUID) -> str:
    thread = await call(
        peers.admission.GetThread(admission_pb2.GetThreadRequest(thread_id=str(thread_id)))
    )
    return str(codec.loads(thread.metadata_json, {}).get("graph_id") or "")


def _checkpoint_fields(
    checkpoint: CheckpointConfig | None, checkpoint_id: str | None = None
) -> dict[str, Any]:
    """The runner request's fields for a checkpoint given as LangGraph's config (its
    `checkpoint_id` wins over the deprecated separate one, as on the platform)."""
    checkpoint = checkpoint or CheckpointConfig()
    return {
        "checkpoint_id": checkpoint.checkpoint_id or checkpoint_id or "",
        "checkpoint_ns": checkpoint.checkpoint_ns or "",
        "checkpoint_map": checkpoint.checkpoint_map or {},
    }


async def _state(
    request: Request,
    thread_id: UUID,
    checkpoint: CheckpointConfig | None = None,
    subgraphs: bool = False,
) -> Response:
    peers = peers_of(request)
    graph_id = await _graph_of(peers, thread_id)
    fields = _checkpoint_fields(checkpoint)
    if fields["checkpoint_id"] and not graph_id:
        raise HTTPException(404, f"Checkpoint {fields['checkpoint_id']} not found on this thread.")
    reply = await call(
        peers.runner.GetThreadState(
            runner_pb2.GetThreadStateRequest(
                thread_id=str(thread_id), graph_id=graph_id, subgraphs=subgraphs, **fields
            )
        )
    )
    return Response(reply.json, media_type="application/json")


@router.get("/threads/{thread_id}/state")
async def get_thread_state(thread_id: UUID, request: Request, subgraphs: bool = False) -> Response:
    await authorize(request, "threads", "read", {"thread_id": thread_id})
    return await _state(request, thread_id, subgraphs=subgraphs)


@router.get("/threads/{thread_id}/state/{checkpoint_id}")
async def get_thread_state_at(
    thread_id: UUID, checkpoint_id: str, request: Request, subgraphs: bool = False
) -> Response:
    await authorize(request, "threads", "read", {"thread_id": thread_id})
    checkpoint = CheckpointConfig(checkpoint_id=checkpoint_id)
    return await _state(request, thread_id, checkpoint, subgraphs)


@router.post("/threads/{thread_id}/state/checkpoint")
async def get_thread_state_at_checkpoint(
    thread_id: UUID, body: ThreadStateAtCheckpoint, request: Request
) -> Response:
    """The SDK's `get_state(thread_id, checkpoint={...})`: a (sub)graph's checkpoint."""
    await authorize(request, "threads", "read", {"thread_id": thread_id})
    return await _state(request, thread_id, body.checkpoint, body.subgraphs)


@router.post("/threads/{thread_id}/state")
async def update_thread_state(
    thread_id: UUID, body: ThreadStateUpdate, request: Request
) -> Response:
    await authorize(request, "threads", "update", {"thread_id": thread_id, "metadata": {}})
    peers = peers_of(request)
    thread = await call(
        peers.admission.GetThread(admission_pb2.GetThreadRequest(thread_id=str(thread_id)))
    )
    if thread.status == "busy":
        raise HTTPException(409, f"Thread {thread_id} has a run in progress; update it afterwards.")
    graph_id = str(codec.loads(thread.metadata_json, {}).get("graph_id") or "")
    if not graph_id:
        raise HTTPException(400, _no_graph_yet(thread_id))
    reply = await call(
        peers.runner.UpdateThreadState(
            runner_pb2.UpdateThreadStateRequest(
                thread_id=str(thread_id),
                graph_id=graph_id,
                values_json=codec.dumps(body.values),
                as_node=body.as_node or "",
                **_checkpoint_fields(body.checkpoint, body.checkpoint_id),
            )
        )
    )
    return Response(reply.json, media_type="application/json")


def _no_graph_yet(thread_id: UUID) -> str:
    """LangGraph Platform's words for a thread no run has given a graph."""
    return (
        f"Thread '{thread_id}' has no assigned graph ID. This usually occurs when no runs "
        "have been made on this particular thread. This operation requires a graph ID. "
        "Please ensure a run has been made for the thread or manually update the thread "
        "metadata (by setting the 'graph_id' field) before running this operation."
    )


@router.post("/threads/{thread_id}/copy", responses=one_thread("The copy"))
async def copy_thread(thread_id: UUID, request: Request) -> dict[str, Any]:
    peers = peers_of(request)
    await authorize(request, "threads", "read", {"thread_id": thread_id})
    source = await call(
        peers.admission.GetThread(admission_pb2.GetThreadRequest(thread_id=str(thread_id)))
    )
    if source.status == "busy":
        raise HTTPException(409, f"Thread {thread_id} has a run in progress; copy it afterwards.")
    value = {"thread_id": None, "metadata": codec.loads(source.metadata_json, {})}
    await authorize(request, "threads", "create", value)
    copy = await call(
        peers.admission.CreateThread(
            admission_pb2.CreateThreadRequest(metadata_json=codec.dumps(stamped_metadata(value)))
        )
    )
    await call(
        peers.runner.CopyThreadState(
            runner_pb2.CopyThreadStateRequest(
                source_thread_id=str(thread_id), target_thread_id=copy.thread_id
            )
        )
    )
    return codec.thread_to_dict(copy)


@router.post("/threads/{thread_id}/history")
async def get_thread_history(thread_id: UUID, body: ThreadHistory, request: Request) -> Response:
    await authorize(request, "threads", "read", {"thread_id": thread_id})
    return await _history(request, thread_id, body)


@router.get("/threads/{thread_id}/history")
async def list_thread_history(
    thread_id: UUID,
    request: Request,
    limit: Annotated[int, Query(ge=1, le=1000)] = 1,
    before: str | None = None,
) -> Response:
    """The platform's older form: `limit` and a `before` checkpoint id in the query."""
    await authorize(request, "threads", "read", {"thread_id": thread_id})
    return await _history(request, thread_id, ThreadHistory(limit=limit, before=before))


async def _history(request: Request, thread_id: UUID, body: ThreadHistory) -> Response:
    peers = peers_of(request)
    graph_id = await _graph_of(peers, thread_id)
    before = body.before
    if isinstance(before, dict):
        before = (before.get("configurable") or before).get("checkpoint_id")
    reply = await call(
        peers.runner.GetThreadHistory(
            runner_pb2.GetThreadHistoryRequest(
                thread_id=str(thread_id),
                graph_id=graph_id,
                limit=body.limit,
                filter_json=codec.dumps(body.metadata) if body.metadata else b"",
                before=before or "",
                **_checkpoint_fields(body.checkpoint),
            )
        )
    )
    return Response(reply.json, media_type="application/json")


@router.get(
    "/threads/{thread_id}/stream",
    response_class=Response,
    responses=event_stream("Every run of the thread as it goes, as Server-Sent Events"),
)
async def join_thread_stream(
    thread_id: UUID,
    request: Request,
    last_event_id: str | None = Header(default=None),
) -> Response:
    """The SDK's `threads.join_stream`: every run of the thread as it goes, for as long
    as the client stays (see thread_stream.py). LangGraph Platform reads the modes
    from `stream_modes`; the SDKs send `stream_mode`: both are heard."""
    await authorize(request, "threads", "read", {"thread_id": thread_id})
    raw_modes = request.query_params.getlist("stream_modes") or request.query_params.getlist(
        "stream_mode"
    )
    try:
        modes = parse_modes(raw_modes)
        resume = parse_last_event_id(last_event_id)
    except ValueError as error:
        raise HTTPException(422, str(error)) from None
    peers = peers_of(request)
    await call(peers.admission.GetThread(admission_pb2.GetThreadRequest(thread_id=str(thread_id))))
    settings = request.app.state.settings
    return sse_response(
        thread_stream(
            peers.admission,
            peers.journal,
            str(thread_id),
            modes,
            resume,
            settings.thread_stream_poll_seconds,
        ),
        {},
        settings.sse_heartbeat_seconds,
        settings.stream_drain_seconds,
    )


def _search_value(body: ThreadSearch | ThreadCount) -> dict[str, Any]:
    """What a `threads.search` handler sees (LangGraph's `ThreadsSearch`)."""
    return {
        "metadata": body.metadata or {},
        "values": body.values or {},
        "status": body.status,
        "limit": getattr(body, "limit", None),
        "offset": getattr(body, "offset", None),
        "thread_id": None,
    }
