"""Assistants: a graph with default config and context, versioned, as LangGraph
Platform serves them to `client.assistants.*` (create, get, update, versions,
set_latest, search, count, delete), and runs that take their defaults."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import ConflictError, NotFoundError

from tests.support.helpers import says
from waybill.common.codec import system_assistant_id

# lead_agent and tests/fixtures/graphs/langgraph.json's graphs.
SYSTEM_GRAPHS = {
    "lead_agent",
    "nested",
    "approval",
    "memory",
    "configured",
    "whoami",
    "recall",
    "shaped",
    "dispatch",
}


@pytest.fixture
async def suite(client: LangGraphClient) -> AsyncIterator[dict[str, str]]:
    """Metadata that marks this test's assistants; they are deleted afterwards, so
    other tests' searches see only the system assistants."""
    mark = {"suite": uuid.uuid4().hex}
    yield mark
    for assistant in await client.assistants.search(metadata=mark, limit=1000):
        await client.assistants.delete(assistant["assistant_id"])


async def run_configured(
    client: LangGraphClient, assistant_id: str, **overrides: Any
) -> dict[str, Any]:
    """Run the `configured` graph by `assistant_id`; what it saw of config and context."""
    thread = await client.threads.create()
    result = await client.runs.wait(
        thread["thread_id"], assistant_id, input={"keys": ["tone", "level"]}, **overrides
    )
    assert isinstance(result, dict)
    return result


async def test_create_get_update_versions_and_set_latest(
    client: LangGraphClient, suite: dict[str, str]
) -> None:
    created = await client.assistants.create(
        "configured",
        config={"configurable": {"tone": "formal"}, "recursion_limit": 7},
        metadata=suite,
        name="Formal",
        description="answers formally",
    )
    assert str(uuid.UUID(created["assistant_id"])) == created["assistant_id"]
    assert created["graph_id"] == "configured"
    assert (created["name"], created["description"]) == ("Formal", "answers formally")
    assert created["version"] == 1
    assert created["config"] == {"configurable": {"tone": "formal"}, "recursion_limit": 7}
    assert created["context"] == {"tone": "formal"}  # configurable and context mirror
    assert created["metadata"] == suite
    assert created["created_at"] == created["updated_at"]
    assert await client.assistants.get(created["assistant_id"]) == created

    updated = await client.assistants.update(
        created["assistant_id"], context={"tone": "casual"}, metadata={"stage": "two"}
    )
    assert updated["version"] == 2
    assert updated["context"] == {"tone": "casual"}
    assert updated["config"] == {"configurable": {"tone": "casual"}}
    assert updated["metadata"] == {**suite, "stage": "two"}  # merged
    assert (updated["name"], updated["description"]) == ("Formal", "answers formally")
    assert updated["created_at"] == created["created_at"]
    assert updated["updated_at"] > created["updated_at"]
    assert await client.assistants.get(created["assistant_id"]) == updated

    versions = await client.assistants.get_versions(created["assistant_id"])
    assert [v["version"] for v in versions] == [2, 1]  # newest first
    assert [v["context"] for v in versions] == [{"tone": "casual"}, {"tone": "formal"}]
    assert all("updated_at" not in v for v in versions)
    staged = await client.assistants.get_versions(
        created["assistant_id"], metadata={"stage": "two"}
    )
    assert [v["version"] for v in staged] == [2]
    second_page = await client.assistants.get_versions(created["assistant_id"], limit=1, offset=1)
    assert [v["version"] for v in second_page] == [1]

    back = await client.assistants.set_latest(created["assistant_id"], 1)
    assert back["version"] == 1
    assert back["context"] == {"tone": "formal"} and back["metadata"] == suite
    assert back["config"] == created["config"]
    assert (await client.assistants.get(created["assistant_id"]))["version"] == 1

    # A patch after going back is the highest version so far + 1.
    third = await client.assistants.update(created["assistant_id"], name="Formal again")
    assert third["version"] == 3
    assert third["context"] == {"tone": "formal"}  # patched from version 1
    assert len(await client.assistants.get_versions(created["assistant_id"])) == 3


