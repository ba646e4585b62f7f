"""What is particular to each journal hub, against a real SQLite store: the memory
hub's loads and eviction, the Redis replicas' seeding and repair, the SQL writes.
The contract both keep is tests/e2e/test_journal_hub_contract.py."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from sqlalchemy import func, select

from tests.support.stacks import SHARED_REDIS, free_port, fresh_postgres_database
from waybill.common.errors import ServiceError
from waybill.common.sql import create_engine
from waybill.services.journal.hub import END, HubConfig
from waybill.services.journal.memory_hub import MemoryJournalHub
from waybill.services.journal.redis_hub import RedisConfig, RedisJournalHub
from waybill.services.journal.stats import STATS
from waybill.services.journal.store import JournalStore, StoredEvent
from waybill.services.journal.tables import run_event_batches, run_logs


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[JournalStore]:
    """A migrated journal store on a fresh SQLite file."""
    opened = JournalStore(create_engine(f"sqlite+aiosqlite:///{tmp_path / 'journal.db'}"))
    await opened.migrate()
    yield opened
    await opened.engine.dispose()


@pytest.fixture
async def hub(store: JournalStore) -> AsyncIterator[MemoryJournalHub]:
    running = MemoryJournalHub(store, HubConfig(batch_max=64, evict_after=0.05))
    running.start()
    yield running
    await running.stop()


async def test_a_cancelled_opener_does_not_strand_the_others(hub: MemoryJournalHub) -> None:
    run_id = str(uuid.uuid4())
    first = asyncio.create_task(hub.open(run_id))
    await asyncio.sleep(0)  # the load has started on behalf of `first`
    second = asyncio.create_task(hub.append(run_id, 1, [("metadata", b"{}")]))
    first.cancel()
    assert await asyncio.wait_for(second, timeout=5) == 0


async def test_events_are_numbered_and_replayed_after_eviction(hub: MemoryJournalHub) -> None:
    run_id = str(uuid.uuid4())
    await hub.append(run_id, 1, [("metadata", b"{}"), ("values", b"1")])
    await hub.append(run_id, 1, [("values", b"2")])
    await hub.close(run_id, 1)
    await asyncio.sleep(0.2)  # evicted from memory: the replay comes from SQL
    assert run_id not in hub.logs
    batches = [b async for b in hub.subscribe(run_id, from_seq=1, live_only=False)]
    assert batches[-1] is END
    replayed = [e for batch in batches[:-1] for e in batch]
    assert [(e.seq, e.event, e.data) for e in replayed] == [
        (1, "values", b"1"),
        (2, "values", b"2"),
    ]


def token_frames(run_id: str, first: int, count: int) -> list[StoredEvent]:
    """Events like a streaming model's: each carries the same ~600 bytes of metadata."""
    metadata = b'{"langgraph_node":"model","langgraph_step":1,"thread_id":"' + b"t" * 520 + b'"}'
    return [
        StoredEvent(run_id, seq, "messages", b'[{"content":"tok%d"},%s]' % (seq, metadata))
        for seq in range(first, first + count)
    ]


async def stored_rows(store: JournalStore, run_id: str) -> list[tuple[int, int, int]]:
    """(first_seq, last_seq, bytes stored) of each of the run's rows."""
    batches = run_event_batches.c
    query = (
        select(batches.first_seq, batches.last_seq, func.length(batches.frames))
        .where(batches.run_id == run_id)
        .order_by(batches.first_seq)
    )
    async with store.engine.connect() as conn:
        return [tuple(row) for row in (await conn.execute(query)).all()]


async def test_each_write_stores_a_run_as_one_compressed_row(store: JournalStore) -> None:
    run_id, other = str(uuid.uuid4()), str(uuid.uuid4())
    events = token_frames(run_id, 0, 2000)
    for start in range(0, 2000, 500):  # two runs' events interleaved in each write
        await store.write(events[start : start + 500] + token_frames(other, start, 1), {})
    rows = await stored_rows(store, run_id)
    assert [(first, last) for first, last, _ in rows] == [
        (0, 499),
        (500, 999),
        (1000, 1499),
        (1500, 1999),
    ]
    raw = sum(len(e.data) + len(e.event) for e in events)
    assert sum(size for _, _, size in rows) * 20 < raw  # compressed, not just packed
    # `other` got 0, 500, 1000, 1500: not consecutive, so one row each.
    assert [(f, last) for f, last, _ in await stored_rows(store, other)] == [
        (0, 0),
        (500, 500),
        (1000, 1000),
        (1500, 1500),
    ]
    await store.mark_closed(run_id, 1)
    stored = await store.load(run_id)
    assert stored is not None and stored.events == events
    page = await store.page(run_id, 730, 100)  # from inside a row, fewer than a row
    assert page.events == events[730:830] and not page.closed
    tail = await store.page(run_id, 1990, 100)
    assert tail.events == events[1990:] and tail.closed


