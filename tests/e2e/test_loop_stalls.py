"""A graph that blocks the runner's event loop (a sync `time.sleep` inside an
async node) for several lease periods costs no other run its lease: the leases
are renewed from a thread of their own (services/runner/run/lease_keeper.py), new
runs are admitted meanwhile, and the runner's stats count the stall."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from langgraph_sdk import get_client

from tests.support.helpers import poll_until_done
from tests.support.paths import FIXTURES
from tests.support.stacks import runner_stats, running_stack, stack_env
from waybill.common.launch import Stack

pytestmark = pytest.mark.timeout(90)

CARELESS_GRAPHS = FIXTURES / "reliability_graphs" / "langgraph.json"
LEASE_SECONDS = 1.5
BLOCK_SECONDS = 3.3 * LEASE_SECONDS  # past the max_attempts (3) takeovers it took on main


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    env = stack_env(
        tmp_path,
        WAYBILL_GRAPHS=str(CARELESS_GRAPHS),
        WAYBILL_LEASE_SECONDS=str(LEASE_SECONDS),
    )
    with running_stack(env, tmp_path) as running:
        yield running


async def test_a_run_blocking_the_loop_costs_its_neighbour_nothing(stack: Stack) -> None:
    client = get_client(url=stack.url)
    neighbour_thread = await client.threads.create()
    # The neighbour awaits for longer than the block lasts, so it is running throughout.
    neighbour = await client.runs.create(
        neighbour_thread["thread_id"], "steady", input={"ticks": 80, "interval": 0.1}
    )
    blocking_thread = await client.threads.create()
    blocking = await client.runs.create(
        blocking_thread["thread_id"], "blocker", input={"block_seconds": BLOCK_SECONDS}
    )
    await asyncio.sleep(LEASE_SECONDS)  # the loop is blocked now, for 3 lease periods

    # A run admitted while the loop is blocked is admitted (not a 503) and runs.
    later_thread = await client.threads.create()
    later = await client.runs.create(
        later_thread["thread_id"], "steady", input={"ticks": 2, "interval": 0.05}
    )

    ended = await poll_until_done(client, neighbour_thread["thread_id"], neighbour["run_id"])
    assert ended["status"] == "success", ended
    ended_later = await poll_until_done(client, later_thread["thread_id"], later["run_id"])
    assert ended_later["status"] == "success", ended_later
    ended_blocking = await poll_until_done(client, blocking_thread["thread_id"], blocking["run_id"])
    assert ended_blocking["status"] == "success", ended_blocking  # it merely took long

    stats = runner_stats(stack.address_of("runner"))
    assert stats["runs_taken_over"] == 0  # no lease was lost: no run started again
    assert stats["loop_stalls"] >= 1
    assert stats["loop_stall_longest_ms"] >= 0.8 * BLOCK_SECONDS * 1000
    await client.aclose()
