"""What runs delivered: receipts, workspace changes, a thread's outputs and
uploads, and webhooks (a run's deliveries, thread and assistant subscriptions).

Each route first reads the thread or run through admission, so that someone
else's answers 404 as if it did not exist; the files and rows are delivery's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote
from uuid import UUID

import grpc
from fastapi import APIRouter, HTTPException, Request, Response, UploadFile
from fastapi.responses import StreamingResponse
from pydantic import Field
from starlette.convertors import PathConvertor, register_url_convertor

from waybill.common import codec
from waybill.common.errors import http_status_for
from waybill.gateway.peers import Peers, call
from waybill.gateway.response_schemas import error_responses
from waybill.gateway.routes.run_admission import get_run_record
from waybill.gateway.routes.threads import peers_of
from waybill.gateway.schemas import Envelope
from waybill.v1 import admission_pb2, delivery_pb2

router = APIRouter(tags=["delivery"], responses=error_responses())


class WebhookSubscribe(Envelope):
    url: str = Field(min_length=1, max_length=2048)


def receipt_to_dict(receipt: delivery_pb2.Receipt) -> dict[str, Any]:
    return {
        "run_id": receipt.run_id,
        "thread_id": receipt.thread_id,
        "epoch": receipt.epoch,
        "outcome": codec.RUN_STATUS_NAMES.get(receipt.outcome, "error"),
        "verdict": receipt.verdict,
        "verdict_reason": receipt.verdict_reason,
        "final_output": codec.loads(receipt.final_output_json, None),
        "error": (
            {"error": receipt.error.error, "message": receipt.error.message}
            if receipt.error.error or receipt.error.message
            else None
        ),
        "presented": list(receipt.presented),
        "produced": list(receipt.produced),
        "matched": list(receipt.matched),
        "changes": [change_to_dict(c) for c in receipt.changes],
        "usage": codec.loads(receipt.usage_json, {}),
        "created_at": receipt.created_at,
    }


def change_to_dict(change: delivery_pb2.FileChange) -> dict[str, Any]:
    return {
        "path": change.path,
        "change": change.change,
        "size": change.size,
        "sha256": change.sha256,
    }


def file_to_dict(file: delivery_pb2.WorkspaceFile) -> dict[str, Any]:
    return {"path": file.path, "size": file.size, "sha256": file.sha256}


def delivery_to_dict(delivery: delivery_pb2.WebhookDelivery) -> dict[str, Any]:
    return {
        "delivery_id": delivery.delivery_id,
        "run_id": delivery.run_id,
        "epoch": delivery.epoch,
        "url": delivery.url,
        "source": delivery.source,
        "state": delivery.state,
        "next_attempt_at": delivery.next_attempt_at or None,
        "created_at": delivery.created_at,
        "attempts": [
            {
                "attempt": a.attempt,
                "attempt_id": a.attempt_id,
                "sent_at": a.sent_at,
                "status_code": a.status_code or None,
                "error": a.error or None,
            }
            for a in delivery.attempts
        ],
    }


def subscription_to_dict(row: delivery_pb2.WebhookSubscription) -> dict[str, Any]:
    return {
        "subscription_id": row.subscription_id,
        "scope": row.scope,
        "scope_id": row.scope_id,
        "url": row.url,
        "created_at": row.created_at,
    }


async def _receipt(peers: Peers, thread_id: UUID, run_id: UUID) -> delivery_pb2.Receipt:
    await get_run_record(peers, thread_id, run_id)  # 404 unless the run is the caller's
    return await call(peers.delivery.GetReceipt(delivery_pb2.GetReceiptRequest(run_id=str(run_id))))


async def _own_thread(peers: Peers, thread_id: UUID) -> None:
    await call(peers.admission.GetThread(admission_pb2.GetThreadRequest(thread_id=str(thread_id))))


# ---- receipts and workspace changes -------------------------------------------


@router.get("/threads/{thread_id}/runs/{run_id}/receipt")
async def get_receipt(thread_id: UUID, run_id: UUID, request: Request) -> dict[str, Any]:
    return receipt_to_dict(await _receipt(peers_of(request), thread_id, run_id))


@router.get("/threads/{thread_id}/runs/{run_id}/workspace-changes")
async def workspace_changes(thread_id: UUID, run_id: UUID, request: Request) -> dict[str, Any]:
    """Files the run created, modified and deleted (from its snapshots)."""
    receipt = await _receipt(peers_of(request), thread_id, run_id)
    grouped: dict[str, list[dict[str, Any]]] = {"created": [], "modified": [], "deleted": []}
    for change in receipt.changes:
        grouped[change.change].append(change_to_dict(change))
    return {"run_id": str(run_id), "epoch": receipt.epoch, **grouped}


# ---- outputs and uploads --------------------------------------------------------


@router.get("/threads/{thread_id}/outputs")
async def list_outputs(thread_id: UUID, request: Request) -> list[dict[str, Any]]:
    """Every file the thread's runs presented and produced, as it is now."""
    peers = peers_of(request)
    await _own_thread(peers, thread_id)
    reply = await call(
        peers.delivery.ListOutputs(delivery_pb2.ListOutputsRequest(thread_id=str(thread_id)))
    )
    return [{**file_to_dict(o.file), "run_id": o.run_id} for o in reply.outputs]