async def test_overlapping_and_retried_rows_give_each_event_once(store: JournalStore) -> None:
    """A retried write that had committed, and events copied from Redis at other
    boundaries than the rows already stored (a replica that died), overlap."""
    run_id = str(uuid.uuid4())
    events = token_frames(run_id, 0, 300)
    await store.write(events[:100], {run_id: 1})
    await store.write(events[:100], {})  # retried: changes nothing
    await store.write(events[200:300], {})  # 100..199 not stored yet: a hole
    assert len(await stored_rows(store, run_id)) == 2
    assert await store.stored_through(run_id, 299) == 200
    await store.mark_closed(run_id, 1)
    hole = await store.page(run_id, 50, 1000)
    assert hole.events == events[50:100] and not hole.closed  # never past a hole

    await store.write(events[:250], {})  # the copy: overlaps all three stretches
    assert len(await stored_rows(store, run_id)) == 3
    assert await store.stored_through(run_id, 299) == 300
    assert await store.stored_through(run_id, 149) == 150
    whole = await store.page(run_id, 0, 1000)
    assert whole.events == events and whole.closed
    loaded = await store.load(run_id)
    assert loaded is not None and loaded.events == events
    head = await store.head(run_id)
    assert head is not None and head.next_seq == 300


async def test_paging_gives_every_event_once_whatever_the_rows_hold(store: JournalStore) -> None:
    """Big rows (a burst) read a page at a time, and more one-event rows (a trickle)
    than one read takes: the pages join up, and only the last says the log is closed."""
    run_id = str(uuid.uuid4())
    events = token_frames(run_id, 0, 1200)
    await store.write(events[:1000], {run_id: 1})  # one row of 1,000
    for event in events[1000:]:  # then 200 rows of one
        await store.write([event], {})
    await store.mark_closed(run_id, 1)
    pages, next_seq = [], 0
    while True:
        page = await store.page(run_id, next_seq, 64)
        assert len(page.events) <= 64
        pages.append(page)
        if page.closed:
            break
        next_seq = page.events[-1].seq + 1
    assert [e for page in pages for e in page.events] == events
    assert [page.closed for page in pages].count(True) == 1


async def test_the_sql_write_lingers_for_more_events_but_never_delays_a_flush(
    store: JournalStore,
) -> None:
    lingering = MemoryJournalHub(store, HubConfig(batch_max=64, write_linger=0.3))
    lingering.start()
    try:
        run_id = str(uuid.uuid4())
        for n in range(3):  # three appends in the linger: one write
            await lingering.append(run_id, 1, [("values", str(n).encode())])
        await asyncio.sleep(0.05)
        assert await store.load(run_id) is None  # still lingering: nothing written yet
        await asyncio.sleep(0.4)
        written = await store.load(run_id)
        assert written is not None and [e.seq for e in written.events] == [0, 1, 2]

        await lingering.append(run_id, 1, [("values", b"3")])
        # A flush (the runner's, before its receipt) ends the linger at once.
        assert await asyncio.wait_for(lingering.flush(run_id), timeout=0.2) == 3
        flushed = await store.load(run_id)
        assert flushed is not None and [e.seq for e in flushed.events] == [0, 1, 2, 3]

        # A full batch does not wait either.
        events = [("values", b"x")] * 64
        await lingering.append(run_id, 1, events)
        await asyncio.sleep(0.1)
        full = await store.load(run_id)
        assert full is not None and len(full.events) == 4 + 64
    finally:
        await lingering.stop()


async def closed_at(store: JournalStore, run_id: str) -> object:
    async with store.engine.connect() as conn:
        query = select(run_logs.c.closed_at).where(run_logs.c.run_id == run_id)
        return (await conn.execute(query)).scalar()


# ---- bounded subscribers, both hubs -------------------------------------------------


async def collect(stream: AsyncIterator[list[StoredEvent] | None]) -> list[StoredEvent]:
    events: list[StoredEvent] = []
    async for batch in stream:
        if batch is END:
            break
        events.extend(batch)
    return events


