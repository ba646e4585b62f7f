"""A journal or delivery away for longer than a call's deadline loses no run:
the calls at a run's end are made patiently (services/runner/run/outages.py), and a
peer back within `WAYBILL_DEPENDENCY_OUTAGE_SECONDS` finds the run waiting."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient

from tests.support.helpers import parse_sse, poll_until_done, wait_for_status
from tests.support.paths import FIXTURES
from tests.support.stacks import (
    runner_stats,
    running_stack,
    stack_env,
    two_runner_stack,
    wait_until,
)
from waybill.common.launch import Stack, grpc_serving

pytestmark = pytest.mark.timeout(120)

CARELESS_GRAPHS = FIXTURES / "reliability_graphs" / "langgraph.json"
RPC_SECONDS = 1.5
OUTAGE_SECONDS = 3 * RPC_SECONDS  # longer than a call's deadline
TICKS = 30


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    env = stack_env(
        tmp_path,
        WAYBILL_GRAPHS=str(CARELESS_GRAPHS),
        WAYBILL_RPC_TIMEOUT_SECONDS=str(RPC_SECONDS),
        WAYBILL_DEPENDENCY_OUTAGE_SECONDS="30",
    )
    with running_stack(env, tmp_path) as running:
        yield running


async def ticks_on_its_stream(stack: Stack, thread_id: str, run_id: str) -> list[int]:
    async with httpx.AsyncClient(base_url=stack.url, timeout=30) as raw:
        replay = await raw.get(  # everything after its metadata (event 0)
            f"/threads/{thread_id}/runs/{run_id}/stream", headers={"Last-Event-ID": "0"}
        )
    frames = parse_sse(replay.text)
    assert not [f for f in frames if f["event"] == "error"], frames
    return [json.loads(f["data"])["tick"] for f in frames if f["event"] == "custom"]


async def a_steady_run(client: LangGraphClient) -> tuple[dict[str, Any], dict[str, Any]]:
    """(thread, run) of a run ticking for about 1.5 s, once it is running."""
    thread: dict[str, Any] = dict(await client.threads.create())
    run: dict[str, Any] = dict(
        await client.runs.create(
            thread["thread_id"],
            "steady",
            input={"ticks": TICKS, "interval": 0.05},
            stream_mode=["custom"],
        )
    )
    await wait_for_status(client, thread["thread_id"], run["run_id"], "running")
    return thread, run


async def test_a_paused_journal_costs_a_run_nothing(stack: Stack) -> None:
    client = get_client(url=stack.url)
    thread, run = await a_steady_run(client)
    journal = stack.processes["journal"]
    journal.send_signal(signal.SIGSTOP)  # its connections stay: every call just waits
    try:
        await asyncio.sleep(OUTAGE_SECONDS)  # the run reaches its end meanwhile
    finally:
        journal.send_signal(signal.SIGCONT)

    ended = await poll_until_done(client, thread["thread_id"], run["run_id"])
    assert ended["status"] == "success", ended
    assert await ticks_on_its_stream(stack, thread["thread_id"], run["run_id"]) == list(
        range(TICKS)
    )
    assert runner_stats(stack.address_of("runner"))["dependency_retries"] >= 1
    await client.aclose()


async def test_a_delivery_restart_costs_a_run_nothing(stack: Stack) -> None:
    client = get_client(url=stack.url)
    thread, run = await a_steady_run(client)
    delivery = stack.processes["delivery"]
    delivery.send_signal(signal.SIGKILL)
    delivery.wait()
    await asyncio.sleep(OUTAGE_SECONDS)  # the receipt waits for it meanwhile
    stack.start_one("delivery")
    address = stack.address_of("delivery")
    wait_until(lambda: grpc_serving(address), "delivery serving again")

    ended = await poll_until_done(client, thread["thread_id"], run["run_id"])
    assert ended["status"] == "success", ended
    assert await ticks_on_its_stream(stack, thread["thread_id"], run["run_id"]) == list(
        range(TICKS)
    )
    receipt = await client.http.get(f"/threads/{thread['thread_id']}/runs/{run['run_id']}/receipt")
    assert receipt["outcome"] == "success"
    assert runner_stats(stack.address_of("runner"))["dependency_retries"] >= 1
    await client.aclose()


async def test_graph_state_reads_go_on_while_a_runner_is_killed(tmp_path: Path) -> None:
    """The gateway reads graph state from any runner: one SIGKILLed is passed over."""
    with two_runner_stack(tmp_path, WAYBILL_GRAPHS=str(CARELESS_GRAPHS)) as runners:
        stack = runners.stack
        client = get_client(url=stack.url)
        thread = await client.threads.create()
        await client.runs.wait(thread["thread_id"], "steady", input={"ticks": 1})
        async with httpx.AsyncClient(base_url=stack.url, timeout=30) as raw:
            path = f"/threads/{thread['thread_id']}/state"
            assert (await raw.get(path)).status_code == 200
            stack.processes["runner"].send_signal(signal.SIGKILL)
            answers = []
            for _ in range(60):  # 3 s of reads, from the moment it died
                answers.append((await raw.get(path)).status_code)
                await asyncio.sleep(0.05)
        assert set(answers) == {200}, answers
        await client.aclose()
