"""The runs control plane beyond one run: bulk cancel (by ids, by status), batches
of stateless runs, and delayed starts (`after_seconds`). Both stacks."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from datetime import datetime
from typing import Any

import httpx
import psycopg
import pytest
from langgraph_sdk.client import LangGraphClient

from tests.support.helpers import poll_until_done, says, start_slow_tool, wait_for_status
from waybill.common.launch import Stack


def moment(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


async def delayed_run(client: LangGraphClient, seconds: float = 300, **extra: Any) -> dict:
    """A run on a new thread that may not start for `seconds`."""
    thread = await client.threads.create(metadata=extra.pop("metadata", {}))
    return await client.runs.create(
        thread["thread_id"], "lead_agent", input=says("later"), after_seconds=seconds, **extra
    )


async def status_of(client: LangGraphClient, run: dict[str, Any]) -> str:
    return str((await client.runs.get(run["thread_id"], run["run_id"]))["status"])


async def still_pending_after_a_moment(client: LangGraphClient, run: dict[str, Any]) -> bool:
    # A stored cancel makes a pending run claimable at once and it ends within
    # milliseconds; half a second later it would show.
    await asyncio.sleep(0.5)
    return await status_of(client, run) == "pending"


# ---- bulk cancel ----------------------------------------------------------------------


async def test_cancel_many_by_thread_and_run_ids(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    finished = await client.runs.create(thread_id, "lead_agent", input=says("done already"))
    await poll_until_done(client, thread_id, finished["run_id"])
    running = await start_slow_tool(client, thread_id)
    queued = await client.runs.create(
        thread_id, "lead_agent", input=says("queued"), multitask_strategy="enqueue"
    )
    assert queued["status"] == "pending"

    ids = [running["run_id"], queued["run_id"], finished["run_id"]]
    reply = await http.post("/runs/cancel", json={"thread_id": thread_id, "run_ids": ids})
    assert reply.status_code == 204

    for run_id in (running["run_id"], queued["run_id"]):
        ended = await wait_for_status(client, thread_id, run_id, "interrupted")
        assert (ended["run_id"], ended["status"]) == (run_id, "interrupted")
    # A finished run among them is left as it was.
    assert (await client.runs.get(thread_id, finished["run_id"]))["status"] == "success"
    assert (await client.threads.get(thread_id))["status"] == "interrupted"


async def test_cancel_many_with_rollback_through_the_sdk(client: LangGraphClient) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    kept = await client.runs.wait(thread_id, "lead_agent", input=says("keep me"))
    running = await start_slow_tool(client, thread_id)

    await client.runs.cancel_many(
        thread_id=thread_id, run_ids=[running["run_id"]], action="rollback"
    )
    # As on LangGraph Platform, once the cancel has answered the run is gone and
    # so is what it wrote: no waiting.
    assert len(await client.runs.list(thread_id)) == 1  # the rolled-back run is deleted
    assert (await client.threads.get_state(thread_id))["values"] == kept
    assert (await client.threads.get(thread_id))["status"] == "idle"


def newest_checkpoint_run(stack: Stack, thread_id: str) -> str | None:
    """The run that wrote the thread's newest checkpoint: what a state read returns,
    read from the database itself (the runner that serves state reads is paused)."""
    url = stack.env["WAYBILL_DATABASE_URL"].replace("postgresql+asyncpg://", "postgresql://")
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT metadata->>'run_id' FROM checkpoints WHERE thread_id = %s "
            "AND checkpoint_ns = '' ORDER BY checkpoint_id DESC LIMIT 1",
            (thread_id,),
        ).fetchone()
    return None if row is None else str(row[0])


async def running_with_its_checkpoint(
    stack: Stack, client: LangGraphClient
) -> tuple[str, Any, dict[str, Any]]:
    """A thread with a finished run's state, and a running run whose checkpoint is
    now the thread's newest."""
    thread_id = (await client.threads.create())["thread_id"]
    kept = await client.runs.wait(thread_id, "lead_agent", input=says("keep me"))
    running = await start_slow_tool(client, thread_id)
    for _ in range(200):  # its checkpoint after the model's turn is stored in the background
        if newest_checkpoint_run(stack, thread_id) == running["run_id"]:
            break
        await asyncio.sleep(0.025)
    assert newest_checkpoint_run(stack, thread_id) == running["run_id"]
    return thread_id, kept, running