async def test_a_slow_subscriber_overflows_is_counted_and_misses_nothing(
    store: JournalStore,
) -> None:
    small = MemoryJournalHub(store, HubConfig(batch_max=8, subscriber_buffer=4, evict_after=0.05))
    small.start()
    run_id = str(uuid.uuid4())
    await small.append(run_id, 1, [("metadata", b"{}")])
    stream = small.subscribe(run_id, from_seq=0, live_only=False)
    assert [e.seq for e in await anext(stream) or []] == [0]
    following = asyncio.create_task(anext(stream))  # caught up: it follows live now
    await asyncio.sleep(0.01)
    await small.append(run_id, 1, [("values", b"1")])
    assert [e.seq for e in await following or []] == [1]
    before = STATS.subscriber_overflows
    for i in range(2, 101):  # the subscriber reads nothing meanwhile
        await small.append(run_id, 1, [("values", str(i).encode())])
    await small.close(run_id, 1)
    rest = await collect(stream)
    assert [e.seq for e in rest] == list(range(2, 101))
    assert [e.data for e in rest] == [str(i).encode() for i in range(2, 101)]
    assert STATS.subscriber_overflows == before + 1
    await small.stop()


# ---- the Redis hub: replicas sharing Redis and SQL ------------------------------------


@pytest.fixture
async def replicas(store: JournalStore) -> AsyncIterator[tuple[RedisJournalHub, RedisJournalHub]]:
    """Two journal replicas on one SQLite file and one Redis (a key prefix of their own)."""
    redis = RedisConfig(SHARED_REDIS, prefix=f"test-journal-{uuid.uuid4().hex}", retry_seconds=2)
    config = HubConfig(batch_max=64, subscriber_buffer=16, evict_after=0.05, poll_seconds=0.05)
    hubs = (
        RedisJournalHub(store, config, redis),
        RedisJournalHub(store, config, redis),
    )
    for hub in hubs:
        hub.start()
    yield hubs
    for hub in hubs:
        keys = await hub.redis_log.client.keys(f"{redis.prefix}:*")
        if keys:
            await hub.redis_log.client.delete(*keys)
        await hub.stop()


async def test_replicas_number_one_log_and_serve_it_live(
    replicas: tuple[RedisJournalHub, RedisJournalHub],
) -> None:
    one, two = replicas
    run_id = str(uuid.uuid4())
    assert await one.append(run_id, 1, [("metadata", b"{}")]) == 0
    reader = asyncio.create_task(collect(two.subscribe(run_id, from_seq=0, live_only=False)))
    await one.append(run_id, 1, [("values", b"1"), ("values", b"2")])
    await asyncio.sleep(0.05)  # the reader on replica two follows live by now
    # A takeover appends through the other replica: numbering goes on, gap-free.
    assert await two.append(run_id, 2, [("values", b"3")]) == 3
    with pytest.raises(Exception, match="stale"):
        await one.append(run_id, 1, [("values", b"zombie")])
    await two.flush(run_id)
    await two.close(run_id, 2)
    events = await asyncio.wait_for(reader, timeout=5)
    assert [(e.seq, e.data) for e in events] == [(0, b"{}"), (1, b"1"), (2, b"2"), (3, b"3")]
    # Once Redis forgets the log, SQL serves the same events.
    await one.redis_log.delete([run_id])
    replayed = await collect(one.subscribe(run_id, from_seq=2, live_only=False))
    assert [(e.seq, e.data) for e in replayed] == [(2, b"2"), (3, b"3")]


async def test_a_second_close_through_another_replica_says_it_was_closed(
    replicas: tuple[RedisJournalHub, RedisJournalHub],
) -> None:
    one, two = replicas
    run_id = str(uuid.uuid4())
    reader = asyncio.create_task(collect(two.subscribe(run_id, from_seq=0, live_only=False)))
    await one.append(run_id, 1, [("metadata", b"{}")])
    assert await one.close(run_id, 1) is True
    assert [e.seq for e in await asyncio.wait_for(reader, timeout=5)] == [0]
    first_end = await closed_at(two.store, run_id)
    assert await two.close(run_id, 1) is False
    assert await closed_at(two.store, run_id) == first_end
    with pytest.raises(Exception, match="closed"):
        await two.append(run_id, 1, [("values", b"late")])


async def test_numbering_survives_redis_losing_its_state(
    replicas: tuple[RedisJournalHub, RedisJournalHub],
) -> None:
    one, two = replicas
    run_id = str(uuid.uuid4())
    await one.append(run_id, 1, [("metadata", b"{}"), ("values", b"1")])
    reader = asyncio.create_task(collect(two.subscribe(run_id, from_seq=0, live_only=False)))
    await asyncio.sleep(0.05)
    await one.redis_log.delete([run_id])  # what a restart without persistence does
    assert await one.append(run_id, 1, [("values", b"2")]) == 2  # re-seeded from SQL
    assert await one.append(run_id, 1, [("values", b"3")]) == 3
    await one.close(run_id, 1)
    events = await asyncio.wait_for(reader, timeout=5)
    assert [e.seq for e in events] == [0, 1, 2, 3]
    assert STATS.redis_seeds >= 2  # the run's first append, and the re-seed