async def test_delete_removes_the_assistant_and_its_versions(
    client: LangGraphClient, http: httpx.AsyncClient, suite: dict[str, str]
) -> None:
    created = await client.assistants.create("configured", metadata=suite)
    await client.assistants.update(created["assistant_id"], metadata={"n": 2})
    reply = await http.delete(f"/assistants/{created['assistant_id']}")
    assert reply.status_code == 204
    with pytest.raises(NotFoundError):
        await client.assistants.get(created["assistant_id"])
    reply = await http.post(f"/assistants/{created['assistant_id']}/versions", json={})
    assert reply.status_code == 404
    reply = await http.delete(f"/assistants/{created['assistant_id']}")
    assert reply.status_code == 404
    assert "not found" in reply.json()["detail"]
    assert await client.assistants.count(metadata=suite) == 0


async def test_duplicate_create_is_409_unless_do_nothing(
    client: LangGraphClient, suite: dict[str, str]
) -> None:
    assistant_id = str(uuid.uuid4())
    first = await client.assistants.create(
        "configured", assistant_id=assistant_id, metadata=suite, name="first"
    )
    with pytest.raises(ConflictError) as refusal:
        await client.assistants.create(
            "configured", assistant_id=assistant_id, metadata=suite, name="second"
        )
    assert refusal.value.status_code == 409
    assert assistant_id in refusal.value.message
    again = await client.assistants.create(
        "nested", assistant_id=assistant_id, if_exists="do_nothing", name="second"
    )
    assert again == first  # the existing assistant, unchanged
    assert len(await client.assistants.get_versions(assistant_id)) == 1

    with pytest.raises(ConflictError):  # a system assistant's id is taken too
        await client.assistants.create("configured", assistant_id=system_assistant_id("nested"))


async def test_concurrent_writes_each_get_their_own_outcome(
    client: LangGraphClient, suite: dict[str, str]
) -> None:
    assistant = await client.assistants.create("configured", metadata=suite)
    patched = await asyncio.gather(
        *(client.assistants.update(assistant["assistant_id"], metadata={"n": n}) for n in range(8))
    )
    assert sorted(p["version"] for p in patched) == list(range(2, 10))
    versions = await client.assistants.get_versions(assistant["assistant_id"], limit=100)
    assert [v["version"] for v in versions] == list(range(9, 0, -1))

    # Racing creates of one id: one wins, the others are told it exists.
    assistant_id = str(uuid.uuid4())
    outcomes = await asyncio.gather(
        *(
            client.assistants.create("configured", assistant_id=assistant_id, metadata=suite)
            for _ in range(6)
        ),
        return_exceptions=True,
    )
    assert sum(isinstance(o, dict) for o in outcomes) == 1
    assert all(isinstance(o, ConflictError) for o in outcomes if not isinstance(o, dict))


