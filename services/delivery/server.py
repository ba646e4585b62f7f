"""The delivery gRPC servicer."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import grpc

from waybill.common import codec, workspace_paths
from waybill.common.errors import invalid, not_found
from waybill.common.grpc_channels import PeerChannels
from waybill.common.grpc_server import configure_logging, run_service, serve
from waybill.common.identity import acting_user
from waybill.common.settings import Settings, get_settings
from waybill.common.sql import service_engine
from waybill.common.tracing import run_span
from waybill.common.webhook_targets import WebhookTargetRefused, check_webhook_url
from waybill.services.delivery.channels.server import ChannelsService
from waybill.services.delivery.channels.store import ChannelStore
from waybill.services.delivery.metrics import RECEIPTS_WRITTEN
from waybill.services.delivery.outbox import Outbox
from waybill.services.delivery.outbox_store import (
    AttemptRow,
    DeliveryRow,
    OutboxStore,
    SubscriptionRow,
)
from waybill.services.delivery.receipting import write_receipt
from waybill.services.delivery.schema import SCHEMA
from waybill.services.delivery.store import ReceiptRecord, ReceiptStore
from waybill.services.delivery.workspace_files import (
    CHUNK,
    FileEntry,
    normalized,
    open_output,
    served,
    snapshot_of,
    thread_root,
    write_upload,
)
from waybill.v1 import admission_pb2_grpc, common_pb2, delivery_pb2, delivery_pb2_grpc

SCOPES = ("thread", "assistant")
T = TypeVar("T")


def _file(entry: FileEntry) -> delivery_pb2.WorkspaceFile:
    return delivery_pb2.WorkspaceFile(path=entry.path, size=entry.size, sha256=entry.sha256)


def _to_proto(record: ReceiptRecord) -> delivery_pb2.Receipt:
    return delivery_pb2.Receipt(
        run_id=record.run_id,
        thread_id=record.thread_id,
        epoch=record.epoch,
        outcome=codec.RUN_STATUS_VALUES[record.outcome],
        final_output_json=record.final_output,
        error=common_pb2.RunError(error=record.error_type, message=record.error_message),
        created_at=codec.iso(record.created_at),
        verdict=record.verdict,
        verdict_reason=record.verdict_reason,
        presented=record.presented,
        produced=record.produced,
        matched=record.matched,
        changes=[
            delivery_pb2.FileChange(path=c.path, change=c.change, size=c.size, sha256=c.sha256)
            for c in record.changes
        ],
        usage_json=codec.dumps(record.usage),
    )


def _attempt(row: AttemptRow) -> delivery_pb2.WebhookAttempt:
    return delivery_pb2.WebhookAttempt(
        attempt=row.attempt,
        attempt_id=row.attempt_id,
        sent_at=codec.iso(row.sent_at),
        status_code=row.status_code,
        error=row.error,
    )


def _delivery(row: DeliveryRow, attempts: list[AttemptRow]) -> delivery_pb2.WebhookDelivery:
    return delivery_pb2.WebhookDelivery(
        delivery_id=row.delivery_id,
        run_id=row.run_id,
        epoch=row.epoch,
        url=row.url,
        source=row.source,
        state=row.state,
        next_attempt_at=codec.iso(row.next_attempt_at) if row.state == "pending" else "",
        attempts=[_attempt(a) for a in attempts],
        created_at=codec.iso(row.created_at),
    )


def _subscription(row: SubscriptionRow) -> delivery_pb2.WebhookSubscription:
    return delivery_pb2.WebhookSubscription(
        subscription_id=row.subscription_id,
        scope=row.scope,
        scope_id=row.scope_id,
        url=row.url,
        created_at=codec.iso(row.created_at),
    )


def _uuid(value: str, what: str) -> str:
    if not codec.is_uuid(value):
        raise invalid(f"{what} '{value}' is not a UUID.")
    return value


def _scope(scope: str, scope_id: str) -> None:
    if scope not in SCOPES:
        raise invalid(f"scope must be one of {', '.join(SCOPES)} (got {scope!r})")
    if not scope_id:
        raise invalid("scope_id is required")


class DeliveryServicer(delivery_pb2_grpc.DeliveryServicer):
    def __init__(
        self, settings: Settings, store: ReceiptStore, outbox_store: OutboxStore, outbox: Outbox
    ) -> None:
        self.settings = settings
        self.store = store
        self.outbox_store = outbox_store
        self.outbox = outbox

    async def Snapshot(
        self, request: delivery_pb2.SnapshotRequest, context: grpc.aio.ServicerContext
    ) -> delivery_pb2.SnapshotResponse:
        _uuid(request.run_id, "run_id")
        thread_id = _uuid(request.thread_id, "thread_id")
        files = await self.store.continued_snapshot(request.continues_run_id)
        if files is None:
            files = await snapshot_of(self.settings, thread_id)
        kept, existing = await self.store.keep_first_snapshot(
            request.run_id, request.thread_id, request.epoch, files, codec.now_utc()
        )
        return delivery_pb2.SnapshotResponse(files=[_file(f) for f in kept], existing=existing)

    async def WriteReceipt(
        self, request: delivery_pb2.WriteReceiptRequest, context: grpc.aio.ServicerContext
    ) -> delivery_pb2.Receipt:
        _uuid(request.run_id, "run_id")
        _uuid(request.thread_id, "thread_id")
        with run_span("delivery.receipt", request.run_id, request.thread_id):
            record, held = await write_receipt(
                request, self.settings, self.store, self.outbox_store
            )
        RECEIPTS_WRITTEN.labels(record.outcome).inc()
        written = _to_proto(record)
        written.webhooks_held = held
        return written

    async def ConfirmFinished(
        self, request: delivery_pb2.ConfirmFinishedRequest, context: grpc.aio.ServicerContext
    ) -> delivery_pb2.ConfirmFinishedResponse:
        released = await self.outbox.confirm(request.run_id, request.epoch)
        return delivery_pb2.ConfirmFinishedResponse(released=released)

    async def GetReceipt(
        self, request: delivery_pb2.GetReceiptRequest, context: grpc.aio.ServicerContext
    ) -> delivery_pb2.Receipt:
        return _to_proto(await self.store.latest(request.run_id))

    async def ForgetReceipts(
        self, request: delivery_pb2.ForgetReceiptsRequest, context: grpc.aio.ServicerContext
    ) -> delivery_pb2.ForgetReceiptsResponse:
        thread_ids = [request.thread_id] if request.thread_id else []
        for value in [*thread_ids, *request.run_ids]:
            _uuid(value, "id")
        deleted = await self.store.forget(request.thread_id, list(request.run_ids))
        return delivery_pb2.ForgetReceiptsResponse(deleted=deleted)

    # ---- outputs and uploads -----------------------------------------------------

    async def _outputs(self, thread_id: str) -> list[delivery_pb2.Output]:
        presented_by: dict[str, str] = {}
        for receipt in await self.store.thread_receipts(thread_id):
            for path in receipt.matched:
                presented_by[path] = receipt.run_id
        now = {e.path: e for e in await snapshot_of(self.settings, thread_id)}
        return [
            delivery_pb2.Output(file=_file(now[path]), run_id=run_id)
            for path, run_id in sorted(presented_by.items())
            if path in now
        ]

    async def ListOutputs(
        self, request: delivery_pb2.ListOutputsRequest, context: grpc.aio.ServicerContext
    ) -> delivery_pb2.ListOutputsResponse:
        outputs = await self._outputs(_uuid(request.thread_id, "thread_id"))
        return delivery_pb2.ListOutputsResponse(outputs=outputs)

    async def ReadOutput(
        self, request: delivery_pb2.ReadOutputRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[delivery_pb2.FileChunk]:
        thread_id, path = _uuid(request.thread_id, "thread_id"), normalized(request.path)
        listed = {output.file.path for output in await self._outputs(thread_id)}
        if path not in listed:
            raise not_found(f"{request.path!r} is not an output of this thread")
        # Opened and read from the workspace root's descriptor, off the loop, each
        # step within WAYBILL_WORKSPACE_IO_SECONDS (common/workspace_paths.py).
        root = thread_root(self.settings, thread_id)
        fd = await self._workspace_io(open_output, root, path)
        try:
            while block := await self._workspace_io(os.read, fd, CHUNK):
                yield delivery_pb2.FileChunk(data=block)
        finally:
            os.close(fd)

    async def _workspace_io(self, work: Callable[..., T], *args: Any) -> T:
        try:
            return await workspace_paths.off_loop(self.settings.workspace_io_seconds, work, *args)
        except workspace_paths.WorkspacePathError as error:
            raise served(error) from error

    async def Upload(
        self, request: delivery_pb2.UploadRequest, context: grpc.aio.ServicerContext
    ) -> delivery_pb2.WorkspaceFile:
        if len(request.data) > self.settings.upload_max_bytes:
            raise invalid(
                f"the file is {len(request.data)} bytes; uploads are limited to "
                f"{self.settings.upload_max_bytes} (WAYBILL_UPLOAD_MAX_BYTES)"
            )
        root = thread_root(self.settings, _uuid(request.thread_id, "thread_id"))
        entry = await self._workspace_io(write_upload, root, request.name, request.data)
        return _file(entry)

    # ---- webhooks ------------------------------------------------------------------

    async def ListDeliveries(
        self, request: delivery_pb2.ListDeliveriesRequest, context: grpc.aio.ServicerContext
    ) -> delivery_pb2.ListDeliveriesResponse:
        found = await self.outbox_store.for_run(_uuid(request.run_id, "run_id"))
        return delivery_pb2.ListDeliveriesResponse(
            deliveries=[_delivery(row, attempts) for row, attempts in found]
        )

    async def SubscribeWebhook(
        self, request: delivery_pb2.WebhookSubscribeRequest, context: grpc.aio.ServicerContext
    ) -> delivery_pb2.WebhookSubscription:
        _scope(request.scope, request.scope_id)
        try:
            await check_webhook_url(request.url, self.settings)
        except WebhookTargetRefused as refused:
            raise invalid(str(refused)) from refused
        row = SubscriptionRow(
            subscription_id=str(uuid.uuid4()),
            scope=request.scope,
            scope_id=request.scope_id,
            url=request.url,
            owner_id=acting_user(context),
            created_at=codec.now_utc(),
        )
        await self.outbox_store.subscribe(row)
        return _subscription(row)

    async def ListWebhookSubscriptions(
        self,
        request: delivery_pb2.ListWebhookSubscriptionsRequest,
        context: grpc.aio.ServicerContext,
    ) -> delivery_pb2.ListWebhookSubscriptionsResponse:
        _scope(request.scope, request.scope_id)
        rows = await self.outbox_store.subscriptions(request.scope, request.scope_id)
        return delivery_pb2.ListWebhookSubscriptionsResponse(
            subscriptions=[_subscription(row) for row in rows]
        )

    async def UnsubscribeWebhook(
        self, request: delivery_pb2.WebhookUnsubscribeRequest, context: grpc.aio.ServicerContext
    ) -> delivery_pb2.WebhookUnsubscribeResponse:
        _scope(request.scope, request.scope_id)
        if not codec.is_uuid(request.subscription_id):
            raise not_found(f"Subscription {request.subscription_id} not found.")
        await self.outbox_store.unsubscribe(
            request.scope, request.scope_id, request.subscription_id
        )
        return delivery_pb2.WebhookUnsubscribeResponse()


async def main() -> None:
    settings = get_settings()
    configure_logging("delivery")
    store = ReceiptStore(service_engine(settings, settings.sqlalchemy_url("delivery")))
    await SCHEMA.check(store.engine)  # `waybill migrate` upgrades it, once per deploy
    outbox_store = OutboxStore(store.engine)
    peers = PeerChannels(settings)
    outbox = Outbox(settings, outbox_store, admission_pb2_grpc.AdmissionStub(peers.admission()))
    outbox.start()
    servicer = DeliveryServicer(settings, store, outbox_store, outbox)
    channels = ChannelsService(settings, ChannelStore(store.engine), peers)

    def register(server: grpc.aio.Server) -> None:
        delivery_pb2_grpc.add_DeliveryServicer_to_server(servicer, server)
        channels.register(server)

    channels.start()
    await serve(
        "Delivery",
        settings.delivery_addr,
        register,
        on_stop=channels.stop,
        grace_seconds=settings.shutdown_grace_seconds,
    )
    await outbox.close()
    await peers.close()
    await store.engine.dispose()


if __name__ == "__main__":
    run_service(main)
