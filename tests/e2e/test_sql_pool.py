"""A pooled Postgres connection is pinged before use only after it sat idle
(`db_ping_idle_seconds`), and a dead one found so is replaced unseen; on the real
server, its connections killed by `pg_terminate_backend`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.stacks import fresh_postgres_database
from waybill.common.sql import create_engine


@pytest.fixture
async def database_url() -> AsyncIterator[str]:
    with fresh_postgres_database() as url:
        yield url


async def backend_pid(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one())


async def terminate(engine: AsyncEngine, pid: int) -> None:
    """Kill one backend from a connection of another engine, and wait until it is gone."""
    async with engine.connect() as conn:
        await conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        for _ in range(100):
            # A transaction reads pg_stat_activity once and keeps that snapshot: cleared,
            # each look is a new one (without it, a first look too early saw it forever).
            await conn.execute(text("SELECT pg_stat_clear_snapshot()"))
            alive = "SELECT count(*) FROM pg_stat_activity WHERE pid = :pid"
            if not (await conn.execute(text(alive), {"pid": pid})).scalar_one():
                return
            await asyncio.sleep(0.02)
    raise AssertionError(f"backend {pid} still alive")


async def test_an_idle_connection_killed_under_the_pool_is_replaced(database_url: str) -> None:
    engine = create_engine(database_url, pool_size=1, max_overflow=0, ping_idle_seconds=0.2)
    killer = create_engine(database_url, pool_size=1, max_overflow=0)
    try:
        first = await backend_pid(engine)
        await terminate(killer, first)
        await asyncio.sleep(0.3)  # idle past the threshold: pinged at the next checkout
        second = await backend_pid(engine)
        assert second != first
    finally:
        await engine.dispose()
        await killer.dispose()


async def test_a_connection_in_steady_use_is_not_pinged(database_url: str) -> None:
    """Within the threshold nothing is pinged: the dead connection's statement fails
    (the caller hears it), and the pool then replaces it."""
    engine = create_engine(database_url, pool_size=1, max_overflow=0, ping_idle_seconds=60)
    killer = create_engine(database_url, pool_size=1, max_overflow=0)
    try:
        first = await backend_pid(engine)
        await terminate(killer, first)
        with pytest.raises(DBAPIError) as failure:
            await backend_pid(engine)
        assert failure.value.connection_invalidated
        assert await backend_pid(engine) != first
    finally:
        await engine.dispose()
        await killer.dispose()