@pytest.mark.parametrize("stack", ["postgres"], indirect=True)
async def test_a_rollback_answers_once_the_run_and_what_it_wrote_are_gone(
    stack: Stack, client: LangGraphClient
) -> None:
    """The interleaving behind the flaky rollback test, forced: the cancel is on
    record but the run's runner has not acted on it yet (it is paused). The cancel
    does not answer then: it answers once the runner has deleted the run's
    checkpoints and the run, so that a client that reads the run as gone reads the
    thread's state without it (LangGraph Platform deletes both in the cancel)."""
    thread_id, kept, running = await running_with_its_checkpoint(stack, client)
    runner = stack.processes["runner"]
    runner.send_signal(signal.SIGSTOP)  # its cancel order waits in its socket
    try:
        cancel = asyncio.ensure_future(
            client.runs.cancel_many(
                thread_id=thread_id, run_ids=[running["run_id"]], action="rollback"
            )
        )
        await asyncio.sleep(1.0)
        assert not cancel.done()  # the run's state is not rolled back yet
        assert newest_checkpoint_run(stack, thread_id) == running["run_id"]
    finally:
        runner.send_signal(signal.SIGCONT)
    await asyncio.wait_for(cancel, 30)
    # No wait past the cancel's answer: every read agrees that the run is gone.
    assert len(await client.runs.list(thread_id)) == 1
    assert newest_checkpoint_run(stack, thread_id) != running["run_id"]
    assert (await client.threads.get_state(thread_id))["values"] == kept
    assert (await client.threads.get(thread_id))["status"] == "idle"


@pytest.mark.parametrize("stack", ["postgres"], indirect=True)
async def test_a_rollback_no_runner_acts_on_answers_after_its_wait(
    stack: Stack, client: LangGraphClient
) -> None:
    """A runner that does not act within `rollback_wait_seconds` (5 s by default)
    does not hold the cancel longer: it answers, reads hide the run, and the run is
    rolled back once the runner turns again."""
    thread_id, kept, running = await running_with_its_checkpoint(stack, client)
    runner = stack.processes["runner"]
    runner.send_signal(signal.SIGSTOP)
    try:
        asked = time.monotonic()
        await client.runs.cancel(thread_id, running["run_id"], action="rollback")
        waited = time.monotonic() - asked
        assert 4.5 <= waited < 15, waited
        listed = [run["run_id"] for run in await client.runs.list(thread_id)]
        assert len(listed) == 1 and running["run_id"] not in listed
    finally:
        runner.send_signal(signal.SIGCONT)
    for _ in range(400):
        if (await client.threads.get(thread_id))["status"] != "busy":
            break
        await asyncio.sleep(0.025)
    assert newest_checkpoint_run(stack, thread_id) != running["run_id"]
    assert (await client.threads.get_state(thread_id))["values"] == kept


async def test_a_queued_run_rolled_back_is_gone(client: LangGraphClient) -> None:
    """A run that never started, cancelled with a rollback, is deleted, as LangGraph
    Platform deletes it in the cancel (it has nothing to roll back)."""
    thread_id = (await client.threads.create())["thread_id"]
    running = await start_slow_tool(client, thread_id)
    queued = await client.runs.create(
        thread_id, "lead_agent", input=says("queued"), multitask_strategy="enqueue"
    )
    await client.runs.cancel(thread_id, queued["run_id"], action="rollback")
    listed = [run["run_id"] for run in await client.runs.list(thread_id)]
    assert listed == [running["run_id"]]
    with pytest.raises(httpx.HTTPStatusError) as gone:
        await client.runs.get(thread_id, queued["run_id"])
    assert gone.value.response.status_code == 404
    await client.runs.cancel(thread_id, running["run_id"], wait=True)
    listed = [run["run_id"] for run in await client.runs.list(thread_id)]
    assert listed == [running["run_id"]]  # still none of the rolled-back run


async def test_cancel_many_by_status(client: LangGraphClient) -> None:
    tag = uuid.uuid4().hex
    waiting = [await delayed_run(client, metadata={"tag": tag}) for _ in range(2)]
    running_thread = (await client.threads.create())["thread_id"]
    running = await start_slow_tool(client, running_thread)

    await client.runs.cancel_many(status="pending")
    for run in waiting:
        await wait_for_status(client, run["thread_id"], run["run_id"], "interrupted")
    assert await status_of(client, running) == "running"  # not pending: untouched

    await client.runs.cancel_many(status="running")
    await wait_for_status(client, running_thread, running["run_id"], "interrupted")

    both = [await delayed_run(client), await start_slow_tool(client, running_thread)]
    await client.runs.cancel_many(status="all")
    for run in both:
        await wait_for_status(client, run["thread_id"], run["run_id"], "interrupted")


