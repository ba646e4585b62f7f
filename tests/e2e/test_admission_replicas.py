"""Two admission replicas on one Postgres: a run or a cancel committed through one
reaches the runner connected to the other at once (LISTEN/NOTIFY, no polling)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from langgraph_sdk import get_client

from tests.support.helpers import says, start_slow_tool, wait_for_status
from tests.support.stacks import (
    fresh_postgres_database,
    running_stack,
    stack_env,
    start_second,
    start_second_gateway,
)
from waybill.common.launch import Stack

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def second_gateway_url(tmp_path: Path) -> Iterator[tuple[Stack, str]]:
    """The runner holds its work stream to admission 1; gateway 2 talks to admission 2."""
    with (
        fresh_postgres_database() as url,
        running_stack(stack_env(tmp_path, url), tmp_path) as stack,
    ):
        admission_2 = start_second(stack, "admission")
        yield stack, start_second_gateway(stack, WAYBILL_ADMISSION_ADDR=admission_2)


async def test_a_run_admitted_by_another_replica_starts(
    second_gateway_url: tuple[Stack, str],
) -> None:
    _, url_2 = second_gateway_url
    client = get_client(url=url_2)
    thread = await client.threads.create()
    result = await client.runs.wait(thread["thread_id"], "lead_agent", input=says("across"))
    assert result["messages"][-1]["content"] == "You said: across"
    await client.aclose()


async def test_a_cancel_through_another_replica_reaches_the_runner(
    second_gateway_url: tuple[Stack, str],
) -> None:
    stack, url_2 = second_gateway_url
    first, second = get_client(url=stack.url), get_client(url=url_2)
    thread = await first.threads.create()
    run = await start_slow_tool(first, thread["thread_id"], seconds=60)
    await second.runs.cancel(thread["thread_id"], run["run_id"])
    ended = await wait_for_status(first, thread["thread_id"], run["run_id"], "interrupted")
    assert ended["status"] == "interrupted"
    await first.aclose()
    await second.aclose()


async def test_reject_admits_exactly_one_of_fifty_racing_through_two_replicas(
    second_gateway_url: tuple[Stack, str],
) -> None:
    """The database, not a process-local lock, decides: each replica has its own."""
    stack, url_2 = second_gateway_url
    body = {
        "assistant_id": "lead_agent",
        "input": says('/tool wait {"seconds": 30}'),
        "multitask_strategy": "reject",
    }
    async with (
        httpx.AsyncClient(base_url=stack.url, timeout=30) as one,
        httpx.AsyncClient(base_url=url_2, timeout=30) as two,
    ):
        thread_id = (await one.post("/threads", json={})).json()["thread_id"]
        path = f"/threads/{thread_id}/runs"
        replies = await asyncio.gather(
            *(client.post(path, json=body) for _ in range(25) for client in (one, two))
        )
        codes = sorted(reply.status_code for reply in replies)
        assert codes == [200] + [409] * 49, codes
        assert all(
            "already has an active run" in r.json()["detail"]
            for r in replies[1:]
            if r.status_code == 409
        )
        runs = (await one.get(path, params={"limit": 100})).json()
        assert len(runs) == 1
        await one.post(f"{path}/{runs[0]['run_id']}/cancel", params={"wait": "true"})
