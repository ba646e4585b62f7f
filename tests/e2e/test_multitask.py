"""Double-texting: a second run on a busy thread, by each multitask strategy."""

from __future__ import annotations

import httpx
from langgraph_sdk.client import LangGraphClient

from tests.support.helpers import poll_until_done, says, start_slow_tool
from waybill.services.runner.run.conversation import CANCELLED_TOOL_REPLY


async def test_interrupt_stops_the_active_run_then_starts(client: LangGraphClient) -> None:
    thread = (await client.threads.create())["thread_id"]
    first = await start_slow_tool(client, thread)
    second = await client.runs.create(
        thread, "lead_agent", input=says("actually, this"), multitask_strategy="interrupt"
    )
    assert (await poll_until_done(client, thread, second["run_id"]))["status"] == "success"
    assert (await client.runs.get(thread, first["run_id"]))["status"] == "interrupted"

    state = await client.threads.get_state(thread)
    contents = [m["content"] for m in state["values"]["messages"]]
    # The first run finished finalizing (its tool call answered) before the second began.
    assert contents[2:] == [CANCELLED_TOOL_REPLY, "actually, this", "You said: actually, this"]


async def test_rollback_discards_the_active_run(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    thread = (await client.threads.create())["thread_id"]
    await client.runs.wait(thread, "lead_agent", input=says("keep"))
    first = await start_slow_tool(client, thread)
    second = await client.runs.create(
        thread, "lead_agent", input=says("instead"), multitask_strategy="rollback"
    )
    assert (await poll_until_done(client, thread, second["run_id"]))["status"] == "success"
    gone = await http.get(f"/threads/{thread}/runs/{first['run_id']}")
    assert gone.status_code == 404

    state = await client.threads.get_state(thread)
    contents = [m["content"] for m in state["values"]["messages"]]
    assert contents == ["keep", "You said: keep", "instead", "You said: instead"]
    assert [r["run_id"] for r in await client.runs.list(thread)][0] == second["run_id"]


async def test_enqueue_is_the_default_and_keeps_arrival_order(client: LangGraphClient) -> None:
    thread = (await client.threads.create())["thread_id"]
    first = await client.runs.create(
        thread, "lead_agent", input=says('/tool wait {"seconds": 0.3}')
    )
    queued = [await client.runs.create(thread, "lead_agent", input=says(f"q{i}")) for i in range(2)]
    assert queued[0]["multitask_strategy"] == "enqueue"
    for run in [first, *queued]:
        assert (await poll_until_done(client, thread, run["run_id"]))["status"] == "success"
    contents = [
        m["content"] for m in (await client.threads.get_state(thread))["values"]["messages"]
    ]
    assert contents[-4:] == ["q0", "You said: q0", "q1", "You said: q1"]
