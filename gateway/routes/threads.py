"""/threads: create, read, patch, delete, search, count; state and history from the runner."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from fastapi import APIRouter, HTTPException, Request, Response

from waybill.common import codec
from waybill.gateway.peers import Peers, call
from waybill.gateway.project_auth import authorize, stamped_metadata
from waybill.gateway.run_stopping import stop_active_runs
from waybill.gateway.schemas import (
    ThreadCount,
    ThreadCreate,
    ThreadHistory,
    ThreadPatch,
    ThreadSearch,
    ThreadStateUpdate,
)
from waybill.v1 import admission_pb2, delivery_pb2, journal_pb2, runner_pb2

router = APIRouter(tags=["threads"])


def peers_of(request: Request) -> Peers:
    return request.app.state.peers  # type: ignore[no-any-return]


@router.post("/threads")
async def create_thread(body: ThreadCreate, request: Request) -> dict[str, Any]:
    if body.thread_id is not None and not codec.is_uuid(body.thread_id):
        raise HTTPException(422, f"thread_id '{body.thread_id}' is not a UUID")
    value = {"thread_id": body.thread_id, "metadata": body.metadata, "if_exists": body.if_exists}
    await authorize(request, "threads", "create", value)
    thread = await call(
        peers_of(request).admission.CreateThread(
            admission_pb2.CreateThreadRequest(
                thread_id=body.thread_id or "",
                metadata_json=codec.dumps(stamped_metadata(value)),
                if_exists=body.if_exists,
            )
        )
    )
    return codec.thread_to_dict(thread)


@router.post("/threads/search")
async def search_threads(body: ThreadSearch, request: Request) -> list[dict[str, Any]]:
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
    return [codec.thread_to_dict(thread) for thread in reply.threads]


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


@router.get("/threads/{thread_id}")
async def get_thread(thread_id: UUID, request: Request) -> dict[str, Any]:
    await authorize(request, "threads", "read", {"thread_id": thread_id})
    thread = await call(
        peers_of(request).admission.GetThread(
            admission_pb2.GetThreadRequest(thread_id=str(thread_id))
        )
    )
    return codec.thread_to_dict(thread)


@router.patch("/threads/{thread_id}")
async def patch_thread(thread_id: UUID, body: ThreadPatch, request: Request) -> dict[str, Any]:
    value = {"thread_id": thread_id, "metadata": body.metadata}
    await authorize(request, "threads", "update", value)
    thread = await call(
        peers_of(request).admission.PatchThread(
            admission_pb2.PatchThreadRequest(
                thread_id=str(thread_id), metadata_json=codec.dumps(stamped_metadata(value))
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
    """Its active runs stopped (cancelled, as LangGraph Platform does), the thread
    record and its runs, then what hangs off them: the runs' events and receipts,
    the checkpoints and the workspace."""
    await stop_active_runs(peers, thread_id)
    deleted = await call(  # still refused (409) if a run started meanwhile
        peers.admission.DeleteThread(admission_pb2.DeleteThreadRequest(thread_id=thread_id))
    )
    await forget_runs(peers, list(deleted.run_ids), thread_id)
    await call(
        peers.runner.DeleteThreadState(runner_pb2.DeleteThreadStateRequest(thread_id=thread_id))
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


async def _state(
    request: Request, thread_id: UUID, checkpoint_id: str = "", subgraphs: bool = False
) -> Response:
    peers = peers_of(request)
    graph_id = await _graph_of(peers, thread_id)
    if checkpoint_id and not graph_id:
        raise HTTPException(404, f"Checkpoint {checkpoint_id} not found on this thread.")
    reply = await call(
        peers.runner.GetThreadState(
            runner_pb2.GetThreadStateRequest(
                thread_id=str(thread_id),
                graph_id=graph_id,
                subgraphs=subgraphs,
                checkpoint_id=checkpoint_id,
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
    return await _state(request, thread_id, checkpoint_id, subgraphs)


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
        raise HTTPException(409, f"Thread {thread_id} has no graph yet: run it once first.")
    checkpoint_id = body.checkpoint_id or (body.checkpoint or {}).get("checkpoint_id") or ""
    reply = await call(
        peers.runner.UpdateThreadState(
            runner_pb2.UpdateThreadStateRequest(
                thread_id=str(thread_id),
                graph_id=graph_id,
                values_json=codec.dumps(body.values),
                as_node=body.as_node or "",
                checkpoint_id=checkpoint_id,
            )
        )
    )
    return Response(reply.json, media_type="application/json")


@router.post("/threads/{thread_id}/copy")
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
            )
        )
    )
    return Response(reply.json, media_type="application/json")


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