class FilePathConvertor(PathConvertor):
    """Starlette's `path`, newlines included: a file name may hold one."""

    regex = "(?s:.*)"


register_url_convertor("filepath", FilePathConvertor())


@router.get("/threads/{thread_id}/outputs/{path:filepath}")
async def download_output(thread_id: UUID, path: str, request: Request) -> Response:
    peers = peers_of(request)
    await _own_thread(peers, thread_id)
    chunks = peers.delivery.ReadOutput(
        delivery_pb2.ReadOutputRequest(thread_id=str(thread_id), path=path)
    )
    first = await _first_chunk(chunks)  # a missing output is a 404, not a broken download

    async def body() -> AsyncIterator[bytes]:
        if first is not None:
            yield first.data
        async for chunk in chunks:
            yield chunk.data

    return StreamingResponse(
        body(),
        media_type="application/octet-stream",
        headers={"Content-Disposition": attachment(path.rsplit("/", 1)[-1])},
    )


def attachment(name: str) -> str:
    """`Content-Disposition` for any file name: a plain ASCII `filename` for old
    clients, and the exact name as RFC 5987's `filename*` when it differs (headers
    are Latin-1, and a newline or quote would break them)."""
    plain = "".join(c if c.isascii() and c.isprintable() and c not in '"\\' else "_" for c in name)
    if plain == name:
        return f'attachment; filename="{name}"'
    return f"attachment; filename=\"{plain}\"; filename*=UTF-8''{quote(name, safe='')}"


async def _first_chunk(chunks: Any) -> delivery_pb2.FileChunk | None:
    try:
        async for chunk in chunks:
            return chunk
    except grpc.aio.AioRpcError as error:
        details = error.details() or ""
        raise HTTPException(http_status_for(error.code(), details), details) from error
    return None


@router.post("/threads/{thread_id}/uploads")
async def upload_files(
    thread_id: UUID, files: list[UploadFile], request: Request
) -> list[dict[str, Any]]:
    """Store files under the thread's `uploads/` folder, where its agent can read them."""
    peers = peers_of(request)
    await _own_thread(peers, thread_id)
    limit = request.app.state.settings.upload_max_bytes
    stored = []
    for upload in files:
        data = await upload.read(limit + 1)
        if len(data) > limit:
            raise HTTPException(
                413, f"{upload.filename}: uploads are limited to {limit} bytes per file."
            )
        reply = await call(
            peers.delivery.Upload(
                delivery_pb2.UploadRequest(
                    thread_id=str(thread_id), name=upload.filename or "", data=data
                )
            )
        )
        stored.append(file_to_dict(reply))
    return stored