async def until(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    """Wait for something another task does (the test times out if it never happens)."""
    async with asyncio.timeout(seconds):
        while not condition():  # noqa: ASYNC110 - the state lives in another object
            await asyncio.sleep(0.01)


async def test_a_slow_subscriber_on_redis_is_counted_and_misses_nothing(
    replicas: tuple[RedisJournalHub, RedisJournalHub],
) -> None:
    one, two = replicas
    run_id = str(uuid.uuid4())
    await one.append(run_id, 1, [("metadata", b"{}")])
    stream = two.subscribe(run_id, from_seq=0, live_only=False)
    assert [e.seq for e in await anext(stream) or []] == [0]
    # Caught up, the reader attaches its live buffer and waits for the next event...
    first_live = asyncio.create_task(anext(stream))
    await until(lambda: bool(getattr(two.followers.runs.get(run_id), "subscribers", None)))
    await one.append(run_id, 1, [("values", b"1")])
    assert [e.seq for e in await first_live or []] == [1]
    # ...then stops reading while 199 more arrive: its 16-event buffer overflows.
    before = STATS.subscriber_overflows
    for i in range(2, 201):
        await one.append(run_id, 1, [("values", str(i).encode())])
    await until(lambda: STATS.subscriber_overflows > before)  # as the follower reads Redis
    await one.close(run_id, 1)
    rest = await collect(stream)
    assert [e.seq for e in rest] == list(range(2, 201))
    assert STATS.subscriber_overflows >= before + 1


async def test_a_flush_copies_from_redis_what_a_stopped_replica_never_wrote(
    replicas: tuple[RedisJournalHub, RedisJournalHub],
) -> None:
    one, two = replicas
    run_id = str(uuid.uuid4())
    await one.append(run_id, 1, [("metadata", b"{}")])
    await one.flush(run_id)
    one.writer.stop()  # replica one goes down before its write-behind runs
    await one.append(run_id, 1, [("values", b"1"), ("values", b"2")])
    before = STATS.events_repaired
    assert await asyncio.wait_for(two.flush(run_id), timeout=5) == 2
    stored = await two.store.page(run_id, 0, 10)
    assert [(e.seq, e.data) for e in stored.events] == [(0, b"{}"), (1, b"1"), (2, b"2")]
    assert STATS.events_repaired > before
    one.writer.start()  # its late writes change nothing
    assert await asyncio.wait_for(one.flush(run_id), timeout=5) == 2


async def test_redis_out_of_reach_is_unavailable_without_its_address(store: JournalStore) -> None:
    address = f"127.0.0.1:{free_port()}"  # nobody listens there
    redis = RedisConfig(f"redis://{address}/0", prefix="test-journal-down", retry_seconds=0.3)
    hub = RedisJournalHub(store, HubConfig(batch_max=64), redis)
    hub.start()
    try:
        with pytest.raises(ServiceError) as raised:
            await hub.append(str(uuid.uuid4()), 1, [("metadata", b"{}")])
    finally:
        await hub.stop()
    assert raised.value.code == grpc.StatusCode.UNAVAILABLE
    assert raised.value.message == "journal append: Redis unreachable"
    assert address not in raised.value.message


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_log_is_closed_once_and_keeps_its_first_close(backend: str, tmp_path: Path) -> None:
    """Closing opens a log no event opened; a second close (a retry, admission's
    closer after the runner's) is refused and changes nothing."""
    with contextlib.ExitStack() as scope:
        url = (
            f"sqlite+aiosqlite:///{tmp_path / 'journal.db'}"
            if backend == "sqlite"
            else scope.enter_context(fresh_postgres_database())
        )
        closing = JournalStore(create_engine(url))
        await closing.migrate()
        try:
            never_written, written = str(uuid.uuid4()), str(uuid.uuid4())
            await closing.write(token_frames(written, 0, 3), {written: 2})
            assert await closing.mark_closed(never_written, 1)
            assert await closing.mark_closed(written, 2)
            first = await closed_rows(closing)
            assert set(first) == {never_written, written}
            assert not await closing.mark_closed(written, 3)
            assert not await closing.mark_closed(never_written, 1)
            assert await closed_rows(closing) == first  # epochs and close times as they were
        finally:
            await closing.engine.dispose()


async def closed_rows(store: JournalStore) -> dict[str, tuple[int, Any]]:
    async with store.engine.connect() as conn:
        rows = (await conn.execute(select(run_logs))).all()
    return {row.run_id: (row.epoch, row.closed_at) for row in rows if row.closed_at is not None}
