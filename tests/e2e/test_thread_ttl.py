"""Threads' time-to-live (issue 39), as LangGraph Platform has it: the `ttl` of
threads.create / threads.update, validated as the reference's schema validates it
(`langgraph dev` 0.16.7 answers the same 422s and 200s), stored, read back with
`?include=ttl`, refreshed by an update and by a run, and swept by admission:
`delete` as DELETE /threads/{id}, `keep_latest` as the keep_latest prune. The
project's `checkpointer.ttl` (here `strategy: keep_latest`) gives threads a default.
Through langgraph-sdk and raw HTTP, on SQLite and on Postgres."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import NotFoundError

from tests.support.stacks import eventually, stack_in_mode
from waybill.common.launch import Stack

# One node adding 1 to `n`: every run leaves checkpoints (its input, its step).
COUNTER_PY = """
from typing import TypedDict

from langgraph.graph import END, START, StateGraph


class State(TypedDict, total=False):
    n: int


def count(state: State) -> State:
    return {"n": state.get("n", 0) + 1}


builder = StateGraph(State)
builder.add_node("count", count)
builder.add_edge(START, "count")
builder.add_edge("count", END)
graph = builder.compile()
"""

DEFAULT_MINUTES = 60  # checkpointer.ttl.default_ttl: no test waits for it
SWEEP_SECONDS = "0.3"  # WAYBILL_THREAD_TTL_SWEEP_SECONDS (no sweep_interval_minutes)
SHORT = 0.01  # minutes (0.6 s): expired by the next sweeps


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("ttl-project")
    (root / "counter.py").write_text(COUNTER_PY)
    manifest = root / "langgraph.json"
    project = {
        "graphs": {"counter": "./counter.py:graph"},
        "checkpointer": {"ttl": {"strategy": "keep_latest", "default_ttl": DEFAULT_MINUTES}},
    }
    manifest.write_text(json.dumps(project))
    data_dir = tmp_path_factory.mktemp(f"stack-ttl-{request.param}")
    env = {"WAYBILL_GRAPHS": str(manifest), "WAYBILL_THREAD_TTL_SWEEP_SECONDS": SWEEP_SECONDS}
    with stack_in_mode(request.param, data_dir, **env) as running:
        yield running


@pytest.fixture
async def sdk(stack: Stack) -> AsyncIterator[LangGraphClient]:
    client = get_client(url=stack.url, timeout=30)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def http(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=stack.url, timeout=30) as client:
        yield client


def moment(text: str) -> datetime:
    return datetime.fromisoformat(text)


async def ttl_of(sdk: LangGraphClient, thread_id: str) -> dict[str, Any]:
    thread = await sdk.threads.get(thread_id, include=["ttl"])
    return dict(thread["ttl"])  # type: ignore[typeddict-item]


# ---- validation: the reference's schema (`langgraph dev` answers the same) ------------

# Each refused with 422 by the reference: where the error is, and what Waybill says.
BAD_TTLS: list[tuple[Any, list[str], str]] = [
    ({"strategy": "archive", "ttl": 5}, ["body", "ttl", "strategy"], "'delete' or 'keep_latest'"),
    ({"strategy": "DELETE", "ttl": 5}, ["body", "ttl", "strategy"], "'delete' or 'keep_latest'"),
    ({"strategy": None, "ttl": 5}, ["body", "ttl", "strategy"], "must not be null"),
    ({"ttl": "5"}, ["body", "ttl", "ttl"], "a valid number"),
    ({"ttl": True}, ["body", "ttl", "ttl"], "a valid number"),
    ({"ttl": None}, ["body", "ttl", "ttl"], "must not be null"),
    (5, ["body", "ttl"], "a valid dictionary"),
    ("5", ["body", "ttl"], "a valid dictionary"),
    ([5], ["body", "ttl"], "a valid dictionary"),
    (None, ["body", "ttl"], "must not be null"),
]


def said(reply: httpx.Response) -> tuple[list[str], str]:
    assert reply.status_code == 422, reply.text
    (error,) = reply.json()["detail"]
    return error["loc"], error["msg"]


@pytest.mark.parametrize(("ttl", "where", "message"), BAD_TTLS)
async def test_a_bad_ttl_is_refused_and_nothing_is_written(
    http: httpx.AsyncClient, ttl: Any, where: list[str], message: str
) -> None:
    marker = {"bad_ttl_probe": json.dumps(ttl)}
    created = await http.post("/threads", json={"metadata": marker, "ttl": ttl})
    loc, msg = said(created)
    assert loc == where and message in msg, (loc, msg)
    found = await http.post("/threads/search", json={"metadata": marker})
    assert found.json() == []  # no thread was created

    thread = (await http.post("/threads", json={"metadata": {"kept": 1}})).json()
    path = f"/threads/{thread['thread_id']}"
    patched = await http.patch(path, json={"metadata": {"kept": 2}, "ttl": ttl})
    loc, msg = said(patched)
    assert loc == where and message in msg, (loc, msg)
    after = (await http.get(path, params={"include": "ttl"})).json()
    assert after["metadata"]["kept"] == 1  # the metadata of a refused update is not merged
    assert after["ttl"]["ttl_minutes"] == DEFAULT_MINUTES  # nor its TTL


@pytest.mark.parametrize(
    ("ttl", "strategy", "minutes"),
    [
        ({"strategy": "delete", "ttl": 5}, "delete", 5),
        ({"strategy": "keep_latest", "ttl": 0.5}, "keep_latest", 0.5),
        ({"ttl": 5, "unknown": 1}, "delete", 5),  # unknown keys are ignored, as there
        ({"strategy": "delete"}, "delete", DEFAULT_MINUTES),  # minutes: the default's
        ({}, "delete", DEFAULT_MINUTES),
        ({"ttl": 1e300}, "delete", 1e300),  # never expires
    ],
)
async def test_a_good_ttl_is_stored_and_read_back(
    http: httpx.AsyncClient, ttl: dict[str, Any], strategy: str, minutes: float
) -> None:
    created = await http.post("/threads", json={"ttl": ttl})
    assert created.status_code == 200, created.text
    thread = created.json()
    assert "ttl" not in thread  # only with ?include=ttl, as LangGraph Platform
    read = (await http.get(f"/threads/{thread['thread_id']}", params={"include": "ttl"})).json()
    assert read["ttl"]["strategy"] == strategy
    assert read["ttl"]["ttl_minutes"] == minutes
    if minutes > 1e9:
        assert read["ttl"]["expires_at"] is None
    else:
        expires = moment(read["ttl"]["expires_at"]) - moment(thread["created_at"])
        assert abs(expires - timedelta(minutes=minutes)) < timedelta(seconds=2)


async def test_non_finite_minutes_are_refused(http: httpx.AsyncClient) -> None:
    """1e999 parses as infinity in Python's JSON (the reference: invalid JSON, 422)."""
    reply = await http.post(
        "/threads", content=b'{"ttl": {"ttl": 1e999}}', headers={"content-type": "application/json"}
    )
    assert reply.status_code == 422, reply.text
    assert reply.json()["detail"][0]["loc"] == ["body", "ttl", "ttl"]