# ---- webhooks -------------------------------------------------------------------


@router.get("/threads/{thread_id}/runs/{run_id}/deliveries")
async def list_deliveries(thread_id: UUID, run_id: UUID, request: Request) -> list[dict[str, Any]]:
    """The run's webhooks and every attempt made to deliver each."""
    peers = peers_of(request)
    await get_run_record(peers, thread_id, run_id)
    reply = await call(
        peers.delivery.ListDeliveries(delivery_pb2.ListDeliveriesRequest(run_id=str(run_id)))
    )
    return [delivery_to_dict(d) for d in reply.deliveries]


async def _scope_id(peers: Peers, scope: str, raw_id: str) -> str:
    if scope == "thread":
        await _own_thread(peers, UUID(raw_id))
        return raw_id
    assistant = await call(
        peers.admission.GetAssistant(admission_pb2.GetAssistantRequest(assistant_id=raw_id))
    )
    return assistant.assistant_id


async def _subscribe(request: Request, scope: str, raw_id: str, body: WebhookSubscribe) -> Any:
    peers = peers_of(request)
    scope_id = await _scope_id(peers, scope, raw_id)
    reply = await call(
        peers.delivery.SubscribeWebhook(
            delivery_pb2.WebhookSubscribeRequest(scope=scope, scope_id=scope_id, url=body.url)
        )
    )
    return subscription_to_dict(reply)


async def _subscriptions(request: Request, scope: str, raw_id: str) -> list[dict[str, Any]]:
    peers = peers_of(request)
    scope_id = await _scope_id(peers, scope, raw_id)
    reply = await call(
        peers.delivery.ListWebhookSubscriptions(
            delivery_pb2.ListWebhookSubscriptionsRequest(scope=scope, scope_id=scope_id)
        )
    )
    return [subscription_to_dict(s) for s in reply.subscriptions]


async def _unsubscribe(request: Request, scope: str, raw_id: str, subscription_id: str) -> Response:
    peers = peers_of(request)
    scope_id = await _scope_id(peers, scope, raw_id)
    await call(
        peers.delivery.UnsubscribeWebhook(
            delivery_pb2.WebhookUnsubscribeRequest(
                scope=scope, scope_id=scope_id, subscription_id=subscription_id
            )
        )
    )
    return Response(status_code=204)


@router.post("/threads/{thread_id}/webhooks")
async def subscribe_thread(thread_id: UUID, body: WebhookSubscribe, request: Request) -> Any:
    return await _subscribe(request, "thread", str(thread_id), body)


@router.get("/threads/{thread_id}/webhooks")
async def thread_subscriptions(thread_id: UUID, request: Request) -> list[dict[str, Any]]:
    return await _subscriptions(request, "thread", str(thread_id))


@router.delete("/threads/{thread_id}/webhooks/{subscription_id}", status_code=204)
async def unsubscribe_thread(thread_id: UUID, subscription_id: str, request: Request) -> Response:
    return await _unsubscribe(request, "thread", str(thread_id), subscription_id)


@router.post("/assistants/{assistant_id}/webhooks")
async def subscribe_assistant(assistant_id: str, body: WebhookSubscribe, request: Request) -> Any:
    return await _subscribe(request, "assistant", assistant_id, body)


@router.get("/assistants/{assistant_id}/webhooks")
async def assistant_subscriptions(assistant_id: str, request: Request) -> list[dict[str, Any]]:
    return await _subscriptions(request, "assistant", assistant_id)


@router.delete("/assistants/{assistant_id}/webhooks/{subscription_id}", status_code=204)
async def unsubscribe_assistant(
    assistant_id: str, subscription_id: str, request: Request
) -> Response:
    return await _unsubscribe(request, "assistant", assistant_id, subscription_id)
