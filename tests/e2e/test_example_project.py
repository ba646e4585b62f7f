"""Bring your LangGraph project unchanged: `tests/fixtures/example_project` is shaped like a
real project (a `create_agent` graph with a tool and a dataclass context, built by a
factory that takes the server runtime; custom auth with owner filters; its own HTTP
route; a semantic store index with a local embedding function; a `.env`; and
packages of its own named `common` and `services`). Waybill serves it by pointing
`WAYBILL_GRAPHS` at its `langgraph.json`, nothing edited, on SQLite and on Postgres,
and the official SDK drives it."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import NotFoundError

from tests.support.openai_stub import OpenAIStub, running_openai_stub
from tests.support.paths import FIXTURES
from tests.support.stacks import stack_in_mode
from waybill.common.launch import Stack

EXAMPLE = FIXTURES / "example_project"
# Waybill's own key beside the project's auth: an operator's, past the project's handlers.
OPERATOR_KEY = "operator-key"
WEATHER = {"messages": [{"role": "user", "content": "/tool get_weather {}"}]}


@pytest.fixture(scope="module")
def stub() -> Iterator[OpenAIStub]:
    with running_openai_stub() as running:
        yield running


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def project(
    request: pytest.FixtureRequest, stub: OpenAIStub, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """The example project, copied as it is; only its `.env` names the local model."""
    root = tmp_path_factory.mktemp(f"example-{request.param}")
    (root / "data").mkdir()
    copy = root / "project"
    shutil.copytree(EXAMPLE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / ".env").write_text(f"OPENAI_BASE_URL={stub.base_url}\nOPENAI_API_KEY=stub-key\n")
    manifest = str(copy / "langgraph.json")
    extra = {"WAYBILL_GRAPHS": manifest, "WAYBILL_API_KEY": OPERATOR_KEY}
    with stack_in_mode(request.param, root / "data", **extra) as stack:
        yield stack


def user_client(stack: Stack, token: str) -> LangGraphClient:
    return get_client(url=stack.url, headers={"Authorization": f"Bearer {token}"}, timeout=30)


@pytest.fixture
async def alice(project: Stack) -> AsyncIterator[LangGraphClient]:
    client = user_client(project, "token-alice")
    yield client
    await client.aclose()


@pytest.fixture
async def bob(project: Stack) -> AsyncIterator[LangGraphClient]:
    client = user_client(project, "token-bob")
    yield client
    await client.aclose()


async def test_the_agent_runs_with_its_context_tool_and_own_packages(
    alice: LangGraphClient, stub: OpenAIStub
) -> None:
    thread = await alice.threads.create()
    result = await alice.runs.wait(
        thread["thread_id"], "weather_agent", input=WEATHER, context={"city": "Lyon"}
    )
    assert isinstance(result, dict), result
    messages = result["messages"]
    # The tool read the dataclass context as sent, through the project's own packages.
    assert [m["type"] for m in messages] == ["human", "ai", "tool", "ai"]
    assert messages[2]["content"] == "SUNNY IN LYON"
    assert messages[3]["content"] == "The tool said: SUNNY IN LYON"
    # The factory was given the server runtime, with the authenticated user.
    system = stub.requests[-1]["messages"][0]
    assert system == {"role": "system", "content": "You help alice with the weather."}
    state = await alice.threads.get_state(thread["thread_id"])
    assert state["values"]["messages"][-1]["content"] == "The tool said: SUNNY IN LYON"


async def test_the_graphs_description_reaches_its_assistant(
    project: Stack, alice: LangGraphClient
) -> None:
    # The owner filter covers assistants too, as on LangGraph Platform: the system
    # assistant has no owner, so a user's search does not list it; the operator's does.
    assert await alice.assistants.search(graph_id="weather_agent") == []
    operator = get_client(url=project.url, api_key=OPERATOR_KEY)
    [assistant] = await operator.assistants.search(graph_id="weather_agent")
    await operator.aclose()
    assert assistant["description"] == (
        "Answers weather questions with a tool, in the caller's city."
    )


async def test_the_owner_filter_keeps_two_users_apart(
    alice: LangGraphClient, bob: LangGraphClient
) -> None:
    thread = await alice.threads.create(metadata={"topic": "weather"})
    tid = thread["thread_id"]
    assert thread["metadata"] == {"topic": "weather", "owner": "alice"}
    run = await alice.runs.create(tid, "weather_agent", input=WEATHER)
    await alice.runs.join(tid, run["run_id"])

    for read in (
        bob.threads.get(tid),
        bob.threads.get_state(tid),
        bob.runs.get(tid, run["run_id"]),
        bob.runs.list(tid),
    ):
        with pytest.raises(NotFoundError):
            await read
    assert tid not in {t["thread_id"] for t in await bob.threads.search(limit=100)}
    assert tid in {t["thread_id"] for t in await alice.threads.search(limit=100)}
    with pytest.raises(NotFoundError):
        await bob.runs.create(tid, "weather_agent", input=WEATHER)


async def test_a_request_without_a_token_is_refused(project: Stack) -> None:
    async with httpx.AsyncClient(base_url=project.url) as http:
        reply = await http.post("/threads/search", json={})
    assert reply.status_code == 401
    assert "Invalid token" in reply.text


async def test_the_projects_own_route_is_served(project: Stack) -> None:
    async with httpx.AsyncClient(base_url=project.url) as http:
        reply = await http.get("/hello")
    assert reply.status_code == 200
    assert reply.json() == {"hello": "FROM THE PROJECT"}


async def test_the_store_ranks_by_meaning_within_the_users_namespace(
    alice: LangGraphClient, bob: LangGraphClient
) -> None:
    notes = ["alice", "notes"]
    await alice.store.put_item(notes, "weather", {"text": "sunny weather in lyon today"})
    await alice.store.put_item(notes, "shopping", {"text": "buy milk and bread"})
    found = await alice.store.search_items(["alice"], query="what is the weather in lyon")
    keys = [item["key"] for item in found["items"]]
    assert keys == ["weather", "shopping"]
    scores = [item["score"] for item in found["items"]]
    assert scores[0] > scores[1]
    mine = await bob.store.search_items(["bob"], query="weather")
    assert mine["items"] == []
    async with httpx.AsyncClient(base_url=str(bob.http.client.base_url)) as http:
        peek = await http.post(
            "/store/items/search",
            json={"namespace_prefix": ["alice"], "query": "weather"},
            headers={"Authorization": "Bearer token-bob"},
        )
    assert peek.status_code == 403
