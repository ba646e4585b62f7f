"""A draining runner hands back what it cannot finish; a run that takes too long
ends `timeout`. Embedded mode (SQLite), real processes."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import httpx
import pytest
from langgraph_sdk import get_client

from tests.support.helpers import parse_sse, poll_until_done, says, stream_until_tool_call
from tests.support.stacks import running_stack, stack_env, two_runner_stack

pytestmark = pytest.mark.timeout(120)


async def test_sigterm_hands_back_a_run_that_outlives_the_grace(tmp_path: Path) -> None:
    with two_runner_stack(tmp_path, WAYBILL_SHUTDOWN_GRACE_SECONDS="0.5") as two:
        client = get_client(url=two.stack.url)
        thread = await client.threads.create()
        async with httpx.AsyncClient(base_url=two.stack.url, timeout=60) as raw:
            run_id, _ = await stream_until_tool_call(raw, thread["thread_id"])
            leaving = two.executing()
            staying = two.other_than(leaving)
            two.stack.processes[leaving].send_signal(signal.SIGTERM)
            assert await asyncio.to_thread(two.stack.processes[leaving].wait, 30) == 0

            run = await poll_until_done(client, thread["thread_id"], run_id)
            assert run["status"] == "success"
            assert two.stats(staying)["runs_taken_over"] == 1
            log = parse_sse(
                (
                    await raw.get(
                        f"/threads/{thread['thread_id']}/runs/{run_id}/stream",
                        headers={"Last-Event-ID": "-1"},
                    )
                ).text
            )
        attempts = [json.loads(f["data"])["attempt"] for f in log if f["event"] == "metadata"]
        assert attempts == [1, 2]
        await client.aclose()


async def test_a_run_past_its_time_limit_ends_timeout(tmp_path: Path) -> None:
    env = stack_env(tmp_path, WAYBILL_RUN_TIMEOUT_SECONDS="1")
    with running_stack(env, tmp_path) as stack:
        client = get_client(url=stack.url)
        thread = await client.threads.create()
        parts = [
            p
            async for p in client.runs.stream(
                thread["thread_id"], "lead_agent", input=says('/tool wait {"seconds": 20}')
            )
        ]
        assert parts[-1].event == "error"
        assert parts[-1].data["error"] == "TimeoutError"
        [run] = await client.runs.list(thread["thread_id"])
        assert run["status"] == "timeout"
        after = await client.runs.wait(thread["thread_id"], "lead_agent", input=says("ok?"))
        assert after["messages"][-1]["content"] == "You said: ok?"
        await client.aclose()


async def test_a_run_that_keeps_losing_its_runner_gives_up(tmp_path: Path) -> None:
    with two_runner_stack(tmp_path, WAYBILL_MAX_ATTEMPTS="1") as two:
        client = get_client(url=two.stack.url)
        thread = await client.threads.create()
        async with httpx.AsyncClient(base_url=two.stack.url, timeout=60) as raw:
            run_id, before = await stream_until_tool_call(raw, thread["thread_id"])
            two.stack.processes[two.executing()].send_signal(signal.SIGKILL)
            rest = parse_sse(
                (
                    await raw.get(
                        f"/threads/{thread['thread_id']}/runs/{run_id}/stream",
                        headers={"Last-Event-ID": before[-1]["id"]},
                    )
                ).text
            )
        assert rest[-1]["event"] == "error"
        assert json.loads(rest[-1]["data"])["error"] == "RunAttemptsExhausted"
        run = await client.runs.get(thread["thread_id"], run_id)
        assert run["status"] == "error"
        assert (await client.threads.get(thread["thread_id"]))["status"] == "error"
        await client.aclose()
