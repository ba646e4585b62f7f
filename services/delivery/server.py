"""The delivery gRPC servicer."""

from __future__ import annotations

from common import codec
from common.errors import invalid
from common.grpc_server import configure_logging, run_service, serve, translate_errors
from common.settings import get_settings
from common.tracing import run_span
from services.delivery.metrics import RECEIPTS_WRITTEN
from services.delivery.store import ReceiptRecord, ReceiptStore
from waybill.v1 import common_pb2, delivery_pb2, delivery_pb2_grpc


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
    )


class DeliveryServicer(delivery_pb2_grpc.DeliveryServicer):
    def __init__(self, store: ReceiptStore) -> None:
        self.store = store

    @translate_errors
    async def WriteReceipt(self, request, context):  # type: ignore[no-untyped-def]
        record = ReceiptRecord(
            run_id=request.run_id,
            epoch=request.epoch,
            thread_id=request.thread_id,
            outcome=codec.RUN_STATUS_NAMES.get(request.outcome, "error"),
            # Workspace verification arrives with the delivery issue; until then a
            # run is judged only by how its graph ended.
            verdict="not_applicable",
            final_output=request.final_output_json or b"null",
            error_type=request.error.error,
            error_message=request.error.message,
            created_at=codec.now_utc(),
        )
        with run_span("delivery.receipt", record.run_id, record.thread_id):
            await self.store.write(record)
        RECEIPTS_WRITTEN.labels(record.outcome).inc()
        return _to_proto(record)

    @translate_errors
    async def GetReceipt(self, request, context):  # type: ignore[no-untyped-def]
        return _to_proto(await self.store.latest(request.run_id))

    @translate_errors
    async def ForgetReceipts(self, request, context):  # type: ignore[no-untyped-def]
        thread_ids = [request.thread_id] if request.thread_id else []
        for value in [*thread_ids, *request.run_ids]:
            if not codec.is_uuid(value):
                raise invalid(f"'{value}' is not a UUID.")
        deleted = await self.store.forget(request.thread_id, list(request.run_ids))
        return delivery_pb2.ForgetReceiptsResponse(deleted=deleted)


async def main() -> None:
    settings = get_settings()
    configure_logging("delivery")
    store = ReceiptStore(settings.engine(settings.sqlalchemy_url("delivery")))
    await store.migrate()
    servicer = DeliveryServicer(store)
    await serve(
        "Delivery",
        settings.delivery_addr,
        lambda server: delivery_pb2_grpc.add_DeliveryServicer_to_server(servicer, server),
        grace_seconds=settings.shutdown_grace_seconds,
    )
    await store.engine.dispose()


if __name__ == "__main__":
    run_service(main)