# ---- stored, read back, refreshed ----------------------------------------------------------


async def test_the_sdks_ttl_forms_are_stored_and_read_back(sdk: LangGraphClient) -> None:
    by_minutes = await sdk.threads.create(ttl=30)  # the SDK sends {"ttl": 30, "strategy": "delete"}
    ttl = await ttl_of(sdk, by_minutes["thread_id"])
    assert (ttl["strategy"], ttl["ttl_minutes"]) == ("delete", 30)
    expires = moment(ttl["expires_at"]) - moment(by_minutes["created_at"])
    assert abs(expires - timedelta(minutes=30)) < timedelta(seconds=2)

    by_mapping = await sdk.threads.create(ttl={"strategy": "keep_latest", "ttl": 45})
    ttl = await ttl_of(sdk, by_mapping["thread_id"])
    assert (ttl["strategy"], ttl["ttl_minutes"]) == ("keep_latest", 45)

    plain = await sdk.threads.create()  # the project's checkpointer.ttl default
    ttl = await ttl_of(sdk, plain["thread_id"])
    assert (ttl["strategy"], ttl["ttl_minutes"]) == ("keep_latest", DEFAULT_MINUTES)
    assert "ttl" not in await sdk.threads.get(plain["thread_id"])


async def test_an_update_and_a_run_refresh_the_ttl(sdk: LangGraphClient) -> None:
    thread = await sdk.threads.create(ttl={"strategy": "delete", "ttl": 30})
    thread_id = thread["thread_id"]
    first = moment((await ttl_of(sdk, thread_id))["expires_at"])

    await asyncio.sleep(0.2)
    await sdk.threads.update(thread_id, metadata={"touched": 1})  # no ttl: refreshed
    refreshed = await ttl_of(sdk, thread_id)
    assert (refreshed["strategy"], refreshed["ttl_minutes"]) == ("delete", 30)
    assert moment(refreshed["expires_at"]) > first

    await asyncio.sleep(0.2)
    await sdk.runs.wait(thread_id, "counter", input={})
    after_run = await ttl_of(sdk, thread_id)
    assert moment(after_run["expires_at"]) > moment(refreshed["expires_at"])

    updated = await sdk.threads.update(thread_id, metadata={}, ttl=10)  # a new TTL replaces it
    replaced = await ttl_of(sdk, thread_id)
    assert (replaced["strategy"], replaced["ttl_minutes"]) == ("delete", 10)
    expires = moment(replaced["expires_at"]) - moment(updated["updated_at"])
    assert abs(expires - timedelta(minutes=10)) < timedelta(seconds=2)