async def test_search_and_count(client: LangGraphClient, suite: dict[str, str]) -> None:
    alpha = await client.assistants.create("configured", metadata=suite, name="Alpha One")
    beta = await client.assistants.create("nested", metadata={**suite, "team": "b"}, name="beta")
    gamma = await client.assistants.create("configured", metadata=suite, name="the ALPHA two")

    found = await client.assistants.search(metadata=suite)
    assert [a["assistant_id"] for a in found] == [
        gamma["assistant_id"],
        beta["assistant_id"],
        alpha["assistant_id"],
    ]  # newest first by default
    assert found[0] == gamma
    assert await client.assistants.count(metadata=suite) == 3

    by_graph = await client.assistants.search(metadata=suite, graph_id="nested")
    assert [a["assistant_id"] for a in by_graph] == [beta["assistant_id"]]
    assert await client.assistants.count(metadata=suite, graph_id="configured") == 2
    by_team = await client.assistants.search(metadata={**suite, "team": "b"})
    assert [a["assistant_id"] for a in by_team] == [beta["assistant_id"]]

    named = await client.assistants.search(metadata=suite, name="alpha", sort_by="name")
    assert [a["name"] for a in named] == ["the ALPHA two", "Alpha One"]  # desc, ignoring case
    assert await client.assistants.count(metadata=suite, name="ALPHA") == 2
    by_name = await client.assistants.search(metadata=suite, sort_by="name", sort_order="asc")
    assert [a["name"] for a in by_name] == ["Alpha One", "beta", "the ALPHA two"]

    page = await client.assistants.search(
        metadata=suite, sort_by="name", sort_order="asc", limit=2, response_format="object"
    )
    assert [a["name"] for a in page["assistants"]] == ["Alpha One", "beta"]
    assert page["next"] == "2"
    last = await client.assistants.search(
        metadata=suite,
        sort_by="name",
        sort_order="asc",
        limit=2,
        offset=2,
        response_format="object",
    )
    assert [a["name"] for a in last["assistants"]] == ["the ALPHA two"]
    assert last["next"] is None

    picked = await client.assistants.search(
        metadata=suite, limit=1, select=["assistant_id", "name"]
    )
    assert picked == [{"assistant_id": gamma["assistant_id"], "name": "the ALPHA two"}]


