"""The `store` key of langgraph.json: semantic search (`store.index`) and item
expiry (`store.ttl`), through langgraph-sdk, on SQLite (sqlite-vec) and on Postgres
(pgvector where installed, else Waybill's in-Python ranking)."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import NotFoundError

from tests.support.openai_stub import EMBEDDING_DIMS, OpenAIStub, running_openai_stub
from tests.support.stacks import eventually, stack_env, stack_in_mode
from waybill.common.launch import Stack

DIMS = 256

# A bag of words hashed into DIMS counts: texts sharing words are similar.
EMBED_PY = f"""
import hashlib

def embed(texts):
    vectors = []
    for text in texts:
        vector = [0.0] * {DIMS}
        for word in text.lower().replace('"', " ").replace(",", " ").split():
            vector[int(hashlib.md5(word.encode()).hexdigest(), 16) % {DIMS}] += 1.0
        vectors.append(vector)
    return vectors
"""

# A graph that writes to and searches the run's store (its owner's namespaces).
LIBRARIAN_PY = """
from typing import TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime


class State(TypedDict, total=False):
    key: str
    text: str
    query: str
    found: list


async def shelve_and_search(state: State, runtime: Runtime) -> State:
    await runtime.store.aput(("shelf",), state["key"], {"text": state["text"]})
    found = await runtime.store.asearch(("shelf",), query=state["query"], limit=5)
    return {"found": [[item.key, item.score] for item in found]}