async def test_a_run_that_creates_its_thread_gives_it_the_default(sdk: LangGraphClient) -> None:
    thread_id = str(uuid.uuid4())
    await sdk.runs.wait(thread_id, "counter", input={}, if_not_exists="create")
    ttl = await ttl_of(sdk, thread_id)
    assert (ttl["strategy"], ttl["ttl_minutes"]) == ("keep_latest", DEFAULT_MINUTES)


# ---- swept ----------------------------------------------------------------------------------


async def test_delete_removes_the_expired_thread_with_its_runs_and_state(
    sdk: LangGraphClient,
) -> None:
    kept = await sdk.threads.create(ttl={"strategy": "delete", "ttl": 30})
    thread = await sdk.threads.create(ttl={"strategy": "delete", "ttl": 30})
    thread_id = thread["thread_id"]
    run = await sdk.runs.create(thread_id, "counter", input={})
    await sdk.runs.join(thread_id, run["run_id"])
    assert (await sdk.threads.get_state(thread_id))["values"] == {"n": 1}
    await sdk.threads.update(thread_id, metadata={}, ttl={"strategy": "delete", "ttl": SHORT})

    async def gone() -> bool:
        return not await sdk.threads.search(ids=[thread_id])

    await eventually(gone, "the expired thread is deleted")
    with pytest.raises(NotFoundError):
        await sdk.threads.get_state(thread_id)
    with pytest.raises(NotFoundError):
        await sdk.runs.get(thread_id, run["run_id"])
    # Its checkpoints went with it: a thread made again under its id starts empty.
    await sdk.threads.create(thread_id=thread_id)
    assert not (await sdk.threads.get_state(thread_id))["values"]
    assert await sdk.threads.get_history(thread_id) == []
    assert await sdk.threads.get(kept["thread_id"])  # an unexpired one stays


async def test_keep_latest_keeps_the_thread_and_only_its_latest_checkpoint(
    sdk: LangGraphClient,
) -> None:
    thread = await sdk.threads.create(ttl={"strategy": "keep_latest", "ttl": 30})
    thread_id = thread["thread_id"]
    for _ in range(3):
        await sdk.runs.wait(thread_id, "counter", input={})
    assert len(await sdk.threads.get_history(thread_id, limit=100)) > 1
    await sdk.threads.update(thread_id, metadata={}, ttl={"strategy": "keep_latest", "ttl": SHORT})

    async def pruned() -> bool:
        return len(await sdk.threads.get_history(thread_id, limit=100)) == 1

    await eventually(pruned, "the expired thread keeps only its latest checkpoint")
    assert (await sdk.threads.get_state(thread_id))["values"] == {"n": 3}
    ttl = await ttl_of(sdk, thread_id)
    assert (ttl["strategy"], ttl["ttl_minutes"], ttl["expires_at"]) == ("keep_latest", SHORT, None)

    # The next run goes on from the kept state, and arms the TTL again.
    await sdk.threads.update(thread_id, metadata={}, ttl={"strategy": "keep_latest", "ttl": 30})
    await sdk.runs.wait(thread_id, "counter", input={})
    assert (await sdk.threads.get_state(thread_id))["values"] == {"n": 4}
    assert (await ttl_of(sdk, thread_id))["expires_at"] is not None


async def test_a_thread_refreshed_in_time_is_not_swept(sdk: LangGraphClient) -> None:
    """Updated every 0.3 s, a thread with a 1.2 s TTL outlives several of them."""
    thread = await sdk.threads.create(ttl={"strategy": "delete", "ttl": 0.02})
    thread_id = thread["thread_id"]
    for _ in range(12):  # 3.6 s: three TTLs
        await asyncio.sleep(0.3)
        await sdk.threads.update(thread_id, metadata={})
    assert await sdk.threads.get(thread_id)

    async def gone() -> bool:
        return not await sdk.threads.search(ids=[thread_id])

    await eventually(gone, "once left alone, it expires")
