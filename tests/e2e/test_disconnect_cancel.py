"""A client that leaves a run's wait, stream or join interrupts the run when it asked
(`on_disconnect="cancel"` on creation, `cancel_on_disconnect=true` on a join), as
LangGraph Platform does; otherwise the run goes on to its end."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from langgraph_sdk.client import LangGraphClient

from tests.support.helpers import poll_until_done, slow, wait_for_status
from waybill.common.launch import Stack


@pytest.fixture
def stack(sqlite_stack: Stack) -> Stack:
    # What happens on leaving is the gateway's alone, whatever the storage: SQLite.
    return sqlite_stack


CREATING = {
    "threaded wait": ("/threads/{thread_id}/runs/wait", True),
    "threaded stream": ("/threads/{thread_id}/runs/stream", True),
    "stateless wait": ("/runs/wait", False),
    "stateless stream": ("/runs/stream", False),
}


async def leave_after_first_bytes(stack: Stack, method: str, path: str, **sent: Any) -> str:
    """Start the request, read its first bytes (a wait's keep-alive newline, a
    stream's first event), walk away; the run's `/threads/{tid}/runs/{rid}`."""
    async with (
        httpx.AsyncClient(base_url=stack.url, timeout=30) as raw,
        raw.stream(method, path, **sent) as reply,
    ):
        assert reply.status_code == 200
        async for _ in reply.aiter_bytes():
            break
        return reply.headers["content-location"]


async def create_and_leave(
    client: LangGraphClient, stack: Stack, creating: str, seconds: float, **fields: Any
) -> tuple[str, str]:
    """A run created through `creating`, left after its first bytes: (thread, run)."""
    path, threaded = CREATING[creating]
    body = {"assistant_id": "lead_agent", "input": slow(seconds), **fields}
    if threaded:
        path = path.format(thread_id=(await client.threads.create())["thread_id"])
    else:
        body["on_completion"] = "keep"  # so that its run can be read once it ended
    location = await leave_after_first_bytes(stack, "POST", path, json=body)
    _, thread_id, _, run_id = location.rsplit("/", 3)
    return thread_id, run_id


@pytest.mark.parametrize("creating", list(CREATING))
async def test_leaving_with_on_disconnect_cancel_interrupts_the_run(
    client: LangGraphClient, stack: Stack, creating: str
) -> None:
    thread_id, run_id = await create_and_leave(client, stack, creating, 30, on_disconnect="cancel")
    run = await wait_for_status(client, thread_id, run_id, "interrupted")
    assert run["status"] == "interrupted"


@pytest.mark.parametrize("on_disconnect", [None, "continue"])
@pytest.mark.parametrize("creating", list(CREATING))
async def test_leaving_without_cancel_lets_the_run_finish(
    client: LangGraphClient, stack: Stack, creating: str, on_disconnect: str | None
) -> None:
    fields = {"on_disconnect": on_disconnect} if on_disconnect else {}
    thread_id, run_id = await create_and_leave(client, stack, creating, 2, **fields)
    run = await poll_until_done(client, thread_id, run_id)
    assert run["status"] == "success"


JOINS = {
    "join": ("/join", {}),
    "join stream": ("/stream", {"Last-Event-ID": "-1"}),  # its first event at once
}


async def join_and_leave(
    client: LangGraphClient, stack: Stack, joining: str, seconds: float, **params: Any
) -> tuple[str, str]:
    """A background run, joined through `joining` and left after the first bytes."""
    thread_id = (await client.threads.create())["thread_id"]
    run = await client.runs.create(thread_id, "lead_agent", input=slow(seconds))
    tail, headers = JOINS[joining]
    path = f"/threads/{thread_id}/runs/{run['run_id']}{tail}"
    await leave_after_first_bytes(stack, "GET", path, params=params, headers=headers)
    return thread_id, run["run_id"]


@pytest.mark.parametrize("joining", list(JOINS))
async def test_leaving_a_join_with_cancel_on_disconnect_interrupts_the_run(
    client: LangGraphClient, stack: Stack, joining: str
) -> None:
    thread_id, run_id = await join_and_leave(
        client, stack, joining, 30, cancel_on_disconnect="true"
    )
    run = await wait_for_status(client, thread_id, run_id, "interrupted")
    assert run["status"] == "interrupted"


@pytest.mark.parametrize("cancel", [None, "false"])
@pytest.mark.parametrize("joining", list(JOINS))
async def test_leaving_a_join_without_it_lets_the_run_finish(
    client: LangGraphClient, stack: Stack, joining: str, cancel: str | None
) -> None:
    params = {"cancel_on_disconnect": cancel} if cancel else {}
    thread_id, run_id = await join_and_leave(client, stack, joining, 2, **params)
    run = await poll_until_done(client, thread_id, run_id)
    assert run["status"] == "success"


async def test_a_join_that_stays_to_the_end_cancels_nothing(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    run = await client.runs.create(thread_id, "lead_agent", input=slow(1))
    path = f"/threads/{thread_id}/runs/{run['run_id']}"
    joined = await http.get(f"{path}/join", params={"cancel_on_disconnect": "true"})
    assert joined.status_code == 200
    assert "__error__" not in joined.json()
    streamed = await http.get(
        f"{path}/stream", params={"cancel_on_disconnect": "true"}, headers={"Last-Event-ID": "-1"}
    )
    assert streamed.status_code == 200
    assert (await client.runs.get(thread_id, run["run_id"]))["status"] == "success"


@pytest.mark.parametrize("tail", ["/join", "/stream"])
async def test_a_cancel_on_disconnect_that_is_no_boolean_is_422(
    client: LangGraphClient, http: httpx.AsyncClient, tail: str
) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    run = await client.runs.create(thread_id, "lead_agent", input=slow(0.1))
    path = f"/threads/{thread_id}/runs/{run['run_id']}{tail}"
    reply = await http.get(path, params={"cancel_on_disconnect": "sometimes"})
    assert reply.status_code == 422
    await poll_until_done(client, thread_id, run["run_id"])
