"""The threads API beyond CRUD: search filters and orders, count, if_exists, the
delete cascade (runs, events, receipts, checkpoints, workspace) and the thread
status as runs come and go. Through langgraph-sdk and raw HTTP, on both stacks."""

from __future__ import annotations

import json
import uuid
from typing import Any

import grpc
import httpx
import pytest
from langgraph_sdk.client import LangGraphClient
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import create_async_engine

from tests.support.helpers import says, start_slow_tool, wait_for_status
from tests.support.stacks import aio_service_channel
from waybill.common.launch import Stack
from waybill.services.delivery.store import receipts
from waybill.services.journal.tables import run_event_batches, run_logs
from waybill.v1 import delivery_pb2, delivery_pb2_grpc, journal_pb2, journal_pb2_grpc

# ---- helpers ---------------------------------------------------------------------


async def tagged_threads(client: LangGraphClient, count: int, **extra: Any) -> tuple[str, list]:
    tag = uuid.uuid4().hex
    made = [
        await client.threads.create(metadata={"tag": tag, "n": n, **extra}) for n in range(count)
    ]
    return tag, made


def ids_of(threads: list[dict[str, Any]]) -> list[str]:
    return [thread["thread_id"] for thread in threads]


async def journal_events(stack: Stack, run_id: str) -> list[str]:
    """The run's event names as the journal replays them (gRPC errors propagate)."""
    async with aio_service_channel(stack.address_of("journal")) as channel:
        call = journal_pb2_grpc.JournalStub(channel).Subscribe(
            journal_pb2.SubscribeRequest(run_id=run_id), timeout=10
        )
        names: list[str] = []
        async for item in call:
            names += [event.event for event in item.events]
            if item.end:
                break
        return names


async def receipt_outcome(stack: Stack, run_id: str) -> int:
    async with aio_service_channel(stack.address_of("delivery")) as channel:
        receipt = await delivery_pb2_grpc.DeliveryStub(channel).GetReceipt(
            delivery_pb2.GetReceiptRequest(run_id=run_id), timeout=10
        )
        return int(receipt.outcome)


async def rows_left(stack: Stack, run_ids: list[str]) -> dict[str, int]:
    """What the journal's and delivery's databases still hold for these runs."""
    counts: dict[str, int] = {}
    for service, table in (
        ("journal", run_event_batches),
        ("journal", run_logs),
        ("delivery", receipts),
    ):
        engine = create_async_engine(stack.settings.sqlalchemy_url(service))
        try:
            async with engine.connect() as conn:
                query = select(func.count()).select_from(table).where(table.c.run_id.in_(run_ids))
                counts[table.name] = int((await conn.execute(query)).scalar_one())
        finally:
            await engine.dispose()
    return counts


async def grpc_code(pending: Any) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await pending
    return failure.value.code()


# ---- search and count ------------------------------------------------------------


async def test_search_filters_metadata_values_status_and_ids(client: LangGraphClient) -> None:
    tag, (alpha, beta, broken) = await tagged_threads(client, 3)
    await client.runs.wait(alpha["thread_id"], "lead_agent", input=says("alpha"))
    await client.runs.wait(beta["thread_id"], "lead_agent", input=says("beta"))
    with pytest.raises(Exception, match="ValueError"):
        await client.runs.wait(broken["thread_id"], "lead_agent", input={"messages": []})

    # values: containment into the thread's values after its last run (nested
    # objects inside an array; the stored messages have many more keys).
    said_alpha = {"messages": [{"type": "human", "content": "alpha"}]}
    found = await client.threads.search(metadata={"tag": tag}, values=said_alpha)
    assert ids_of(found) == [alpha["thread_id"]]
    assert found[0]["values"]["messages"][-1]["content"] == "You said: alpha"
    answered_beta = {"messages": [{"type": "ai", "content": "You said: beta"}]}
    assert ids_of(await client.threads.search(values=answered_beta, limit=100)) == [
        beta["thread_id"]
    ]
    # Every element of the pattern must be there; one missing element misses.
    both = {"messages": [{"content": "alpha"}, {"content": "beta"}]}
    assert await client.threads.search(metadata={"tag": tag}, values=both) == []

    assert ids_of(await client.threads.search(metadata={"tag": tag, "n": 2})) == [
        broken["thread_id"]
    ]
    errored = await client.threads.search(metadata={"tag": tag}, status="error")
    assert ids_of(errored) == [broken["thread_id"]]
    idle = await client.threads.search(metadata={"tag": tag}, status="idle")
    assert set(ids_of(idle)) == {alpha["thread_id"], beta["thread_id"]}

    chosen = await client.threads.search(ids=[alpha["thread_id"], broken["thread_id"]])
    assert set(ids_of(chosen)) == {alpha["thread_id"], broken["thread_id"]}
    narrowed = await client.threads.search(
        ids=[alpha["thread_id"], broken["thread_id"]], status="idle"
    )
    assert ids_of(narrowed) == [alpha["thread_id"]]


async def test_metadata_containment_is_json_containment(client: LangGraphClient) -> None:
    tag = uuid.uuid4().hex
    rich = await client.threads.create(
        metadata={
            "tag": tag,
            "owner": {"team": "blue", "size": 3},
            "labels": ["a", "b"],
            "on": True,
        }
    )
    await client.threads.create(metadata={"tag": tag, "owner": {"team": "red"}, "on": 1})

    def found(pattern: dict[str, Any]) -> Any:
        return client.threads.search(metadata={"tag": tag, **pattern})

    assert ids_of(await found({"owner": {"team": "blue"}})) == [rich["thread_id"]]
    assert ids_of(await found({"labels": ["b"]})) == [rich["thread_id"]]
    assert await found({"labels": ["c"]}) == []
    # JSON keeps true apart from 1.
    assert ids_of(await found({"on": True})) == [rich["thread_id"]]
    assert len(await found({"on": 1})) == 1
    assert await found({"owner": {"team": "blue", "size": 4}}) == []


async def test_search_sorts_and_pages(client: LangGraphClient, http: httpx.AsyncClient) -> None:
    tag, made = await tagged_threads(client, 4)
    created = ids_of(made)

    def search(**options: Any) -> Any:
        return client.threads.search(metadata={"tag": tag}, **{"limit": 10, **options})

    assert ids_of(await search()) == created[::-1]  # newest first by default
    assert ids_of(await search(sort_by="created_at", sort_order="asc")) == created
    assert ids_of(await search(sort_by="created_at", sort_order="desc")) == created[::-1]
    assert ids_of(await search(sort_by="thread_id", sort_order="asc")) == sorted(created)
    assert ids_of(await search(sort_by="thread_id", sort_order="desc")) == sorted(created)[::-1]

    await client.threads.update(created[1], metadata={"touched": True})
    assert ids_of(await search(sort_by="updated_at", sort_order="desc"))[0] == created[1]
    assert ids_of(await search(sort_by="updated_at", sort_order="asc"))[-1] == created[1]

    with pytest.raises(Exception, match="ValueError"):
        await client.runs.wait(created[2], "lead_agent", input={"messages": []})
    by_status = await search(sort_by="status", sort_order="asc")
    assert [t["status"] for t in by_status] == ["error", "idle", "idle", "idle"]
    assert ids_of(await search(sort_by="status", sort_order="desc"))[-1] == created[2]

    # Pages of a sorted search do not overlap and cover everything.
    pages = [
        ids_of(await search(sort_by="thread_id", sort_order="asc", limit=3, offset=offset))
        for offset in (0, 3)
    ]
    assert pages == [sorted(created)[:3], sorted(created)[3:]]

    raw = await http.post(
        "/threads/search",
        json={"metadata": {"tag": tag}, "sort_by": "created_at", "sort_order": "asc", "limit": 2},
    )
    assert raw.status_code == 200
    assert ids_of(raw.json()) == created[:2]


async def test_count_uses_the_search_filters(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    tag, made = await tagged_threads(client, 3, kind="counted")
    await client.runs.wait(made[0]["thread_id"], "lead_agent", input=says("counted"))

    assert await client.threads.count(metadata={"tag": tag}) == 3
    assert await client.threads.count(metadata={"tag": tag, "n": 1}) == 1
    assert await client.threads.count(metadata={"tag": tag}, status="idle") == 3
    assert await client.threads.count(metadata={"tag": tag}, status="busy") == 0
    spoken = {"messages": [{"content": "counted"}]}
    assert await client.threads.count(metadata={"tag": tag}, values=spoken) == 1
    assert await client.threads.count(metadata={"tag": uuid.uuid4().hex}) == 0

    # The Platform answers a bare JSON integer.
    raw = await http.post("/threads/count", json={"metadata": {"tag": tag}})
    assert raw.status_code == 200
    assert raw.json() == 3
    everything = await http.post("/threads/count", json={})
    assert isinstance(everything.json(), int) and everything.json() >= 3


@pytest.mark.parametrize(
    ("path", "body", "named"),
    [
        ("/threads/search", {"sort_by": "metadata"}, "sort_by"),  # state_updated_at sorts
        ("/threads/search", {"sort_by": "name"}, "sort_by"),
        ("/threads/search", {"sort_order": "up"}, "sort_order"),
        ("/threads/search", {"status": "sleeping"}, "status"),
        ("/threads/search", {"ids": ["not-a-uuid"]}, "ids"),
        ("/threads/search", {"values": "alpha"}, "values"),
        ("/threads/search", {"metadata": ["a"]}, "metadata"),
        ("/threads/search", {"limit": 0}, "limit"),
        ("/threads/search", {"offset": -1}, "offset"),
        ("/threads/count", {"status": "sleeping"}, "status"),
        ("/threads/count", {"values": [1]}, "values"),
    ],
)
async def test_bad_search_and_count_requests_are_422(
    http: httpx.AsyncClient, path: str, body: dict[str, Any], named: str
) -> None:
    reply = await http.post(path, json=body)
    assert reply.status_code == 422
    assert named in str(reply.json()["detail"])


# ---- create: if_exists -----------------------------------------------------------


async def test_if_exists(client: LangGraphClient, http: httpx.AsyncClient) -> None:
    thread_id = str(uuid.uuid4())
    first = await client.threads.create(thread_id=thread_id, metadata={"v": 1})

    with pytest.raises(httpx.HTTPStatusError) as taken:
        await client.threads.create(thread_id=thread_id, metadata={"v": 2}, if_exists="raise")
    assert taken.value.response.status_code == 409
    assert thread_id in taken.value.response.json()["detail"]

    same = await client.threads.create(
        thread_id=thread_id, metadata={"v": 3}, if_exists="do_nothing"
    )
    assert same["thread_id"] == thread_id
    assert same["metadata"] == {"v": 1}  # the existing thread, untouched
    assert same["created_at"] == first["created_at"]
    assert (await client.threads.get(thread_id))["metadata"] == {"v": 1}

    raw = await http.post("/threads", json={"thread_id": thread_id})  # raise is the default
    assert raw.status_code == 409

    fresh_id = str(uuid.uuid4())
    made = await client.threads.create(thread_id=fresh_id, if_exists="do_nothing")
    assert made["thread_id"] == fresh_id and made["status"] == "idle"

    unknown = str(uuid.uuid4())
    bad = await http.post("/threads", json={"thread_id": unknown, "if_exists": "update"})
    assert bad.status_code == 422
    assert "if_exists" in str(bad.json()["detail"])
    assert (await http.get(f"/threads/{unknown}")).status_code == 404


# ---- delete: the cascade -----------------------------------------------------------


async def test_delete_removes_runs_events_receipts_state_and_workspace(
    client: LangGraphClient, http: httpx.AsyncClient, stack: Stack
) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    write_and_present = [
        {"name": "write_file", "args": {"path": "notes/a.txt", "content": "alpha"}},
        {"name": "present_files", "args": {"paths": ["notes/a.txt"]}},
    ]
    await client.runs.wait(
        thread_id, "lead_agent", input=says(f"/tools {json.dumps(write_and_present)}")
    )
    await client.runs.wait(thread_id, "lead_agent", input=says("second"))
    run_ids = [run["run_id"] for run in await client.runs.list(thread_id)]
    assert len(run_ids) == 2
    workspace = stack.settings.workspaces_path() / thread_id
    assert (workspace / "notes" / "a.txt").read_text() == "alpha"
    for run_id in run_ids:
        assert (await journal_events(stack, run_id))[0] == "metadata"
        assert await receipt_outcome(stack, run_id) > 0
    before = await rows_left(stack, run_ids)
    assert before["run_event_batches"] > 0 and before["run_logs"] == 2 and before["receipts"] == 2

    await client.threads.delete(thread_id)

    assert (await http.get(f"/threads/{thread_id}")).status_code == 404
    for run_id in run_ids:
        assert (await http.get(f"/threads/{thread_id}/runs/{run_id}")).status_code == 404
        stream = await http.get(f"/threads/{thread_id}/runs/{run_id}/stream")
        assert stream.status_code == 404
        assert (await http.get(f"/threads/{thread_id}/runs/{run_id}/join")).status_code == 404
        assert await grpc_code(journal_events(stack, run_id)) == grpc.StatusCode.NOT_FOUND
        assert await grpc_code(receipt_outcome(stack, run_id)) == grpc.StatusCode.NOT_FOUND
    assert await rows_left(stack, run_ids) == {"run_event_batches": 0, "run_logs": 0, "receipts": 0}
    assert not workspace.exists()
    assert (await http.delete(f"/threads/{thread_id}")).status_code == 404

    # The same id again is a new, empty thread: no old state, no old files.
    await client.threads.create(thread_id=thread_id)
    assert (await client.threads.get_state(thread_id))["values"] == {}
    await client.runs.wait(thread_id, "lead_agent", input=says("fresh"))
    state = await client.threads.get_state(thread_id)
    assert [m["content"] for m in state["values"]["messages"]] == ["fresh", "You said: fresh"]
    assert not (workspace / "notes").exists()


async def test_delete_cancels_a_pending_run_first(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    """As on LangGraph Platform (it answered 409 here before): a delayed run still
    pending is cancelled through the durable path, then the thread goes with it."""
    thread_id = (await client.threads.create(metadata={"keep": "me"}))["thread_id"]
    delayed = await client.runs.create(
        thread_id, "lead_agent", input=says("later"), after_seconds=300
    )
    assert (await http.delete(f"/threads/{thread_id}")).status_code == 204
    assert (await http.get(f"/threads/{thread_id}")).status_code == 404
    assert (await http.get(f"/threads/{thread_id}/runs/{delayed['run_id']}")).status_code == 404


async def test_deleting_a_run_forgets_its_events_and_receipt(
    client: LangGraphClient, http: httpx.AsyncClient, stack: Stack
) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    await client.runs.wait(thread_id, "lead_agent", input=says("one"))
    await client.runs.wait(thread_id, "lead_agent", input=says("two"))
    newest, oldest = [run["run_id"] for run in await client.runs.list(thread_id)]

    await client.runs.delete(thread_id, oldest)

    assert await grpc_code(journal_events(stack, oldest)) == grpc.StatusCode.NOT_FOUND
    assert await grpc_code(receipt_outcome(stack, oldest)) == grpc.StatusCode.NOT_FOUND
    assert (await rows_left(stack, [oldest]))["run_event_batches"] == 0
    assert (await journal_events(stack, newest))[0] == "metadata"  # the other run keeps its own
    assert await receipt_outcome(stack, newest) > 0
    assert (await http.get(f"/threads/{thread_id}")).status_code == 200


# ---- the thread's status ---------------------------------------------------------------


async def thread_status(client: LangGraphClient, thread_id: str) -> str:
    return str((await client.threads.get(thread_id))["status"])


async def test_thread_status_follows_its_runs(client: LangGraphClient) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    assert await thread_status(client, thread_id) == "idle"

    with pytest.raises(Exception, match="ValueError"):  # a graph that raises
        await client.runs.wait(thread_id, "lead_agent", input={"messages": []})
    assert await thread_status(client, thread_id) == "error"

    # A run that is merely waiting (here: for its start time) makes the thread busy,
    # and the filters see the same status.
    delayed = await client.runs.create(
        thread_id, "lead_agent", input=says("later"), after_seconds=300
    )
    assert await thread_status(client, thread_id) == "busy"
    busy = await client.threads.search(ids=[thread_id], status="busy")
    assert ids_of(busy) == [thread_id]
    # Cancelled before it started, it changes nothing: the last run's error stands.
    await client.runs.cancel(thread_id, delayed["run_id"])
    await wait_for_status(client, thread_id, delayed["run_id"], "interrupted")
    assert await thread_status(client, thread_id) == "error"

    await client.runs.wait(thread_id, "lead_agent", input=says("fine"))  # success
    assert await thread_status(client, thread_id) == "idle"

    # Running, then cancelled mid-run.
    running = await start_slow_tool(client, thread_id)
    assert await thread_status(client, thread_id) == "busy"
    queued = await client.runs.create(
        thread_id, "lead_agent", input=says("queued"), multitask_strategy="enqueue"
    )
    await client.runs.cancel(thread_id, running["run_id"], wait=True)
    # The queued run then runs; once it is done the thread is idle.
    done = await client.runs.join(thread_id, queued["run_id"])
    assert done["messages"][-1]["content"] == "You said: queued"
    assert await thread_status(client, thread_id) == "idle"

    interrupted = await start_slow_tool(client, thread_id)
    await client.runs.cancel(thread_id, interrupted["run_id"], wait=True)
    assert await thread_status(client, thread_id) == "interrupted"


async def test_thread_status_after_interrupt_and_resume(client: LangGraphClient) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    await client.runs.wait(thread_id, "approval", input={"action": "ship"})
    assert await thread_status(client, thread_id) == "interrupted"
    paused = await client.threads.search(ids=[thread_id], status="interrupted")
    assert ids_of(paused) == [thread_id]
    await client.runs.wait(thread_id, "approval", command={"resume": "ok"})
    assert await thread_status(client, thread_id) == "idle"


async def test_a_number_json_cannot_hold_is_422_not_500(http: httpx.AsyncClient) -> None:
    reply = await http.post(
        "/threads/search", content=b'{"limit": 1e999}', headers={"content-type": "application/json"}
    )
    assert reply.status_code == 422
    assert "limit" in str(reply.json()["detail"])
