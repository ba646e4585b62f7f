"""`Idempotency-Key`: a retried creation returns the first run and runs the agent once."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from tests.support.stacks import runner_stats
from waybill.common.launch import Stack

QUESTION = {"messages": [{"role": "user", "content": "once, please"}]}


def models_built(stack: Stack) -> int:
    return runner_stats(stack.address_of("runner"))["models_built"]


async def new_thread(http: httpx.AsyncClient) -> str:
    return str((await http.post("/threads", json={})).json()["thread_id"])


async def create(http: httpx.AsyncClient, thread_id: str, key: str, **body: Any) -> httpx.Response:
    payload = {"assistant_id": "lead_agent", "input": QUESTION, **body}
    return await http.post(
        f"/threads/{thread_id}/runs", json=payload, headers={"Idempotency-Key": key}
    )


async def test_a_repeated_key_returns_the_same_run_and_runs_the_agent_once(
    stack: Stack, http: httpx.AsyncClient
) -> None:
    thread_id = await new_thread(http)
    before = models_built(stack)
    first = await create(http, thread_id, "order-42")
    await http.get(f"/threads/{thread_id}/runs/{first.json()['run_id']}/join")
    again = await create(http, thread_id, "order-42")
    assert again.status_code == 200, again.text
    assert again.json()["run_id"] == first.json()["run_id"]
    runs = (await http.get(f"/threads/{thread_id}/runs")).json()
    assert [run["run_id"] for run in runs] == [first.json()["run_id"]]
    assert models_built(stack) == before + 1


async def test_concurrent_twins_with_one_key_create_one_run(
    stack: Stack, http: httpx.AsyncClient
) -> None:
    thread_id = await new_thread(http)
    replies = await asyncio.gather(*(create(http, thread_id, "burst-7") for _ in range(8)))
    assert {reply.status_code for reply in replies} == {200}
    assert len({reply.json()["run_id"] for reply in replies}) == 1
    run_id = replies[0].json()["run_id"]
    await http.get(f"/threads/{thread_id}/runs/{run_id}/join")
    assert len((await http.get(f"/threads/{thread_id}/runs")).json()) == 1


async def test_the_same_key_with_another_request_is_409(http: httpx.AsyncClient) -> None:
    thread_id = await new_thread(http)
    first = await create(http, thread_id, "order-43")
    other = await create(http, thread_id, "order-43", metadata={"changed": True})
    assert other.status_code == 409
    assert "Idempotency-Key" in other.json()["detail"]
    await http.get(f"/threads/{thread_id}/runs/{first.json()['run_id']}/join")
    assert len((await http.get(f"/threads/{thread_id}/runs")).json()) == 1


async def test_the_digest_covers_every_field_of_the_request(http: httpx.AsyncClient) -> None:
    for field, first_value, other_value in [
        ("after_seconds", 0, 30),
        ("stream_resumable", False, True),
        ("on_completion", "delete", "keep"),
    ]:
        thread_id = await new_thread(http)
        key = f"order-field-{field}"
        first = await create(http, thread_id, key, **{field: first_value})
        assert first.status_code == 200, first.text
        other = await create(http, thread_id, key, **{field: other_value})
        assert other.status_code == 409, (field, other.text)
        await http.get(f"/threads/{thread_id}/runs/{first.json()['run_id']}/join")


async def test_keys_are_per_request_not_per_thread(http: httpx.AsyncClient) -> None:
    one, two = await new_thread(http), await new_thread(http)
    first = await create(http, one, "order-44")
    second = await create(http, two, "order-44")
    assert second.status_code == 409  # the key already names a run on another thread
    other_key = await create(http, two, "order-45")
    assert other_key.json()["run_id"] != first.json()["run_id"]
    for thread_id, reply in ((one, first), (two, other_key)):
        await http.get(f"/threads/{thread_id}/runs/{reply.json()['run_id']}/join")


async def test_a_key_expires(tmp_path: Any) -> None:
    from tests.support.stacks import running_stack, stack_env

    env = stack_env(tmp_path, WAYBILL_IDEMPOTENCY_SECONDS="0.5")
    with running_stack(env, tmp_path) as short_lived:
        async with httpx.AsyncClient(base_url=short_lived.url, timeout=30) as http:
            thread_id = await new_thread(http)
            first = (await create(http, thread_id, "order-46")).json()["run_id"]
            await http.get(f"/threads/{thread_id}/runs/{first}/join")
            await asyncio.sleep(0.6)
            second = (await create(http, thread_id, "order-46")).json()["run_id"]
            assert second != first
            await http.get(f"/threads/{thread_id}/runs/{second}/join")
