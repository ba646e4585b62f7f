"""Durable execution with real processes on Postgres: a runner dies or stalls
mid-run, another takes the run over from its checkpoint, and the one that lost
it writes nothing more."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from langgraph_sdk import get_client

from tests.support.helpers import parse_sse, stream_until_tool_call
from tests.support.stacks import (
    TwoRunners,
    fresh_postgres_database,
    metrics_url,
    scrape,
    two_runner_stack,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def two_runners(tmp_path: Path) -> Iterator[TwoRunners]:
    """Every service on Postgres with short leases, and a second runner."""
    with fresh_postgres_database() as url, two_runner_stack(tmp_path, url) as running:
        yield running


async def test_kill_9_mid_run_is_taken_over_and_every_event_arrives_once(
    two_runners: TwoRunners,
) -> None:
    stack = two_runners.stack
    client = get_client(url=stack.url)
    thread = await client.threads.create()
    async with httpx.AsyncClient(base_url=stack.url, timeout=60) as raw:
        run_id, before = await stream_until_tool_call(raw, thread["thread_id"])
        victim = two_runners.executing()
        stack.processes[victim].send_signal(signal.SIGKILL)

        last_id = before[-1]["id"]
        rejoin = await raw.get(
            f"/threads/{thread['thread_id']}/runs/{run_id}/stream",
            headers={"Last-Event-ID": last_id},
        )
        after = parse_sse(rejoin.text)

    everything = before + after
    assert [int(f["id"]) for f in everything] == list(range(len(everything)))
    metadata = [json.loads(f["data"]) for f in everything if f["event"] == "metadata"]
    assert [m["attempt"] for m in metadata] == [1, 2]

    run = await client.runs.get(thread["thread_id"], run_id)
    assert run["status"] == "success"
    state = await client.threads.get_state(thread["thread_id"])
    kinds = [(m["type"], m["content"]) for m in state["values"]["messages"]]
    assert kinds[2:] == [("tool", "waited 2 s"), ("ai", "Tool wait returned: waited 2 s")]
    assert two_runners.stats(two_runners.other_than(victim))["runs_taken_over"] == 1
    await client.aclose()


async def test_a_stalled_runner_writes_nothing_after_takeover(two_runners: TwoRunners) -> None:
    stack = two_runners.stack
    client = get_client(url=stack.url)
    thread = await client.threads.create()
    async with httpx.AsyncClient(base_url=stack.url, timeout=60) as raw:
        run_id, _ = await stream_until_tool_call(raw, thread["thread_id"])
    stalled = two_runners.executing()
    survivor = two_runners.other_than(stalled)
    stack.processes[stalled].send_signal(signal.SIGSTOP)
    try:
        for _ in range(200):  # until the survivor has taken the run over
            if two_runners.stats(survivor)["runs_taken_over"] == 1:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("no takeover")
    finally:
        stack.processes[stalled].send_signal(signal.SIGCONT)

    for _ in range(200):
        if (await client.runs.get(thread["thread_id"], run_id))["status"] == "success":
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(2.5)  # the stalled runner's tool wakes up and tries to carry on

    stats = two_runners.stats(stalled)
    assert stats["runs_fenced"] == 1
    admission = scrape(metrics_url(stack, "admission"))
    assert admission["waybill_lease_takeovers_total"] == 1
    assert admission['waybill_runs_finished_total{status="success"}'] == 1
    assert stats["runs_started"] == 1
    state = await client.threads.get_state(thread["thread_id"])
    tool_answers = [m for m in state["values"]["messages"] if m["type"] == "tool"]
    assert len(tool_answers) == 1
    assert (await client.runs.get(thread["thread_id"], run_id))["status"] == "success"
    await client.aclose()