async def test_system_assistants_stay_and_are_read_only(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    system = await client.assistants.search(metadata={"created_by": "system"}, limit=100)
    assert {a["graph_id"] for a in system} == SYSTEM_GRAPHS
    for assistant in system:
        assert assistant["assistant_id"] == system_assistant_id(assistant["graph_id"])
        assert (assistant["version"], assistant["name"]) == (1, assistant["graph_id"])
        assert assistant["config"] == {"configurable": {}} and assistant["context"] == {}
    assert await client.assistants.count(metadata={"created_by": "system"}) == len(SYSTEM_GRAPHS)

    lead = system_assistant_id("lead_agent")
    versions = await client.assistants.get_versions(lead)
    assert [v["version"] for v in versions] == [1]
    for reply in (
        await http.patch(f"/assistants/{lead}", json={"metadata": {"x": 1}}),
        await http.patch("/assistants/lead_agent", json={"name": "renamed"}),
        await http.delete(f"/assistants/{lead}"),
        await http.post(f"/assistants/{lead}/latest", json={"version": 1}),
    ):
        assert reply.status_code == 409
        assert "system assistant of graph 'lead_agent'" in reply.json()["detail"]
    assert await client.assistants.get("lead_agent") == next(
        a for a in system if a["graph_id"] == "lead_agent"
    )


async def test_a_run_takes_its_assistants_config_and_context(
    client: LangGraphClient, suite: dict[str, str]
) -> None:
    assistant = await client.assistants.create(
        "configured", context={"tone": "formal", "level": 1}, metadata=suite
    )
    assistant_id = assistant["assistant_id"]

    seen = await run_configured(client, assistant_id)
    assert seen["seen_configurable"] == {"tone": "formal", "level": 1}
    assert seen["seen_context"] == {"tone": "formal", "level": 1}

    # The run's own values win, key by key.
    seen = await run_configured(client, assistant_id, config={"configurable": {"level": 2}})
    assert seen["seen_configurable"] == {"tone": "formal", "level": 2}
    seen = await run_configured(client, assistant_id, context={"level": 3})
    assert seen["seen_context"] == {"tone": "formal", "level": 3}

    # The assistant's latest version is what a new run gets.
    await client.assistants.update(assistant_id, context={"tone": "casual"})
    seen = await run_configured(client, assistant_id)
    assert seen["seen_context"] == {"tone": "casual"}
    await client.assistants.set_latest(assistant_id, 1)
    seen = await run_configured(client, assistant_id)
    assert seen["seen_context"] == {"tone": "formal", "level": 1}

    # The run and its thread record the assistant, not the graph's system assistant.
    thread = await client.threads.create()
    run = await client.runs.create(thread["thread_id"], assistant_id, input={"keys": []})
    assert run["assistant_id"] == assistant_id
    await client.runs.join(thread["thread_id"], run["run_id"])
    stored = await client.runs.get(thread["thread_id"], run["run_id"])
    assert stored["assistant_id"] == assistant_id
    # As sent: a graph without a context schema gets no identity in its context.
    assert stored["kwargs"]["context"] == {"tone": "formal", "level": 1}
    metadata = (await client.threads.get(thread["thread_id"]))["metadata"]
    assert (metadata["assistant_id"], metadata["graph_id"]) == (assistant_id, "configured")


async def test_the_lead_agents_model_comes_from_its_assistant(
    client: LangGraphClient, http: httpx.AsyncClient, suite: dict[str, str]
) -> None:
    scripted = await client.assistants.create(
        "lead_agent", context={"model_name": "scripted"}, metadata=suite
    )
    thread = await client.threads.create()
    result = await client.runs.wait(thread["thread_id"], scripted["assistant_id"], input=says("hi"))
    assert isinstance(result, dict)
    assert result["messages"][-1]["content"] == "You said: hi"

    # An assistant's model goes through the same allowlist as a run's own.
    unknown = await client.assistants.create(
        "lead_agent", context={"model_name": "gpt-9"}, metadata=suite
    )
    thread = await client.threads.create()
    reply = await http.post(
        f"/threads/{thread['thread_id']}/runs",
        json={"assistant_id": unknown["assistant_id"], "input": says("x")},
    )
    assert reply.status_code == 400
    assert "gpt-9" in reply.json()["detail"] and "scripted" in reply.json()["detail"]
    assert await client.runs.list(thread["thread_id"]) == []


async def test_graph_schemas_and_subgraphs_of_a_custom_assistant(
    client: LangGraphClient, suite: dict[str, str]
) -> None:
    assistant = await client.assistants.create("nested", metadata=suite)
    drawable = await client.assistants.get_graph(assistant["assistant_id"])
    assert {node["id"] for node in drawable["nodes"]} >= {"writer", "review"}
    schemas = await client.assistants.get_schemas(assistant["assistant_id"])
    assert schemas["graph_id"] == "nested"
    assert "notes" in schemas["input_schema"]["properties"]
    subgraphs = await client.assistants.get_subgraphs(assistant["assistant_id"])
    assert list(subgraphs) == ["writer"]


async def test_bad_create_is_4xx_and_writes_nothing(
    client: LangGraphClient, http: httpx.AsyncClient, suite: dict[str, str]
) -> None:
    before = await client.assistants.count()
    cases: list[tuple[dict[str, Any], int, str]] = [
        ({"graph_id": "no_such_graph"}, 422, "known graphs: lead_agent"),
        (
            {"graph_id": "configured", "config": {"configurable": {"a": 1}}, "context": {"b": 2}},
            400,
            "Cannot specify both configurable and context",
        ),
        ({"graph_id": "configured", "assistant_id": "not-a-uuid"}, 422, "not a UUID"),
        ({"graph_id": "configured", "if_exists": "maybe"}, 422, "if_exists"),
        ({"graph_id": "configured", "config": "fast"}, 422, "config"),
        ({"graph_id": "configured", "config": {"configurable": "fast"}}, 422, "configurable"),
        ({"graph_id": "configured", "context": ["fast"]}, 422, "context"),
        ({"graph_id": "configured", "metadata": "mine"}, 422, "metadata"),
        ({"config": {}}, 422, "graph_id"),
        # Every run of an assistant inherits its config: no credentials in it.
        (
            {"graph_id": "configured", "config": {"configurable": {"api_key": "hunter2"}}},
            422,
            "config.configurable.api_key: credential-like key name",
        ),
        (
            {"graph_id": "configured", "context": {"token": "hunter2"}},
            422,
            "config.configurable.token: credential-like key name",
        ),
        (
            {
                "graph_id": "configured",
                "metadata": {"note": "ghp_0123456789abcdefABCDEF0123456789abcd"},
            },
            422,
            "metadata.note",
        ),
    ]
    for body, status, detail in cases:
        reply = await http.post("/assistants", json={"metadata": suite, **body})
        assert reply.status_code == status, body
        assert detail in str(reply.json()["detail"]), body
    assert (
        "no_such_graph" in (await http.post("/assistants", json={"graph_id": "no_such_graph"})).text
    )
    assert await client.assistants.count() == before


async def test_bad_patch_and_version_change_are_4xx_and_write_nothing(
    client: LangGraphClient, http: httpx.AsyncClient, suite: dict[str, str]
) -> None:
    assistant = await client.assistants.create("configured", context={"tone": "x"}, metadata=suite)
    path = f"/assistants/{assistant['assistant_id']}"
    cases: list[tuple[str, str, dict[str, Any], int, str]] = [
        ("PATCH", path, {"graph_id": "no_such_graph"}, 422, "no_such_graph"),
        (
            "PATCH",
            path,
            {"config": {"configurable": {"a": 1}}, "context": {"b": 2}},
            400,
            "Cannot specify both",
        ),
        ("PATCH", path, {"metadata": ["x"]}, 422, "metadata"),
        ("PATCH", path, {"metadata": {"password": "x"}}, 422, "metadata.password"),
        (
            "PATCH",
            path,
            {"config": {"configurable": {"openai_api_key": "x"}}},
            422,
            "config.configurable.openai_api_key",
        ),
        ("PATCH", f"/assistants/{uuid.uuid4()}", {"name": "x"}, 404, "not found"),
        ("POST", f"{path}/latest", {"version": 9}, 404, "Version 9"),
        ("POST", f"{path}/latest", {"version": 0}, 422, "version"),
        ("POST", f"{path}/latest", {}, 422, "version"),
        ("POST", f"/assistants/{uuid.uuid4()}/latest", {"version": 1}, 404, "not found"),
        ("POST", f"/assistants/{uuid.uuid4()}/versions", {}, 404, "not found"),
        ("POST", f"{path}/versions", {"limit": 0}, 422, "limit"),
        ("POST", "/assistants/search", {"sort_by": "colour"}, 422, "sort_by"),
        ("POST", "/assistants/search", {"limit": 5000}, 422, "limit"),
        ("POST", "/assistants/search", {"select": ["secret"]}, 422, "select"),
        ("POST", "/assistants/count", {"metadata": 3}, 422, "metadata"),
        ("DELETE", f"{path}?delete_threads=maybe", {}, 422, "delete_threads"),
    ]
    for method, url, body, status, detail in cases:
        if method == "DELETE":
            reply = await http.delete(url)
        else:
            reply = await http.request(method, url, json=body)
        assert reply.status_code == status, (method, url, body)
        assert detail in str(reply.json()["detail"]), (method, url, body)
    assert await client.assistants.get(assistant["assistant_id"]) == assistant
    assert len(await client.assistants.get_versions(assistant["assistant_id"])) == 1


async def test_a_run_by_an_unknown_assistant_uuid_is_404_and_writes_nothing(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    """A UUID naming no assistant is 404, as on LangGraph Platform (an unknown graph
    name stays 422: tests/e2e/test_bad_input.py)."""
    thread = await client.threads.create()
    unknown = str(uuid.uuid4())
    reply = await http.post(
        f"/threads/{thread['thread_id']}/runs", json={"assistant_id": unknown, "input": {}}
    )
    assert reply.status_code == 404
    assert reply.json()["detail"] == f"Assistant '{unknown}' not found."
    assert await client.runs.list(thread["thread_id"]) == []
