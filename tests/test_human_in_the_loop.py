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
