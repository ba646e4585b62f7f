"""Checkpoint writes are fenced by epoch, against real SQLite and Postgres databases."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from sqlalchemy import text

from tests.support.stacks import fresh_postgres_database
from waybill.common.settings import Settings
from waybill.common.sql import create_engine
from waybill.services.runner.persistence.backends import open_checkpointer
from waybill.services.runner.persistence.fencing import (
    FencedCheckpointer,
    RunFence,
    StaleEpochError,
)
from waybill.services.runner.persistence.runner_store import RunnerStore
from waybill.services.runner.stats import STATS


@pytest.fixture(params=["sqlite", "postgres"])
async def backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[Any, RunnerStore]]:
    """The runner's real checkpointer and store, on SQLite or on a fresh Postgres database."""
    if request.param == "postgres":
        with fresh_postgres_database() as url:
            async for pair in _open(Settings(data_dir=tmp_path, database_url=url)):
                yield pair
    else:
        async for pair in _open(Settings(data_dir=tmp_path)):
            yield pair


async def _open(settings: Settings) -> AsyncIterator[tuple[Any, RunnerStore]]:
    store = RunnerStore(create_engine(settings.checkpoint_sqlalchemy_url()))
    async with open_checkpointer(settings) as saver:
        await store.migrate()
        yield saver, store
    await store.engine.dispose()


async def fence_epoch(store: RunnerStore, run_id: str) -> int:
    """The epoch the database holds for `run_id`'s fence, read from its table."""
    async with store.engine.connect() as conn:
        query = text("SELECT epoch FROM run_fences WHERE run_id = :run_id")
        return int((await conn.execute(query, {"run_id": run_id})).scalar_one())


async def stored_epoch(saver: Any, thread_id: str) -> int:
    """The run epoch of the thread's latest stored checkpoint (it must have one)."""
    stored = await saver.aget_tuple({"configurable": {"thread_id": thread_id}})
    assert stored is not None, "no checkpoint was stored"
    return int(stored.metadata["run_epoch"])


def write_args(thread_id: str, run_id: str, epoch: int = 1) -> tuple[Any, ...]:
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    metadata = {"run_id": run_id, "run_epoch": epoch, "source": "loop", "step": 0}
    return config, empty_checkpoint(), metadata, {}


async def test_the_current_epoch_writes(backend: tuple[Any, RunnerStore]) -> None:
    saver, store = backend
    run_id, thread_id = str(uuid.uuid4()), str(uuid.uuid4())
    await store.advance_fence(run_id, 1)
    fenced = FencedCheckpointer(saver, RunFence(run_id, 1, lease_seconds=30), store)
    await fenced.aput(*write_args(thread_id, run_id))
    assert await stored_epoch(saver, thread_id) == 1


