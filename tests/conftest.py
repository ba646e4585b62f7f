"""Fixtures: a real stack per storage mode, and clients that talk to it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient

from tests.support.launched import hear_ctrl_c
from tests.support.stacks import stack_in_mode
from waybill.common.launch import Stack

MODES = ["sqlite", "postgres"]

# The longest files start first among files of as many tests: xdist's `--dist
# loadfile` starts the files with the most tests first (its loadscope reorder). Turning
# that reorder off put the heaviest one-test files side by side at the start, which
# made the whole suite slower.
LONGEST_FIRST = (
    "test_distribution.py",
    "test_openapi_fuzz_coverage.py",
    "test_escape_sandbox.py",
    "test_escape_workspace.py",
    "test_many_stacks.py",
    "test_tool_calls.py",
    "test_journal_replicas.py",
    "test_graceful_shutdown.py",
)


def pytest_configure(config: pytest.Config) -> None:
    hear_ctrl_c()  # before any test starts a process (tests/support/launched.py)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        name = item.path.name
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: each file's own order is kept


@pytest.fixture(scope="session")
def sqlite_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The embedded stack (SQLite, in-memory fan-out), started once per test process."""
    with stack_in_mode("sqlite", tmp_path_factory.mktemp("stack-sqlite")) as s:
        yield s


@pytest.fixture(scope="session")
def postgres_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The scaled stack (Postgres, and Redis for the journal's fan-out), started once
    per test process."""
    with stack_in_mode("postgres", tmp_path_factory.mktemp("stack-postgres")) as s:
        yield s


@pytest.fixture(params=MODES)
def stack(request: pytest.FixtureRequest) -> Stack:
    """The five services as real processes, in each storage mode. Both stacks live for
    the whole session: one parametrized session fixture would be torn down and started
    again whenever a worker's next file switches mode (two stacks per file)."""
    chosen: Stack = request.getfixturevalue(f"{request.param}_stack")
    return chosen


@pytest.fixture
def client_timeout() -> float:
    """The SDK client's timeout in seconds; a module whose runs take longer (sandboxed
    commands, subagents) overrides this fixture rather than `client`."""
    return 30


@pytest.fixture
async def client(stack: Stack, client_timeout: float) -> AsyncIterator[LangGraphClient]:
    sdk = get_client(url=stack.url, timeout=client_timeout)
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
