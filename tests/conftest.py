"""Fixtures: a real stack per storage mode, and clients that talk to it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient

from tests.stacks import stack_in_mode
from waybill.common.launch import Stack

MODES = ["sqlite", "postgres"]


@pytest.fixture(scope="session", params=MODES)
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """The five services as real processes: embedded (SQLite, in-memory fan-out),
    or scaled (Postgres, and Redis for the journal's fan-out)."""
    with stack_in_mode(request.param, tmp_path_factory.mktemp(f"stack-{request.param}")) as s:
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
