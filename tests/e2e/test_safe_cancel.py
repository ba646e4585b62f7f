"""Cancel reaches a safe boundary: a tool executing when the cancel comes gets the
grace (`WAYBILL_CANCEL_GRACE_SECONDS`) to finish and record its result, no model or
tool call starts after it, a tool outlasting the grace is cut; the stream ends as
LangGraph Platform ends a cancelled run's (no error event), reads say `interrupted`
at once, and the journal says what was cut. SQLite and Postgres."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client

from tests.e2e.test_tool_calls import CallRows, until
from tests.support.helpers import parse_sse, poll_until_done, slow
from tests.support.stacks import stack_in_mode
from waybill.common.launch import Stack
from waybill.services.runner.run.conversation import CANCELLED_TOOL_REPLY

GRACE_SECONDS = 4.0


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def cancel_stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Stack, CallRows]]:
    data_dir = tmp_path_factory.mktemp(f"cancel-{request.param}")
    grace = {"WAYBILL_CANCEL_GRACE_SECONDS": str(GRACE_SECONDS)}
    with stack_in_mode(request.param, data_dir, **grace) as stack:
        yield stack, CallRows(data_dir, stack.env.get("WAYBILL_DATABASE_URL"))


async def cancel_mid_tool(stack: Stack, rows: CallRows, seconds: float) -> dict[str, Any]:
    """A lead_agent run whose `wait` tool is executing when it is cancelled (wait=false);
    returns the run's end: its state's messages, its stream and its cancel record."""
    client = get_client(url=stack.url, timeout=30)
    thread_id = (await client.threads.create())["thread_id"]
    run = await client.runs.create(thread_id, "lead_agent", input=slow(seconds))
    run_id, path = run["run_id"], f"/threads/{thread_id}/runs/{run['run_id']}"
    await until(lambda: rows.of(run_id) == {"wait": "started"}, "the tool executing")
    async with httpx.AsyncClient(base_url=stack.url, timeout=30) as http:
        assert (await http.post(f"{path}/cancel")).status_code == 202
        # Accepted: a read right after it does not contradict it, grace or not.
        assert (await http.get(path)).json()["status"] == "interrupted"
        ended = await poll_until_done(client, thread_id, run_id)
        stream = parse_sse((await http.get(f"{path}/stream", headers={"Last-Event-ID": "-1"})).text)
        records = (await http.get(f"{path}/events", params={"type": "cancel"})).json()
    state = await client.threads.get_state(thread_id)
    await client.aclose()
    return {
        "status": ended["status"],
        "messages": state["values"]["messages"],
        "stream": [frame["event"] for frame in stream],
        "cancel": [record["data"] for record in records],
    }


async def test_a_tool_within_the_grace_finishes_and_nothing_starts_after_it(
    cancel_stack: tuple[Stack, CallRows],
) -> None:
    stack, rows = cancel_stack
    end = await cancel_mid_tool(stack, rows, seconds=2)
    assert end["status"] == "interrupted"
    kinds = [(m["type"], m["content"]) for m in end["messages"]]
    # The tool's own answer, not the cancel's; and no model call after it.
    assert kinds[1:] == [("ai", ""), ("tool", "waited 2 s")]
    assert "error" not in end["stream"]  # as LangGraph Platform: the stream just ends
    [record] = end["cancel"]
    assert record["action"] == "interrupt"
    assert record["finished_in_grace"] == ["wait"]
    assert record["cut"]["tools"] == []


async def test_a_tool_outlasting_the_grace_is_cut(cancel_stack: tuple[Stack, CallRows]) -> None:
    stack, rows = cancel_stack
    started = asyncio.get_running_loop().time()
    end = await cancel_mid_tool(stack, rows, seconds=30)
    assert asyncio.get_running_loop().time() - started < 15  # the grace, not the tool
    assert end["status"] == "interrupted"
    tool_answer = end["messages"][2]
    assert (tool_answer["type"], tool_answer["content"]) == ("tool", CANCELLED_TOOL_REPLY)
    assert len(end["messages"]) == 3
    assert "error" not in end["stream"]
    [record] = end["cancel"]
    assert record["cut"]["tools"] == ["wait"] and record["finished_in_grace"] == []
