"""The journal hub's contract (`JournalHub` in services/journal/hub.py), one suite run
against both live paths: the memory hub of the embedded default, and two Redis hub
replicas sharing one Redis and one SQL store (appends through one, reads through
the other, as a load balancer would spread them).

What is particular to one path (the memory hub's eviction, Redis losing its state,
a replica stopped before its write-behind) is in tests/e2e/test_journal_hub.py.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest
from sqlalchemy import select

from tests.support.stacks import SHARED_REDIS, drop_redis_keys
from waybill.common.errors import ServiceError
from waybill.common.sql import create_engine
from waybill.services.journal.hub import END, HubConfig, JournalHub, LogExpired
from waybill.services.journal.memory_hub import MemoryJournalHub
from waybill.services.journal.redis_hub import RedisConfig, RedisJournalHub
from waybill.services.journal.store import JournalStore, StoredEvent
from waybill.services.journal.tables import expired_runs, run_logs

CONFIG = HubConfig(batch_max=16, subscriber_buffer=8, evict_after=0.05, poll_seconds=0.05)


class SlowToClose(JournalStore):
    """A store whose close takes a while to commit (a loaded database)."""

    async def mark_closed(self, run_id: str, epoch: int) -> bool:
        await asyncio.sleep(0.3)
        return await super().mark_closed(run_id, epoch)


@dataclass
class Hubs:
    """Where a test appends, and where it reads (the same hub in memory)."""

    writer: JournalHub
    reader: JournalHub
    store: JournalStore


@pytest.fixture(params=["memory", "redis"])
async def hubs(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Hubs]:
    store = SlowToClose(create_engine(f"sqlite+aiosqlite:///{tmp_path / 'journal.db'}"))
    await store.migrate()
    prefix = f"test-hub-contract-{uuid.uuid4().hex}"
    started: list[JournalHub]
    if request.param == "memory":
        started = [MemoryJournalHub(store, CONFIG)]
    else:
        redis = RedisConfig(SHARED_REDIS, prefix=prefix, retry_seconds=2)
        started = [RedisJournalHub(store, CONFIG, redis), RedisJournalHub(store, CONFIG, redis)]
    for hub in started:
        hub.start()
    try:
        yield Hubs(started[0], started[-1], store)
    finally:
        for hub in started:
            await hub.stop()
        await store.engine.dispose()
        drop_redis_keys(SHARED_REDIS, prefix)


async def collect(stream: AsyncIterator[list[StoredEvent] | None]) -> list[StoredEvent]:
    events: list[StoredEvent] = []
    async for batch in stream:
        if batch is END:
            return events
        events.extend(batch)
    raise AssertionError("the stream stopped without its end")


async def closed_at(store: JournalStore, run_id: str) -> object:
    async with store.engine.connect() as conn:
        query = select(run_logs.c.closed_at).where(run_logs.c.run_id == run_id)
        return (await conn.execute(query)).scalar()


async def test_events_are_numbered_from_zero_and_replayed_from_any_point(hubs: Hubs) -> None:
    run_id = str(uuid.uuid4())
    assert await hubs.writer.append(run_id, 1, [("metadata", b"{}")]) == 0
    assert await hubs.writer.append(run_id, 1, [("values", b"1"), ("values", b"2")]) == 2
    assert await hubs.writer.flush(run_id) == 2
    assert await hubs.writer.close(run_id, 1) is True
    for from_seq in (0, 1, 2, 3):
        replayed = await collect(hubs.reader.subscribe(run_id, from_seq, live_only=False))
        expected = [(0, "metadata", b"{}"), (1, "values", b"1"), (2, "values", b"2")]
        assert [(e.seq, e.event, e.data) for e in replayed] == expected[from_seq:]


async def test_a_stale_epoch_and_a_closed_log_refuse_appends(hubs: Hubs) -> None:
    run_id = str(uuid.uuid4())
    await hubs.writer.append(run_id, 2, [("metadata", b"{}")])
    with pytest.raises(ServiceError, match="stale"):
        await hubs.reader.append(run_id, 1, [("values", b"zombie")])
    assert await hubs.reader.append(run_id, 3, [("values", b"takeover")]) == 1
    assert await hubs.writer.close(run_id, 3) is True
    with pytest.raises(ServiceError, match="closed"):
        await hubs.reader.append(run_id, 3, [("values", b"late")])


async def test_a_second_close_changes_nothing_and_says_so(hubs: Hubs) -> None:
    """The runner closes a run's log; admission closes it again after a grace,
    through any replica."""
    run_id = str(uuid.uuid4())
    await hubs.writer.append(run_id, 1, [("metadata", b"{}")])
    assert await hubs.writer.close(run_id, 1) is True
    first_end = await closed_at(hubs.store, run_id)
    assert await hubs.reader.close(run_id, 1) is False
    await asyncio.sleep(0.2)  # past the hubs' eviction: SQL answers
    assert await hubs.reader.close(run_id, 1) is False
    assert await closed_at(hubs.store, run_id) == first_end  # retention counts from the end
    # A log nobody opened (a run that ended before its first event) is closed too.
    assert await hubs.writer.close(str(uuid.uuid4()), 1) is True


async def test_a_reader_sees_the_end_only_once_sql_has_the_close(hubs: Hubs) -> None:
    """Whoever followed a log to its end (`join` does) finds it closed in SQL, where
    a late record is refused. No append gets in meanwhile."""
    run_id = str(uuid.uuid4())
    await hubs.writer.append(run_id, 1, [("metadata", b"{}")])

    async def end_seen_closed_in_sql() -> bool:
        async for batch in hubs.reader.subscribe(run_id, from_seq=0, live_only=False):
            if batch is END:
                return await hubs.store.is_closed(run_id)
        raise AssertionError("the stream never ended")

    reader = asyncio.create_task(end_seen_closed_in_sql())
    await asyncio.sleep(0.05)  # the reader follows live
    closing = asyncio.create_task(hubs.writer.close(run_id, 1))
    await asyncio.sleep(0.1)  # the close is on its way to SQL
    with pytest.raises(ServiceError, match="closed"):
        await hubs.writer.append(run_id, 1, [("values", b"late")])
    assert await closing is True
    assert await asyncio.wait_for(reader, 5.0) is True


async def test_a_forgotten_log_ends_its_readers_and_takes_nothing_more(hubs: Hubs) -> None:
    """A thread's deletion forgets its runs' logs: a live reader ends, an append
    (a runner that has not heard yet) is refused, a new reader hears NOT_FOUND."""
    run_id = str(uuid.uuid4())
    await hubs.writer.append(run_id, 1, [("metadata", b"{}")])
    await hubs.writer.flush(run_id)
    reader = asyncio.create_task(collect(hubs.reader.subscribe(run_id, 0, live_only=False)))
    await asyncio.sleep(0.05)
    assert await hubs.writer.forget([run_id]) == 1
    await asyncio.wait_for(reader, 5.0)
    with pytest.raises(ServiceError, match="deleted"):
        await hubs.writer.append(run_id, 1, [("values", b"late")])
    with pytest.raises(ServiceError) as raised:
        await hubs.reader.readable(run_id)
    assert raised.value.code == grpc.StatusCode.NOT_FOUND
    assert await hubs.writer.close(run_id, 1) is False


async def test_an_expired_log_says_so(hubs: Hubs) -> None:
    run_id = str(uuid.uuid4())
    await hubs.writer.append(run_id, 1, [("metadata", b"{}")])
    await hubs.writer.close(run_id, 1)
    await asyncio.sleep(0.2)  # past the eviction, as any swept run is
    tomorrow = datetime.now(UTC) + timedelta(days=1)
    from_store = await hubs.store.expire(ended_before=tomorrow, limit=10)
    assert from_store == [run_id]
    await hubs.writer.expired(from_store)
    await hubs.reader.expired(from_store)
    async with hubs.store.engine.connect() as conn:
        assert (await conn.execute(select(expired_runs.c.run_id))).scalars().all() == [run_id]
    with pytest.raises(LogExpired, match="expired"):
        await hubs.reader.readable(run_id)


async def test_a_slow_reader_misses_nothing(hubs: Hubs) -> None:
    """A reader that stops reading while far more than its buffer arrives catches
    up from the log: every event once, in order."""
    run_id = str(uuid.uuid4())
    await hubs.writer.append(run_id, 1, [("metadata", b"{}")])
    stream = hubs.reader.subscribe(run_id, from_seq=0, live_only=False)
    assert [e.seq for e in await anext(stream) or []] == [0]
    for i in range(1, 201):
        await hubs.writer.append(run_id, 1, [("values", str(i).encode())])
    await hubs.writer.close(run_id, 1)
    rest = await collect(stream)
    assert [e.seq for e in rest] == list(range(1, 201))
    assert [e.data for e in rest] == [str(i).encode() for i in range(1, 201)]


async def test_the_seam_has_no_hole_and_no_duplicate(hubs: Hubs) -> None:
    """Readers join at random moments from random points while events are
    appended: each receives exactly the rest of the log, in order."""
    rng = random.Random(7)
    run_id = str(uuid.uuid4())
    total = 400

    async def append_all() -> None:
        seq = 0
        while seq < total:
            size = min(rng.randint(1, 9), total - seq)
            await hubs.writer.append(
                run_id, 1, [("values", str(seq + i).encode()) for i in range(size)]
            )
            seq += size
            await asyncio.sleep(rng.choice([0, 0, 0.001]))
        await hubs.writer.close(run_id, 1)

    async def read(delay: float, from_seq: int | None) -> tuple[int | None, list[int]]:
        await asyncio.sleep(delay)
        hub = rng.choice([hubs.writer, hubs.reader])
        stream = hub.subscribe(run_id, from_seq or 0, live_only=from_seq is None)
        return from_seq, [e.seq for e in await collect(stream)]

    await hubs.writer.append(run_id, 1, [("metadata", b"{}")])
    joins = [(rng.random() * 0.3, rng.choice([None, 0, rng.randint(0, total)])) for _ in range(30)]
    results = await asyncio.gather(append_all(), *(read(d, f) for d, f in joins))
    # The earliest live readers join well before the appends are done: an empty
    # tail alone would prove nothing.
    live = [seqs for from_seq, seqs in results[1:] if from_seq is None]
    assert any(live), "no live reader received an event"
    for from_seq, seqs in results[1:]:
        if from_seq is None:  # live only: a contiguous tail of the log
            assert seqs == list(range(total + 1 - len(seqs), total + 1))
        else:
            assert seqs == list(range(from_seq, total + 1)), from_seq