async def test_a_superseded_epoch_is_refused(backend: tuple[Any, RunnerStore]) -> None:
    saver, store = backend
    run_id, thread_id = str(uuid.uuid4()), str(uuid.uuid4())
    await store.advance_fence(run_id, 1)
    old = FencedCheckpointer(saver, RunFence(run_id, 1, lease_seconds=30), store)
    await store.advance_fence(run_id, 2)  # another runner took the run over
    await store.advance_fence(run_id, 1)  # and an older epoch cannot take it back
    assert await fence_epoch(store, run_id) == 2

    refused_before = STATS.stale_checkpoint_writes_refused
    # A checkpoint is refused by the database's trigger, in the insert itself;
    # pending writes (no epoch on the row) by the fence read in their transaction.
    with pytest.raises(StaleEpochError, match="stale epoch"):
        await old.aput(*write_args(thread_id, run_id))
    assert old.fence.lost  # once refused, that runner writes nothing more at all
    other_old = FencedCheckpointer(saver, RunFence(run_id, 1, lease_seconds=30), store)
    with pytest.raises(StaleEpochError, match="fenced off by 2"):
        await other_old.aput_writes(
            {"configurable": {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": "x"}},
            [("a", 1)],
            "task",
        )
    assert STATS.stale_checkpoint_writes_refused == refused_before + 2
    assert await saver.aget_tuple({"configurable": {"thread_id": thread_id}}) is None


async def test_an_expired_lease_refuses_without_asking_the_database(
    backend: tuple[Any, RunnerStore],
) -> None:
    saver, store = backend
    run_id, thread_id = str(uuid.uuid4()), str(uuid.uuid4())
    await store.advance_fence(run_id, 1)
    fence = RunFence(run_id, 1, lease_seconds=30)
    fence.deadline = 0.0  # as if the process had been paused past its lease
    with pytest.raises(StaleEpochError, match="lost its lease"):
        await FencedCheckpointer(saver, fence, store).aput(*write_args(thread_id, run_id))
    assert await saver.aget_tuple({"configurable": {"thread_id": thread_id}}) is None


async def test_the_database_refuses_a_stale_checkpoint_in_the_insert_itself(
    backend: tuple[Any, RunnerStore],
) -> None:
    """Even a write that slipped past the runner's own checks (the plain saver,
    no FencedCheckpointer) is refused by the fence trigger in its transaction."""
    saver, store = backend
    run_id, thread_id = str(uuid.uuid4()), str(uuid.uuid4())
    await store.advance_fence(run_id, 2)
    with pytest.raises(Exception, match="stale epoch"):
        await saver.aput(*write_args(thread_id, run_id, epoch=1))
    assert await saver.aget_tuple({"configurable": {"thread_id": thread_id}}) is None
    await saver.aput(*write_args(thread_id, run_id, epoch=2))
    assert await stored_epoch(saver, thread_id) == 2


async def test_checkpoints_without_a_run_epoch_are_not_fenced(
    backend: tuple[Any, RunnerStore],
) -> None:
    saver, _store = backend
    thread_id = str(uuid.uuid4())
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    await saver.aput(config, empty_checkpoint(), {"source": "update", "step": 1}, {})
    stored = await saver.aget_tuple({"configurable": {"thread_id": thread_id}})
    assert stored is not None
    assert (stored.metadata["source"], "run_epoch" in stored.metadata) == ("update", False)


async def test_pending_writes_are_stored_only_by_the_epoch_the_fence_names(
    backend: tuple[Any, RunnerStore],
) -> None:
    saver, store = backend
    run_id, thread_id = str(uuid.uuid4()), str(uuid.uuid4())
    await saver.aput(*write_args(thread_id, run_id))  # the checkpoint both epochs resume from
    latest = await saver.aget_tuple({"configurable": {"thread_id": thread_id}})
    config = latest.config
    await store.advance_fence(run_id, 2)
    current = FencedCheckpointer(saver, RunFence(run_id, 2, lease_seconds=30), store)
    stale = FencedCheckpointer(saver, RunFence(run_id, 1, lease_seconds=30), store)
    await current.aput_writes(config, [("messages", "from epoch 2")], "task-a")
    with pytest.raises(StaleEpochError, match="fenced off by 2"):
        await stale.aput_writes(config, [("messages", "from epoch 1")], "task-b")
    stored = await saver.aget_tuple(config)
    assert [(task, value) for task, _channel, value in stored.pending_writes] == [
        ("task-a", "from epoch 2")
    ]


# ---- a rollback racing a save still in flight (Postgres: the insert held by a row lock) --


async def _saves_waiting_on_a_lock(store: RunnerStore) -> int:
    async with store.engine.connect() as conn:
        query = text(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'"
        )
        return int((await conn.execute(query)).scalar_one())


# Postgres only: the insert is held by a row lock, which SQLite does not have.
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("save_cancelled", [False, True])
async def test_a_rollback_waits_for_a_save_in_flight_and_deletes_what_it_wrote(
    backend: tuple[Any, RunnerStore], save_cancelled: bool
) -> None:
    """A save whose insert is still on its way in the database when the rollback
    starts, its task cancelled with the graph or not. The run's fence row is held,
    so that the insert waits inside the fence trigger (which reads that row) while
    the rollback's delete, which never reads it, could go ahead. Nothing of the run
    may be left. Two things hold it, each enough alone (checked by removing them):
    `FencedCheckpointer.close` waits for the save, and LangGraph's Postgres saver
    runs one operation at a time in a process (its own lock); with neither, the
    uncancelled case leaves the checkpoint. A cancelled save's insert is cancelled
    in the server too (psycopg sends the cancel and waits for it)."""
    saver, store = backend
    run_id, thread_id = str(uuid.uuid4()), str(uuid.uuid4())
    await store.advance_fence(run_id, 1)
    fenced = FencedCheckpointer(saver, RunFence(run_id, 1, lease_seconds=30), store)
    async with store.engine.connect() as blocker:
        held = await blocker.begin()
        await blocker.execute(
            text("SELECT epoch FROM run_fences WHERE run_id = :run_id FOR UPDATE"),
            {"run_id": run_id},
        )
        save = asyncio.create_task(fenced.aput(*write_args(thread_id, run_id)))
        for _ in range(200):
            if await _saves_waiting_on_a_lock(store):
                break
            await asyncio.sleep(0.01)
        assert await _saves_waiting_on_a_lock(store), "the save never reached the insert"
        if save_cancelled:
            save.cancel()

        async def roll_back() -> None:
            await fenced.close()
            await saver.adelete_for_runs([run_id])

        rollback = asyncio.create_task(roll_back())
        await asyncio.sleep(0.2)  # the rollback is under way, waiting for the save
        await held.rollback()  # the lock goes: the insert and the rollback proceed
    await asyncio.gather(save, return_exceptions=True)
    await asyncio.wait_for(rollback, 10)
    assert await saver.aget_tuple({"configurable": {"thread_id": thread_id}}) is None
