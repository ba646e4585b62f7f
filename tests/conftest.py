"""Fixtures: a real stack per storage mode, and clients that talk to it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient

from common.launch import Stack
from tests.stacks import (
    SHARED_REDIS,
    drop_redis_keys,
    fresh_postgres_database,
    running_stack,
    stack_env,
)

MODES = ["sqlite", "postgres"]


@pytest.fixture(scope="session", params=MODES)
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """The five services as real processes: embedded (SQLite, in-memory fan-out),
    or scaled (Postgres, and Redis for the journal's fan-out)."""
    data_dir = tmp_path_factory.mktemp(f"stack-{request.param}")
    if request.param == "postgres":
        redis = {
            "WAYBILL_REDIS_URL": SHARED_REDIS,
            "WAYBILL_JOURNAL_REDIS_PREFIX": f"test-{uuid.uuid4().hex[:12]}",
        }
        with (
            fresh_postgres_database() as url,
            running_stack(stack_env(data_dir, url, **redis), data_dir) as s,
        ):
            yield s
        drop_redis_keys(SHARED_REDIS, redis["WAYBILL_JOURNAL_REDIS_PREFIX"])
    else:
        with running_stack(stack_env(data_dir), data_dir) as s:
            yield s


@pytest.fixture
async def client(stack: Stack) -> AsyncIterator[LangGraphClient]:
    sdk = get_client(url=stack.url, timeout=30)
    try:
        yield sdk
    finally:
        await sdk.aclose()


@pytest.fixture
async def http(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=stack.url, timeout=30) as raw:
        yield raw


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent
