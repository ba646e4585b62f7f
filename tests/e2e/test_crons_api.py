"""The crons API through langgraph-sdk, on both storage modes: create (on a
thread or a fresh thread per firing), get, search, count, update, delete; and
bad input refused with a 422 that says what to fix, with nothing written.

The schedules here are far from the test's time (yearly), so nothing fires."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import NotFoundError

from tests.support.helpers import says

YEARLY = "0 9 1 1 *"  # 09:00 on 1 January


def tagged() -> dict[str, str]:
    return {"suite": f"crons-{uuid.uuid4().hex[:8]}"}


async def test_a_cron_round_trip_through_the_sdk(client: LangGraphClient) -> None:
    tag = tagged()
    created = await client.crons.create(
        "lead_agent",
        schedule=YEARLY,
        timezone="Europe/Paris",
        input=says("happy new year"),
        metadata=tag,
    )
    assert created["schedule"] == YEARLY
    assert created["timezone"] == "Europe/Paris"
    assert created["thread_id"] is None
    assert created["on_run_completed"] == "delete"  # LangGraph's default
    assert created["enabled"] is True
    assert created["user_id"] == "local"
    assert created["metadata"] == tag
    assert created["payload"]["input"] == says("happy new year")
    # 09:00 in Paris on 1 January is 08:00 UTC (winter time).
    next_run = datetime.fromisoformat(created["next_run_date"])
    assert (next_run.month, next_run.day, next_run.hour, next_run.minute) == (1, 1, 8, 0)
    assert next_run > datetime.now(UTC)

    thread = await client.threads.create()
    on_thread = await client.crons.create_for_thread(
        thread["thread_id"], "lead_agent", schedule=YEARLY, input=says("hi"), metadata=tag
    )
    assert on_thread["thread_id"] == thread["thread_id"]
    assert on_thread["on_run_completed"] is None
    assert on_thread["timezone"] is None  # UTC

    assert await client.crons.count(metadata=tag) == 2
    assert await client.crons.count(thread_id=thread["thread_id"]) == 1
    found = await client.crons.search(metadata=tag, sort_by="created_at", sort_order="asc")
    assert [c["cron_id"] for c in found] == [created["cron_id"], on_thread["cron_id"]]
    only_ids = await client.crons.search(metadata=tag, select=["cron_id", "schedule"])
    assert all(set(c) == {"cron_id", "schedule"} for c in only_ids)
    by_graph = await client.crons.search(assistant_id="lead_agent", metadata=tag)
    assert len(by_graph) == 2

    moved = await client.crons.update(created["cron_id"], schedule="30 6 * * 1")
    assert moved["schedule"] == "30 6 * * 1"
    assert datetime.fromisoformat(moved["next_run_date"]).weekday() == 0  # a Monday
    off = await client.crons.update(created["cron_id"], enabled=False, input=says("changed"))
    assert off["enabled"] is False and off["next_run_date"] is None
    assert off["payload"]["input"] == says("changed")
    assert [c["cron_id"] for c in await client.crons.search(enabled=False, metadata=tag)] == [
        created["cron_id"]
    ]
    ending = datetime.now(UTC) + timedelta(days=400)
    ended = await client.crons.update(on_thread["cron_id"], end_time=ending)
    assert datetime.fromisoformat(ended["end_time"]) == ending.replace(
        microsecond=ending.microsecond
    )
    cleared = await client.crons.update(on_thread["cron_id"], end_time=None)
    assert cleared["end_time"] is None

    got = await client.http.get(f"/runs/crons/{created['cron_id']}")
    assert got["cron_id"] == created["cron_id"] and got["enabled"] is False

    await client.crons.delete(created["cron_id"])
    await client.crons.delete(on_thread["cron_id"])
    assert await client.crons.count(metadata=tag) == 0
    with pytest.raises(NotFoundError):
        await client.http.get(f"/runs/crons/{created['cron_id']}")
    with pytest.raises(NotFoundError):
        await client.crons.delete(created["cron_id"])


def past() -> str:
    return (datetime.now(UTC) - timedelta(hours=1)).isoformat()


BAD_CREATES: list[tuple[dict[str, Any], str]] = [
    ({"schedule": "61 * * * *"}, "not a valid cron expression"),
    ({"schedule": "* * * * * *"}, "five fields"),
    ({"schedule": "every day"}, "five fields"),
    ({"schedule": "0 0 30 2 *"}, "never comes"),
    ({"schedule": YEARLY, "timezone": "Mars/Olympus_Mons"}, "not an IANA time zone"),
    ({"schedule": YEARLY, "end_time": "PAST"}, "is in the past"),
    ({"schedule": YEARLY, "on_run_completed": "archive"}, "on_run_completed"),
    ({"schedule": YEARLY, "multitask_strategy": "later"}, "multitask_strategy"),
    ({"schedule": YEARLY, "context": {"secrets": {"k": "v"}}}, "context.secrets"),
    ({"schedule": YEARLY, "stream_mode": "everything"}, "unknown stream_mode"),
    # Each firing's run is told to the webhook: the SSRF guard checks it at creation.
    ({"schedule": YEARLY, "webhook": "http://127.0.0.1:9/hook"}, "webhook"),
]


def detail_of(reply: httpx.Response) -> str:
    return str(reply.json()["detail"])


@pytest.mark.parametrize(("fields", "says_what"), BAD_CREATES)
async def test_a_bad_cron_is_a_422_and_nothing_is_written(
    http: httpx.AsyncClient, fields: dict[str, Any], says_what: str
) -> None:
    tag = tagged()
    if fields.get("end_time") == "PAST":
        fields = {**fields, "end_time": past()}
    body = {"assistant_id": "lead_agent", "metadata": tag, **fields}
    for path in (
        "/runs/crons",
        f"/threads/{(await http.post('/threads', json={})).json()['thread_id']}/runs/crons",
    ):
        if "on_run_completed" in fields and "threads" in path:
            continue
        reply = await http.post(path, json=body)
        assert reply.status_code == 422, reply.text
        assert says_what in detail_of(reply), detail_of(reply)
    count = await http.post("/runs/crons/count", json={"metadata": tag})
    assert count.json() == 0


@pytest.mark.parametrize("assistant_id", ["no_such_graph", "876acde7-4016-4c25-8737-a459aa1cf7e4"])
async def test_a_cron_for_an_unknown_assistant_is_a_404_and_nothing_is_written(
    http: httpx.AsyncClient, assistant_id: str
) -> None:
    """LangGraph Platform answers 404 here, a graph's name included (runs say 422 for one)."""
    tag = tagged()
    body = {"assistant_id": assistant_id, "schedule": YEARLY, "metadata": tag}
    thread_id = (await http.post("/threads", json={})).json()["thread_id"]
    for path in ("/runs/crons", f"/threads/{thread_id}/runs/crons"):
        reply = await http.post(path, json=body)
        assert reply.status_code == 404, reply.text
        assert assistant_id in detail_of(reply)
    count = await http.post("/runs/crons/count", json={"metadata": tag})
    assert count.json() == 0


async def test_refusals_that_are_not_422(http: httpx.AsyncClient) -> None:
    tag = tagged()
    body = {"assistant_id": "lead_agent", "schedule": YEARLY, "metadata": tag}
    missing = await http.post(f"/threads/{uuid.uuid4()}/runs/crons", json=body)
    assert missing.status_code == 404, missing.text
    thread = (await http.post("/threads", json={})).json()
    keep = await http.post(
        f"/threads/{thread['thread_id']}/runs/crons", json={**body, "on_run_completed": "keep"}
    )
    assert keep.status_code == 422 and "on_run_completed applies to crons without a thread" in (
        detail_of(keep)
    )
    assert (await http.post("/runs/crons/count", json={"metadata": tag})).json() == 0


async def test_a_bad_update_changes_nothing(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    tag = tagged()
    cron = await client.crons.create("lead_agent", schedule=YEARLY, metadata=tag)
    path = f"/runs/crons/{cron['cron_id']}"
    for body, says_what in [
        ({"schedule": "0 25 * * *"}, "not a valid cron expression"),
        ({"timezone": "Nowhere/Atall"}, "not an IANA time zone"),
        ({"schedule": "0 0 31 4 *"}, "never comes"),
        ({"end_time": past()}, "is in the past"),
        ({"input": says("x"), "schedule": "nope"}, "five fields"),
    ]:
        reply = await http.patch(path, json=body)
        assert reply.status_code == 422, reply.text
        assert says_what in detail_of(reply)
    unchanged = (await http.get(path)).json()
    assert unchanged == cron
    await client.crons.delete(cron["cron_id"])


# Embedded only: the scheduler's sleeping is the same code on Postgres, where
# tests/e2e/test_cron_scheduler.py fires crons on the simulated clock; a second variant
# here would start just after this one's minute and wait a whole one.
@pytest.mark.parametrize("stack", ["sqlite"], indirect=True)
@pytest.mark.timeout(150)
async def test_on_the_real_clock_a_cron_fires_at_the_next_minute(client: LangGraphClient) -> None:
    """The production path: no clock file, the scheduler sleeps until the due time."""
    cron = await client.crons.create(
        "lead_agent", schedule="* * * * *", input=says("on time"), on_run_completed="keep"
    )
    due = datetime.fromisoformat(cron["next_run_date"])
    found: list[dict[str, Any]] = []
    for _ in range(900):  # up to 90 s: the next whole minute, and some slack
        found = await client.threads.search(metadata={"cron_id": cron["cron_id"]})
        if found:
            break
        await asyncio.sleep(0.1)
    await client.crons.delete(cron["cron_id"])
    assert len(found) == 1, "the cron did not fire at its due minute"
    assert datetime.now(UTC) >= due
    thread_id = found[0]["thread_id"]
    [run] = await client.runs.list(thread_id)
    assert run["metadata"]["cron_due_at"] == due.isoformat()
    await client.runs.join(thread_id, run["run_id"])
    await client.threads.delete(thread_id)
