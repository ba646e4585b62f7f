"""interrupt() pauses a run; a resume command continues it."""

from __future__ import annotations

from langgraph_sdk.client import LangGraphClient


async def test_interrupt_then_resume(client: LangGraphClient) -> None:
    thread = await client.threads.create()
    paused = await client.runs.wait(thread["thread_id"], "approval", input={"action": "deploy"})
    assert paused["__interrupt__"][0]["value"] == {"question": "approve deploy?"}

    runs = await client.runs.list(thread["thread_id"])
    assert runs[0]["status"] == "success"
    record = await client.threads.get(thread["thread_id"])
    assert record["status"] == "interrupted"
    [pending] = record["interrupts"].values()
    assert pending[0]["value"] == {"question": "approve deploy?"}
    state = await client.threads.get_state(thread["thread_id"])
    assert state["next"] == ["ask"]

    done = await client.runs.wait(thread["thread_id"], "approval", command={"resume": "yes"})
    assert done["decision"] == "deploy: yes"
    record = await client.threads.get(thread["thread_id"])
    assert record["status"] == "idle"
    assert record["values"]["decision"] == "deploy: yes"
    assert record["interrupts"] == {}


async def test_interrupt_shows_in_the_updates_stream(client: LangGraphClient) -> None:
    thread = await client.threads.create()
    parts = [
        p
        async for p in client.runs.stream(
            thread["thread_id"], "approval", input={"action": "merge"}, stream_mode="updates"
        )
    ]
    updates = [p.data for p in parts if p.event == "updates"]
    assert "__interrupt__" in updates[-1]


async def test_interrupt_before_a_node_then_continue_with_no_input(client: LangGraphClient) -> None:
    thread = await client.threads.create()
    paused = await client.runs.wait(
        thread["thread_id"],
        "lead_agent",
        input={"messages": [{"role": "user", "content": '/tool add {"a": 3, "b": 4}'}]},
        interrupt_before=["tools"],
    )
    assert [m["type"] for m in paused["messages"]] == ["human", "ai"]
    state = await client.threads.get_state(thread["thread_id"])
    assert state["next"] == ["tools"]
    assert (await client.threads.get(thread["thread_id"]))["status"] == "interrupted"

    done = await client.runs.wait(thread["thread_id"], "lead_agent", input=None)
    assert done["messages"][-1]["content"] == "Tool add returned: 7.0"
