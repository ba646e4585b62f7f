"""Live readers of the journal that wait (a long-lived stream of a run that says
nothing for a while) hold no database connection while they wait, on Postgres,
with either hub; and more readers than one Redis pool holds wait for a
connection rather than fall back to polling SQL.

The fuzz on Postgres once timed out for this: past redis-py's default 100
connections each further live read failed ("Too many connections"), the hub took
that for a lost Redis, and the readers' SQL polling exhausted the pool (5 + 10).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from tests.support.stacks import SHARED_REDIS, drop_redis_keys, fresh_postgres_database
from waybill.common.sql import create_engine
from waybill.services.journal.hub import END, HubConfig
from waybill.services.journal.memory_hub import MemoryJournalHub
from waybill.services.journal.redis_hub import RedisConfig, RedisJournalHub
from waybill.services.journal.stats import STATS
from waybill.services.journal.store import JournalStore

pytestmark = pytest.mark.timeout(90)

POOL = 5 + 10  # the journal's SQL pool on Postgres (pool_size + max_overflow)
REDIS_READERS = 130  # past redis-py's default pool of 100


@pytest.fixture
def postgres_url() -> Iterator[str]:
    with fresh_postgres_database() as url:
        yield url


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[JournalStore]:
    opened = JournalStore(create_engine(postgres_url))
    await opened.migrate()
    yield opened
    await opened.engine.dispose()


def connections_in_use(store: JournalStore) -> int:
    return int(store.engine.pool.checkedout())  # type: ignore[attr-defined]


async def readers_waiting(hub: Any, store: JournalStore, runs: int) -> None:
    """`runs` runs with one event each, a live reader on each; while they wait
    nothing holds a connection; then each gets the next event live, and its end."""
    run_ids = [str(uuid.uuid4()) for _ in range(runs)]
    for run_id in run_ids:
        await hub.append(run_id, 1, [("metadata", b"{}")])
    streams = [hub.subscribe(run_id, from_seq=0, live_only=False) for run_id in run_ids]
    for stream in streams:
        assert [event.seq for event in await anext(stream) or []] == [0]
    waiting = [asyncio.ensure_future(anext(stream)) for stream in streams]
    for run_id in run_ids:  # the write-behind's own connection is not a reader's
        await hub.writer.wait_durable(run_id)
    await asyncio.sleep(1.0)  # every reader is waiting for its next event
    assert not any(task.done() for task in waiting)
    assert connections_in_use(store) == 0, "a waiting reader holds a database connection"
    for run_id in run_ids:
        await hub.append(run_id, 1, [("values", b"1")])
    for task in waiting:
        assert [event.seq for event in await asyncio.wait_for(task, 30.0) or []] == [1]
    for run_id in run_ids:
        await hub.close(run_id, 1)
    for stream in streams:
        assert await asyncio.wait_for(anext(stream), 30.0) is END


async def test_waiting_readers_of_the_memory_hub_hold_no_connection(store: JournalStore) -> None:
    hub = MemoryJournalHub(store, HubConfig(batch_max=64))
    hub.start()
    try:
        await readers_waiting(hub, store, runs=3 * POOL)
    finally:
        await hub.stop()


async def test_more_live_readers_than_a_redis_pool_wait_and_never_poll_sql(
    store: JournalStore,
) -> None:
    prefix = f"test-waiting-{uuid.uuid4().hex}"
    # A short block: a reader past the pool waits at most about that long for a turn.
    # The replica's heartbeat is an SQL write of its own, not a reader's: it beats
    # once as the hub starts, and not again while the readers are counted.
    redis = RedisConfig(
        SHARED_REDIS, prefix=prefix, retry_seconds=2, block_seconds=1.0,
        heartbeat_seconds=600, dead_seconds=1200,
    )  # fmt: skip
    hub = RedisJournalHub(store, HubConfig(batch_max=64), redis)
    hub.start()
    fallbacks, errors = STATS.redis_fallbacks, STATS.redis_errors
    try:
        await readers_waiting(hub, store, runs=REDIS_READERS)
        assert (STATS.redis_fallbacks, STATS.redis_errors) == (fallbacks, errors)
    finally:
        with contextlib.suppress(Exception):
            await hub.stop()
        drop_redis_keys(SHARED_REDIS, prefix)
