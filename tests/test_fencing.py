"""Checkpoint writes are fenced by epoch, against real SQLite and Postgres databases."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from common.settings import Settings
from common.sql import create_engine
from services.runner.fencing import FencedCheckpointer, RunFence, StaleEpochError
from services.runner.persistence import open_checkpointer
from services.runner.stats import STATS
from services.runner.store import RunnerStore
from tests.stacks import fresh_postgres_database


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
    await store.migrate()
    async with open_checkpointer(settings) as saver:
        yield saver, store
    await store.engine.dispose()


def write_args(thread_id: str, run_id: str) -> tuple[Any, ...]:
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    return config, empty_checkpoint(), {"run_id": run_id, "source": "loop", "step": 0}, {}


async def test_the_current_epoch_writes(backend: tuple[Any, RunnerStore]) -> None:
    saver, store = backend
    run_id, thread_id = str(uuid.uuid4()), str(uuid.uuid4())
    await store.advance_fence(run_id, 1)
    fenced = FencedCheckpointer(saver, RunFence(run_id, 1, lease_seconds=30), store)
    await fenced.aput(*write_args(thread_id, run_id))
    assert await saver.aget_tuple({"configurable": {"thread_id": thread_id}}) is not None


async def test_a_superseded_epoch_is_refused(backend: tuple[Any, RunnerStore]) -> None:
    saver, store = backend
    run_id, thread_id = str(uuid.uuid4()), str(uuid.uuid4())
    await store.advance_fence(run_id, 1)
    old = FencedCheckpointer(saver, RunFence(run_id, 1, lease_seconds=30), store)
    await store.advance_fence(run_id, 2)  # another runner took the run over
    await store.advance_fence(run_id, 1)  # and an older epoch cannot take it back
    assert await store.fence_epoch(run_id) == 2

    refused_before = STATS.stale_checkpoint_writes_refused
    with pytest.raises(StaleEpochError, match="fenced off by 2"):
        await old.aput(*write_args(thread_id, run_id))
    with pytest.raises(StaleEpochError):
        await old.aput_writes(
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
