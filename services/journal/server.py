"""The journal gRPC servicer."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import grpc

from waybill.common import codec
from waybill.common.errors import ServiceError, invalid
from waybill.common.extras import needs_redis
from waybill.common.grpc_server import configure_logging, run_service, serve
from waybill.common.journal_reading import EXPIRED_KEY
from waybill.common.metrics import StatsCollector, register
from waybill.common.settings import Settings, get_settings
from waybill.common.sql import service_engine
from waybill.common.tracing import run_span
from waybill.services.journal.hub import END, HubConfig, JournalHub, LogExpired
from waybill.services.journal.memory_hub import MemoryJournalHub
from waybill.services.journal.metrics import (
    APPEND_SECONDS,
    STALE_APPENDS,
    STATS_DOCS,
    STATS_GAUGES,
    JournalLag,
)
from waybill.services.journal.record_rpcs import append_records, list_records
from waybill.services.journal.records import RecordStore
from waybill.services.journal.retention import retention_loop
from waybill.services.journal.schema import SCHEMA
from waybill.services.journal.stats import STATS
from waybill.services.journal.store import JournalStore, StoredEvent
from waybill.v1 import journal_pb2, journal_pb2_grpc

ITEM_BYTES = 1024 * 1024


class JournalServicer(journal_pb2_grpc.JournalServicer):
    def __init__(self, hub: JournalHub, records: RecordStore | None = None) -> None:
        self.hub = hub
        self.records = records or RecordStore(hub.store.engine)

    async def Append(
        self, request: journal_pb2.AppendRequest, context: grpc.aio.ServicerContext
    ) -> journal_pb2.AppendResponse:
        return journal_pb2.AppendResponse(last_seq=await self._append(request))

    async def AppendStream(
        self,
        request_iterator: AsyncIterator[journal_pb2.AppendRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[journal_pb2.AppendResponse]:
        async for request in request_iterator:
            try:
                last_seq = await self._append(request)
            except ServiceError as refusal:  # this batch only: the stream serves other runs too
                yield journal_pb2.AppendResponse(error=refusal.message)
                continue
            yield journal_pb2.AppendResponse(last_seq=last_seq)

    async def _append(self, request: journal_pb2.AppendRequest) -> int:
        """One batch: timed, and (tracing on) a span in the run's trace."""
        items = [(event.event, event.data) for event in request.events]
        with run_span("journal.append", request.run_id, events=len(items)):
            started = time.perf_counter()
            try:
                return await self.hub.append(request.run_id, request.epoch, items)
            except ServiceError as refusal:
                if "is stale" in refusal.message:  # a fenced runner writing on
                    STALE_APPENDS.inc()
                raise
            finally:
                APPEND_SECONDS.observe(time.perf_counter() - started)

    async def Flush(
        self, request: journal_pb2.FlushRequest, context: grpc.aio.ServicerContext
    ) -> journal_pb2.FlushResponse:
        return journal_pb2.FlushResponse(durable_seq=await self.hub.flush(request.run_id))

    async def Close(
        self, request: journal_pb2.CloseRequest, context: grpc.aio.ServicerContext
    ) -> journal_pb2.CloseResponse:
        with run_span("journal.close", request.run_id):
            closed = await self.hub.close(request.run_id, request.epoch)
        return journal_pb2.CloseResponse(closed=closed)

    async def Forget(
        self, request: journal_pb2.ForgetRequest, context: grpc.aio.ServicerContext
    ) -> journal_pb2.ForgetResponse:
        run_ids = list(request.run_ids)
        for run_id in run_ids:
            if not codec.is_uuid(run_id):
                raise invalid(f"run_ids: '{run_id}' is not a UUID.")
        forgotten = await self.hub.forget(run_ids) if run_ids else 0
        if run_ids:
            await self.records.forget(run_ids)
        return journal_pb2.ForgetResponse(forgotten=forgotten)

    async def AppendRecords(
        self, request: journal_pb2.AppendRecordsRequest, context: grpc.aio.ServicerContext
    ) -> journal_pb2.AppendRecordsResponse:
        return await append_records(self.records, request)

    async def ListRecords(
        self, request: journal_pb2.ListRecordsRequest, context: grpc.aio.ServicerContext
    ) -> journal_pb2.ListRecordsResponse:
        return await list_records(self.records, request)

    async def Subscribe(
        self, request: journal_pb2.SubscribeRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[journal_pb2.SubscribeItem]:
        # Expired before or while it is read (swept mid-replay), the caller is told
        # which (a trailer) so that it answers 410, or ends a begun stream cleanly.
        try:
            await self.hub.readable(request.run_id)
            # The log is there: tell the caller now, before any event (it may be a while).
            await context.send_initial_metadata(())
            stream = self.hub.subscribe(request.run_id, request.from_seq, request.live_only)
            async for batch in stream:
                if batch is END:
                    yield journal_pb2.SubscribeItem(end=True)
                    return
                for part in _by_size(batch):
                    yield _item(part)
        except LogExpired:
            context.set_trailing_metadata(((EXPIRED_KEY, "1"),))
            raise

    async def GetStats(
        self, request: journal_pb2.JournalStatsRequest, context: grpc.aio.ServicerContext
    ) -> journal_pb2.JournalStatsReply:
        return journal_pb2.JournalStatsReply(json=codec.dumps(STATS.as_dict()))


def _by_size(batch: list[StoredEvent]) -> list[list[StoredEvent]]:
    """Split a batch into messages of about ITEM_BYTES at most (one event at least),
    well under gRPC's default 4 MiB a client accepts."""
    parts: list[list[StoredEvent]] = [[]]
    size = 0
    for event in batch:
        if parts[-1] and size + len(event.data) > ITEM_BYTES:
            parts.append([])
            size = 0
        parts[-1].append(event)
        size += len(event.data)
    return parts


def _item(batch: list[StoredEvent]) -> journal_pb2.SubscribeItem:
    item = journal_pb2.SubscribeItem()
    add = item.events.add  # half the cost of building each RunEvent first
    for event in batch:
        add(seq=event.seq, event=event.event, data=event.data)
    return item


def make_hub(settings: Settings, store: JournalStore) -> JournalHub:
    """The memory hub embedded; with WAYBILL_REDIS_URL the Redis one (the `redis` extra)."""
    config = HubConfig(
        batch_max=settings.journal_batch_max,
        write_linger=settings.journal_write_linger_seconds,
        evict_after=settings.journal_evict_seconds,
        subscriber_buffer=settings.subscriber_buffer,
        poll_seconds=settings.journal_poll_seconds,
        retention_seconds=settings.journal_retention_seconds,
    )
    if not settings.redis_url:
        return MemoryJournalHub(store, config)
    with needs_redis():
        from waybill.services.journal.redis_hub import RedisConfig, RedisJournalHub
    redis = RedisConfig(
        url=settings.redis_url,
        prefix=settings.journal_redis_prefix,
        ttl_seconds=settings.journal_redis_ttl_seconds,
        retry_seconds=settings.journal_redis_retry_seconds,
        block_seconds=settings.journal_redis_block_seconds,
        connections=settings.journal_redis_connections,
        heartbeat_seconds=settings.journal_heartbeat_seconds,
        dead_seconds=settings.journal_replica_dead_seconds,
    )
    return RedisJournalHub(store, config, redis)


async def main() -> None:
    settings = get_settings()
    configure_logging("journal")
    register(StatsCollector("waybill_journal", STATS, STATS_DOCS, STATS_GAUGES))
    register(JournalLag())
    store = JournalStore(service_engine(settings, settings.sqlalchemy_url("journal")))
    await SCHEMA.check(store.engine)  # `waybill migrate` upgrades it, once per deploy
    hub = make_hub(settings, store)
    hub.start()
    sweeper = retention_loop(
        store, settings.journal_retention_seconds, settings.journal_sweep_seconds, hub.expired
    )
    sweeper.start()

    async def stop() -> None:
        await sweeper.stop()

    servicer = JournalServicer(hub, RecordStore(store.engine))
    await serve(
        "Journal",
        settings.journal_addr,
        lambda server: journal_pb2_grpc.add_JournalServicer_to_server(servicer, server),
        on_stop=stop,
        grace_seconds=settings.shutdown_grace_seconds,
    )
    # After the server stopped: appends accepted during the grace are flushed too.
    await hub.stop()
    await store.engine.dispose()


if __name__ == "__main__":
    run_service(main)
