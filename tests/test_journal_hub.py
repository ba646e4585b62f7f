"""The journal hub against a real SQLite store: numbering, replay, and a load
that survives the caller that started it going away."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from common.sql import create_engine
from services.journal.hub import END, JournalHub
from services.journal.store import JournalStore


@pytest.fixture
async def hub(tmp_path: Path) -> AsyncIterator[JournalHub]:
    store = JournalStore(create_engine(f"sqlite+aiosqlite:///{tmp_path / 'journal.db'}"))
    await store.migrate()
    running = JournalHub(store, batch_max=64, evict_after=0.05)
    running.start()
    yield running
    await running.stop()
    await store.engine.dispose()


async def test_a_cancelled_opener_does_not_strand_the_others(hub: JournalHub) -> None:
    run_id = str(uuid.uuid4())
    first = asyncio.create_task(hub.open(run_id))
    await asyncio.sleep(0)  # the load has started on behalf of `first`
    second = asyncio.create_task(hub.append(run_id, 1, [("metadata", b"{}")]))
    first.cancel()
    assert await asyncio.wait_for(second, timeout=5) == 0


async def test_events_are_numbered_and_replayed_after_eviction(hub: JournalHub) -> None:
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


async def test_a_stale_epoch_cannot_append(hub: JournalHub) -> None:
    run_id = str(uuid.uuid4())
    await hub.append(run_id, 2, [("metadata", b"{}")])
    with pytest.raises(Exception, match="stale"):
        await hub.append(run_id, 1, [("values", b"late")])
