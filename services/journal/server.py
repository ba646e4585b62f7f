"""The journal gRPC servicer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from common import codec
from common.errors import ServiceError, invalid
from common.grpc_server import configure_logging, run_service, serve, translate_errors
from common.settings import get_settings
from services.journal.hub import END, JournalHub
from services.journal.record_rpcs import append_records, list_records
from services.journal.records import RecordStore
from services.journal.store import JournalStore
from waybill.v1 import journal_pb2, journal_pb2_grpc


class JournalServicer(journal_pb2_grpc.JournalServicer):
    def __init__(self, hub: JournalHub, records: RecordStore | None = None) -> None:
        self.hub = hub
        self.records = records or RecordStore(hub.store.engine)

    @translate_errors
    async def Append(self, request, context):  # type: ignore[no-untyped-def]
        items = [(event.event, event.data) for event in request.events]
        last_seq = await self.hub.append(request.run_id, request.epoch, items)
        return journal_pb2.AppendResponse(last_seq=last_seq)

    async def AppendStream(  # type: ignore[override]
        self, request_iterator: AsyncIterator[journal_pb2.AppendRequest], context: Any
    ) -> AsyncIterator[journal_pb2.AppendResponse]:
        async for request in request_iterator:
            items = [(event.event, event.data) for event in request.events]
            try:
                last_seq = await self.hub.append(request.run_id, request.epoch, items)
            except ServiceError as refusal:  # this batch only: the stream serves other runs too
                yield journal_pb2.AppendResponse(error=refusal.message)
                continue
            yield journal_pb2.AppendResponse(last_seq=last_seq)

    @translate_errors
    async def Flush(self, request, context):  # type: ignore[no-untyped-def]
        return journal_pb2.FlushResponse(durable_seq=await self.hub.flush(request.run_id))

    @translate_errors
    async def Close(self, request, context):  # type: ignore[no-untyped-def]
        await self.hub.close(request.run_id, request.epoch)
        return journal_pb2.CloseResponse()

    @translate_errors
    async def Forget(self, request, context):  # type: ignore[no-untyped-def]
        run_ids = list(request.run_ids)
        for run_id in run_ids:
            if not codec.is_uuid(run_id):
                raise invalid(f"run_ids: '{run_id}' is not a UUID.")
        forgotten = await self.hub.forget(run_ids) if run_ids else 0
        if run_ids:
            await self.records.forget(run_ids)
        return journal_pb2.ForgetResponse(forgotten=forgotten)

    @translate_errors
    async def AppendRecords(self, request, context):  # type: ignore[no-untyped-def]
        return await append_records(self.records, request)

    @translate_errors
    async def ListRecords(self, request, context):  # type: ignore[no-untyped-def]
        return await list_records(self.records, request)

    @translate_errors
    async def Subscribe(self, request, context):  # type: ignore[no-untyped-def]
        async for batch in self.hub.subscribe(request.run_id, request.from_seq, request.live_only):
            if batch is END:
                yield journal_pb2.SubscribeItem(end=True)
                return
            yield journal_pb2.SubscribeItem(
                events=[
                    journal_pb2.RunEvent(seq=stored.seq, event=stored.event, data=stored.data)
                    for stored in batch
                ]
            )


async def main() -> None:
    settings = get_settings()
    configure_logging("journal")
    store = JournalStore(settings.engine(settings.sqlalchemy_url("journal")))
    await store.migrate()
    hub = JournalHub(store, batch_max=settings.journal_batch_max, evict_after=30.0)
    hub.start()
    servicer = JournalServicer(hub, RecordStore(store.engine))
    await serve(
        "Journal",
        settings.journal_addr,
        lambda server: journal_pb2_grpc.add_JournalServicer_to_server(servicer, server),
        on_stop=hub.stop,
        grace_seconds=settings.shutdown_grace_seconds,
    )
    await store.engine.dispose()


if __name__ == "__main__":
    run_service(main)