async def test_cancel_many_finds_nothing_is_404(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    reply = await http.post(
        "/runs/cancel", json={"thread_id": thread_id, "run_ids": [str(uuid.uuid4())]}
    )
    assert reply.status_code == 404
    assert "No runs found" in reply.json()["detail"]


@pytest.mark.parametrize(
    ("body", "params", "named"),
    [
        ({"status": "pending", "thread_id": "THREAD"}, {}, "status"),
        ({"status": "pending", "run_ids": ["RUN"]}, {}, "status"),
        ({}, {}, "status"),
        ({"thread_id": "THREAD"}, {}, "run_ids"),
        ({"run_ids": ["RUN"]}, {}, "thread_id"),
        ({"thread_id": "THREAD", "run_ids": []}, {}, "run_ids"),
        ({"thread_id": "THREAD", "run_ids": ["not-a-uuid"]}, {}, "run_ids"),
        ({"thread_id": "nope", "run_ids": ["RUN"]}, {}, "thread_id"),
        ({"status": "done"}, {}, "status"),
        ({"thread_id": "THREAD", "run_ids": ["RUN"]}, {"action": "explode"}, "action"),
    ],
)
async def test_bad_cancel_requests_are_422_and_cancel_nothing(
    client: LangGraphClient,
    http: httpx.AsyncClient,
    body: dict[str, Any],
    params: dict[str, str],
    named: str,
) -> None:
    run = await delayed_run(client)
    filled = {
        key: (
            run["thread_id"]
            if value == "THREAD"
            else [run["run_id"] if item == "RUN" else item for item in value]
            if isinstance(value, list)
            else value
        )
        for key, value in body.items()
    }
    reply = await http.post("/runs/cancel", json=filled, params=params)
    assert reply.status_code == 422
    assert named in str(reply.json()["detail"])
    assert await still_pending_after_a_moment(client, run)
    await client.runs.cancel(run["thread_id"], run["run_id"])


# ---- batches of stateless runs ----------------------------------------------------------


async def test_batch_creates_background_stateless_runs(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    tag = uuid.uuid4().hex
    runs = await client.runs.create_batch(
        [
            {"assistant_id": "lead_agent", "input": says("first"), "metadata": {"tag": tag}},
            {
                "assistant_id": "lead_agent",
                "input": says("second"),
                "metadata": {"tag": tag},
                "on_completion": "keep",
            },
        ]
    )
    assert len(runs) == 2
    assert len({run["thread_id"] for run in runs}) == 2  # a temporary thread each
    assert all(run["status"] in ("pending", "running", "success") for run in runs)

    dropped, kept = runs
    await client.runs.join(kept["thread_id"], kept["run_id"])
    state = await client.threads.get_state(kept["thread_id"])
    assert state["values"]["messages"][-1]["content"] == "You said: second"
    for _ in range(200):  # on_completion=delete (the default) drops its thread
        if (await http.get(f"/threads/{dropped['thread_id']}")).status_code == 404:
            break
        await asyncio.sleep(0.05)
    assert (await http.get(f"/threads/{dropped['thread_id']}")).status_code == 404
    assert await client.threads.count(metadata={"tag": tag}) == 1

    empty = await http.post("/runs/batch", json=[])
    assert empty.status_code == 200 and empty.json() == []


@pytest.mark.parametrize(
    ("second", "status", "named"),
    [
        ({"assistant_id": "no_such_graph"}, 422, "runs[1]"),
        ({"assistant_id": "lead_agent", "after_seconds": -1}, 422, "after_seconds"),
        ({"assistant_id": "lead_agent", "stream_mode": "bogus"}, 422, "stream_mode"),
        ({"input": says("no assistant")}, 422, "assistant_id"),
        (
            {"assistant_id": "lead_agent", "context": {"model_name": "gpt-9"}},
            400,
            "gpt-9",
        ),
    ],
)
async def test_a_bad_batch_admits_none(
    client: LangGraphClient, http: httpx.AsyncClient, second: dict, status: int, named: str
) -> None:
    tag = uuid.uuid4().hex
    first = {
        "assistant_id": "lead_agent",
        "input": says("fine"),
        "metadata": {"tag": tag},
        "on_completion": "keep",
    }
    reply = await http.post("/runs/batch", json=[first, {**second, "metadata": {"tag": tag}}])
    assert reply.status_code == status
    assert named in str(reply.json()["detail"])
    assert await client.threads.count(metadata={"tag": tag}) == 0


async def test_a_batch_refused_at_its_admit_stores_none_of_its_runs(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    """The second item finds the thread busy with the first (strategy reject): the
    batch is a 409 and the first run was never stored either."""
    thread_id = (await client.threads.create())["thread_id"]
    item = {
        "assistant_id": "lead_agent",
        "input": says("twice"),
        "thread_id": thread_id,
        "multitask_strategy": "reject",
    }
    reply = await http.post("/runs/batch", json=[item, item])
    assert reply.status_code == 409, reply.json()
    assert "already has an active run" in str(reply.json()["detail"])
    assert await client.runs.list(thread_id) == []
    assert (await client.threads.get(thread_id))["status"] == "idle"


async def test_a_batch_may_queue_two_runs_on_one_thread(client: LangGraphClient) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    items = [
        {
            "assistant_id": "lead_agent",
            "input": says(word),
            "thread_id": thread_id,
            "multitask_strategy": "enqueue",
        }
        for word in ("one", "two")
    ]
    first, second = await client.runs.create_batch(items)  # type: ignore[arg-type]
    await client.runs.join(thread_id, first["run_id"])
    await client.runs.join(thread_id, second["run_id"])
    state = await client.threads.get_state(thread_id)
    said = [m["content"] for m in state["values"]["messages"] if m["type"] == "ai"]
    assert said == ["You said: one", "You said: two"]


async def test_batch_body_must_be_a_list(http: httpx.AsyncClient) -> None:
    reply = await http.post("/runs/batch", json={"assistant_id": "lead_agent"})
    assert reply.status_code == 422
    assert "list" in str(reply.json()["detail"])


# ---- delayed starts ---------------------------------------------------------------------


async def test_after_seconds_delays_the_start(client: LangGraphClient) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    delayed = await client.runs.create(
        thread_id, "lead_agent", input=says("later"), after_seconds=2
    )
    # Stored pending, due two seconds after it was admitted (LangGraph's created_at).
    assert delayed["status"] == "pending"
    delay = moment(delayed["created_at"]) - moment(delayed["updated_at"])
    assert 1.9 <= delay.total_seconds() <= 2.1
    assert (await client.runs.get(thread_id, delayed["run_id"]))["status"] == "pending"
    assert (await client.threads.get(thread_id))["status"] == "busy"

    # A run queued after it, but due at once, runs first.
    now = await client.runs.create(
        thread_id, "lead_agent", input=says("now"), multitask_strategy="enqueue"
    )
    await client.runs.join(thread_id, now["run_id"])
    assert (await client.runs.get(thread_id, delayed["run_id"]))["status"] == "pending"

    # Nothing else happens on the stack: the dispatcher's own timer starts it.
    finished = await poll_until_done(client, thread_id, delayed["run_id"])
    assert finished["status"] == "success"
    state = await client.threads.get_state(thread_id)
    contents = [m["content"] for m in state["values"]["messages"]]
    assert contents == ["now", "You said: now", "later", "You said: later"]

    # Its first checkpoint was written no earlier than it was due.
    history = await client.threads.get_history(thread_id, limit=20)
    started = min(
        moment(checkpoint["created_at"])
        for checkpoint in history
        if checkpoint["metadata"].get("run_id") == delayed["run_id"]
    )
    assert started >= moment(delayed["created_at"])


async def test_a_delayed_run_cancelled_early_ends_at_once(client: LangGraphClient) -> None:
    run = await delayed_run(client, seconds=300)
    await client.runs.cancel(run["thread_id"], run["run_id"])
    ended = await wait_for_status(client, run["thread_id"], run["run_id"], "interrupted")
    assert ended["status"] == "interrupted"
    assert (await client.threads.get(run["thread_id"]))["status"] == "idle"


async def test_after_seconds_on_a_stateless_run(client: LangGraphClient) -> None:
    run = await client.runs.create(
        None, "lead_agent", input=says("soon"), after_seconds=1, on_completion="keep"
    )
    assert run["status"] == "pending"
    done = await client.runs.join(run["thread_id"], run["run_id"])
    assert done["messages"][-1]["content"] == "You said: soon"


@pytest.mark.parametrize("after_seconds", ["-1", '"soon"', "1e12", "1e999"])
async def test_bad_after_seconds_is_422_and_creates_nothing(
    client: LangGraphClient, http: httpx.AsyncClient, after_seconds: str
) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    # Raw JSON: 1e999 is how a client's infinity arrives.
    body = f'{{"assistant_id": "lead_agent", "after_seconds": {after_seconds}}}'
    reply = await http.post(
        f"/threads/{thread_id}/runs", content=body, headers={"content-type": "application/json"}
    )
    assert reply.status_code == 422
    assert "after_seconds" in str(reply.json()["detail"])
    assert await client.runs.list(thread_id) == []