builder = StateGraph(State)
builder.add_node("shelve_and_search", shelve_and_search)
builder.add_edge(START, "shelve_and_search")
builder.add_edge("shelve_and_search", END)
graph = builder.compile()
"""

STORE = {
    "index": {"embed": "./embed.py:embed", "dims": DIMS, "fields": ["text"]},
    # No default TTL: only items put with `ttl` expire; swept every 0.6 s.
    "ttl": {"refresh_on_read": True, "sweep_interval_minutes": 0.01},
}


def write_project(root: Path, store: Any) -> Path:
    (root / "embed.py").write_text(textwrap.dedent(EMBED_PY))
    (root / "librarian.py").write_text(textwrap.dedent(LIBRARIAN_PY))
    manifest = root / "langgraph.json"
    graphs = {"librarian": "./librarian.py:graph"}
    project: dict[str, Any] = {"graphs": graphs}
    if store is not None:
        project["store"] = store
    manifest.write_text(json.dumps(project))
    return manifest


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    manifest = write_project(tmp_path_factory.mktemp("project"), STORE)
    data_dir = tmp_path_factory.mktemp(f"stack-store-{request.param}")
    with stack_in_mode(request.param, data_dir, WAYBILL_GRAPHS=str(manifest)) as running:
        yield running


def fresh(name: str) -> list[str]:
    """A namespace no other test (or mode) of this module uses."""
    return [name, str(time.monotonic_ns())]


async def test_query_ranks_items_by_similarity(client: LangGraphClient) -> None:
    space = fresh("animals")
    await client.store.put_item(space, "a", {"text": "cats purr and chase mice"})
    await client.store.put_item(space, "b", {"text": "stock markets fell sharply today"})
    await client.store.put_item(space, "c", {"text": "my cats sleep all day long"})

    found = (await client.store.search_items(space, query="cats sleep all day"))["items"]

    assert [item["key"] for item in found] == ["c", "a", "b"]
    scores = [item["score"] for item in found]
    assert scores == sorted(scores, reverse=True)
    assert scores[0] > scores[1] > 0 and scores[2] == pytest.approx(0)

    # filter, limit and offset still apply to a query search
    page = await client.store.search_items(space, query="cats sleep all day", limit=1, offset=1)
    assert [item["key"] for item in page["items"]] == ["a"]
    await client.store.put_item(space, "d", {"text": "cats", "kind": "short"})
    short = await client.store.search_items(space, query="cats", filter={"kind": "short"})
    assert [item["key"] for item in short["items"]] == ["d"]


async def test_only_the_configured_fields_are_embedded(client: LangGraphClient) -> None:
    space = fresh("fields")
    await client.store.put_item(space, "titled", {"text": "weather report", "title": "cats"})
    await client.store.put_item(space, "texted", {"text": "cats everywhere", "title": "x"})

    found = (await client.store.search_items(space, query="cats"))["items"]
    assert [item["key"] for item in found] == ["texted", "titled"]
    assert found[1]["score"] == pytest.approx(0)  # its title was not embedded

    # a put's own `index` paths replace the configured fields for that item
    await client.store.put_item(
        space, "titled", {"text": "weather", "title": "cats"}, index=["title"]
    )
    found = (await client.store.search_items(space, query="cats"))["items"]
    assert found[0]["key"] == "titled" and found[0]["score"] > 0.9


async def test_an_item_put_with_index_false_is_not_found_by_a_query(
    client: LangGraphClient,
) -> None:
    space = fresh("unindexed")
    await client.store.put_item(space, "seen", {"text": "cats"})
    await client.store.put_item(space, "hidden", {"text": "cats"}, index=False)

    by_query = await client.store.search_items(space, query="cats")
    assert [item["key"] for item in by_query["items"]] == ["seen"]
    plain = await client.store.search_items(space)
    assert {item["key"] for item in plain["items"]} == {"seen", "hidden"}


async def test_a_graph_puts_and_searches_with_the_index(client: LangGraphClient) -> None:
    thread = await client.threads.create()
    await client.store.put_item(["shelf"], "old", {"text": "stock markets fell"})
    result = await client.runs.wait(
        thread["thread_id"],
        "librarian",
        input={"key": "new", "text": "cats chase mice", "query": "cats and mice"},
    )
    assert isinstance(result, dict)
    keys = [key for key, _ in result["found"]]
    assert keys[0] == "new" and "old" in keys
    assert result["found"][0][1] > result["found"][-1][1]

    # the API's query search sees what the run indexed (same owner, same store)
    found = await client.store.search_items(["shelf"], query="mice")
    assert found["items"][0]["key"] == "new"


async def expires_at(stack: Stack, space: list[str], key: str) -> Any:
    """An item's expiry as LangGraph's store row has it (its own namespace's row)."""
    suffix = "%." + ".".join(space)
    query = "SELECT expires_at FROM store WHERE key = {0} AND prefix LIKE {0}"
    url = stack.env.get("WAYBILL_DATABASE_URL")
    if url is None:
        path = Path(stack.env["WAYBILL_DATA_DIR"]) / "store.db"
        with sqlite3.connect(path) as connection:
            return connection.execute(query.format("?"), (key, suffix)).fetchone()[0]
    url = url.replace("postgresql+asyncpg://", "postgresql://")
    async with await psycopg.AsyncConnection.connect(url) as connection:
        cursor = await connection.execute(query.format("%s"), (key, suffix))
        row = await cursor.fetchone()
        assert row is not None
        return row[0]


async def test_reads_refresh_an_items_ttl(stack: Stack, client: LangGraphClient) -> None:
    # Whole minutes: LangGraph's Postgres store keeps `ttl_minutes` as an integer.
    space = fresh("refresh")
    await client.store.put_item(space, "read", {"text": "kept alive"}, ttl=1)
    first = await expires_at(stack, space, "read")

    await asyncio.sleep(1.1)
    await client.store.get_item(space, "read", refresh_ttl=False)
    assert await expires_at(stack, space, "read") == first
    await client.store.get_item(space, "read")  # refresh_on_read: true
    refreshed = await expires_at(stack, space, "read")
    assert refreshed > first

    await asyncio.sleep(1.1)
    found = await client.store.search_items(space, query="kept alive")
    assert [item["key"] for item in found["items"]] == ["read"]
    assert await expires_at(stack, space, "read") > refreshed


async def test_items_expire(client: LangGraphClient) -> None:
    space = fresh("expiry")
    await client.store.put_item(space, "brief", {"text": "gone soon"}, ttl=0.05)  # 3 s
    await client.store.put_item(space, "forever", {"text": "no ttl"})

    async def brief_gone() -> bool:
        found = await client.store.search_items(space, refresh_ttl=False)
        return "brief" not in {item["key"] for item in found["items"]}

    await eventually(brief_gone, "the item put with a ttl is swept")
    found = await client.store.search_items(space)
    assert [item["key"] for item in found["items"]] == ["forever"]
    by_query = await client.store.search_items(space, query="gone soon")
    assert [item["key"] for item in by_query["items"]] == ["forever"]


async def test_a_bad_index_or_ttl_is_refused_and_nothing_is_written(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=30) as http:
        bad = await http.put(
            "/store/items", json={"namespace": ["x"], "key": "k", "value": {}, "index": "text"}
        )
        assert bad.status_code == 422
        bad = await http.put(
            "/store/items", json={"namespace": ["x"], "key": "k", "value": {}, "ttl": -1}
        )
        assert bad.status_code == 422
        missing = await http.get("/store/items", params={"namespace": "x", "key": "k"})
        assert (missing.status_code, missing.json()) == (200, None)


# ---- broken configs stop start-up with the reason ------------------------------------


def start_up_output(tmp_path: Path, store: Any) -> tuple[int, str]:
    """Run the deploy's first step (the migrations, which open the store) on the project."""
    manifest = write_project(tmp_path, store)
    env = stack_env(tmp_path / "data", WAYBILL_GRAPHS=str(manifest))
    done = subprocess.run(
        [sys.executable, "-P", "-m", "waybill.common.migrate"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("index", "reason"),
    [
        ({"embed": "./embed.py:embed"}, "store.index.dims: Field required"),
        ({"embed": "./nowhere.py:embed", "dims": 4}, "store.index.embed './nowhere.py:embed'"),
        ({"embed": "./embed.py:missing", "dims": 4}, "store.index.embed './embed.py:missing'"),
        ({"embed": "cohere:embed-english-v3.0", "dims": 4}, "pip install langchain"),
    ],
)
def test_a_broken_index_stops_start_up(tmp_path: Path, index: Any, reason: str) -> None:
    code, output = start_up_output(tmp_path, {"index": index})
    assert code != 0
    assert reason in output


def test_a_runner_does_not_start_on_a_broken_index(tmp_path: Path) -> None:
    code, output = start_up_output(tmp_path, STORE)  # migrated with a good index
    assert code == 0, output
    write_project(tmp_path, {"index": {"embed": "./embed.py:embed", "dims": 0}})
    env = stack_env(tmp_path / "data", WAYBILL_GRAPHS=str(tmp_path / "langgraph.json"))
    done = subprocess.run(
        [sys.executable, "-P", "-m", "waybill.services.runner.server"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "store.index.dims: a positive integer is required (got 0)" in done.stderr


def test_a_broken_ttl_stops_start_up(tmp_path: Path) -> None:
    code, output = start_up_output(tmp_path, {"ttl": {"default_ttl": "soon"}})
    assert code != 0
    assert "store.ttl.default_ttl: Input should be a valid number" in output


# ---- checkpointer.ttl: threads expire ------------------------------------------------


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def expiring_stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """Threads idle for 3 s are deleted, and store items 3 s old; sweeps every 0.6 s."""
    root = tmp_path_factory.mktemp("expiring-project")
    manifest = write_project(root, STORE)
    project = json.loads(manifest.read_text())
    project["store"]["ttl"]["default_ttl"] = 0.05  # and items put without a ttl: 3 s
    project["checkpointer"] = {
        "ttl": {"strategy": "delete", "default_ttl": 0.05, "sweep_interval_minutes": 0.01}
    }
    manifest.write_text(json.dumps(project))
    data_dir = tmp_path_factory.mktemp(f"stack-expiring-{request.param}")
    with stack_in_mode(request.param, data_dir, WAYBILL_GRAPHS=str(manifest)) as running:
        yield running


async def test_an_idle_thread_is_deleted_with_its_state(expiring_stack: Stack) -> None:
    sdk = get_client(url=expiring_stack.url, timeout=30)
    try:
        thread = await sdk.threads.create()
        thread_id = thread["thread_id"]
        await sdk.runs.wait(
            thread_id, "librarian", input={"key": "k", "text": "cats", "query": "cats"}
        )
        found = (await sdk.threads.get_state(thread_id))["values"]["found"]
        assert found[0][0] == "k"  # the item the run put, found by its own text

        async def thread_gone() -> bool:
            return not await sdk.threads.search(ids=[thread_id])

        await eventually(thread_gone, "the idle thread is deleted")
        with pytest.raises(NotFoundError):
            await sdk.threads.get_state(thread_id)
    finally:
        await sdk.aclose()


async def test_store_items_expire_after_the_default_ttl(expiring_stack: Stack) -> None:
    sdk = get_client(url=expiring_stack.url, timeout=30)
    try:
        space = fresh("default-ttl")
        await sdk.store.put_item(space, "plain", {"text": "no ttl of its own"})
        await sdk.store.put_item(space, "kept", {"text": "kept"}, ttl=5)

        async def plain_gone() -> bool:
            found = await sdk.store.search_items(space, refresh_ttl=False)
            return "plain" not in {item["key"] for item in found["items"]}

        await eventually(plain_gone, "an item put without a ttl expires after default_ttl")
        found = await sdk.store.search_items(space, refresh_ttl=False)
        assert [item["key"] for item in found["items"]] == ["kept"]
    finally:
        await sdk.aclose()


def test_a_broken_checkpointer_ttl_stops_admission(tmp_path: Path) -> None:
    """An unknown strategy (`keep_latest` is known since issue 39: test_thread_ttl.py)."""
    manifest = write_project(tmp_path, None)
    project = json.loads(manifest.read_text())
    project["checkpointer"] = {"ttl": {"strategy": "archive"}}
    manifest.write_text(json.dumps(project))
    env = stack_env(tmp_path / "data", WAYBILL_GRAPHS=str(manifest))
    done = subprocess.run(
        [sys.executable, "-P", "-m", "waybill.services.admission.server"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 4
    assert "checkpointer.ttl.strategy: Input should be 'delete' or 'keep_latest'" in done.stderr


# ---- a provider string: `openai:` through langchain-openai, on the local stub ------------


@pytest.fixture(scope="module")
def stub() -> Iterator[OpenAIStub]:
    with running_openai_stub() as served:
        yield served


@pytest.fixture(scope="module")
def openai_stack(stub: OpenAIStub, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    index = {"embed": "openai:text-embedding-3-small", "dims": EMBEDDING_DIMS}
    manifest = write_project(tmp_path_factory.mktemp("openai-project"), {"index": index})
    data_dir = tmp_path_factory.mktemp("stack-openai")
    env = {
        "WAYBILL_GRAPHS": str(manifest),
        "OPENAI_BASE_URL": stub.base_url,
        "OPENAI_API_KEY": "stub-key",
    }
    with stack_in_mode("sqlite", data_dir, **env) as running:
        yield running


async def test_an_openai_provider_string_embeds_through_the_api(
    openai_stack: Stack, stub: OpenAIStub
) -> None:
    sdk = get_client(url=openai_stack.url, timeout=30)
    try:
        await sdk.store.put_item(["docs"], "a", {"text": "cats purr"})
        await sdk.store.put_item(["docs"], "b", {"text": "markets fell"})
        found = await sdk.store.search_items(["docs"], query="purr")
    finally:
        await sdk.aclose()
    assert [item["key"] for item in found["items"]] == ["a", "b"]
    assert found["items"][0]["score"] > found["items"][1]["score"]
    assert "purr" in stub.embedded  # the query went to the provider too


# ---- without `store`: no index, no expiry, and the API says so ---------------------------


@pytest.fixture(scope="module")
def plain_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    manifest = write_project(tmp_path_factory.mktemp("plain-project"), None)
    data_dir = tmp_path_factory.mktemp("stack-plain")
    with stack_in_mode("sqlite", data_dir, WAYBILL_GRAPHS=str(manifest)) as running:
        yield running


async def test_without_a_store_section_query_index_and_ttl_are_refused(plain_stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=plain_stack.url, timeout=30) as http:
        search = await http.post("/store/items/search", json={"query": "cats"})
        assert search.status_code == 422
        assert "store.index" in search.text
        item = {"namespace": ["x"], "key": "k", "value": {"text": "cats"}}
        for extra in ({"index": ["text"]}, {"ttl": 5}):
            refused = await http.put("/store/items", json={**item, **extra})
            assert refused.status_code == 422
        missing = await http.get("/store/items", params={"namespace": "x", "key": "k"})
        assert (missing.status_code, missing.json()) == (200, None)  # nothing half-written
        assert (await http.put("/store/items", json={**item, "index": False})).status_code == 204
