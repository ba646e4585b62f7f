"""The lead agent's memory, summaries and titles, end to end with the scripted model.

Memory: a fact a user asked to be remembered in one run is extracted after it (in
the background), shown in that user's next runs' system prompt (`/system` makes the
scripted model answer with it) and in no other user's; `/memory` lists, edits and
deletes it, each user their own; a stale epoch writes no memory. Summaries: a
history over the budget is summarized into the state's `summary`, the originals
stay in the checkpoint history. Titles: a thread gets one after its first run,
never over the user's. One stack with auth on (two users), embedded and on Postgres.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph_sdk.client import LangGraphClient
from sqlalchemy import text

from tests.support.auth_stack import auth_stack_in_mode, sdk_with_key
from tests.support.helpers import says
from tests.support.stacks import aio_service_channel, eventually
from waybill.common.config_file import ConfigError, read_config_file
from waybill.common.launch import Stack
from waybill.common.sql import service_engine
from waybill.services.runner.agent.summarization import cutoff
from waybill.services.runner.ending.after_run import AfterRun, after_run
from waybill.services.runner.peers import RunnerPeers
from waybill.services.runner.persistence.backends import open_store
from waybill.v1 import admission_pb2_grpc

KEYS = {"alice": "alice-key-memory", "bob": "bob-key-memory"}
TRIGGER_TOKENS = 300  # a history estimated above this is summarized
LONG = "word " * 400  # some 500 tokens by LangChain's estimate


CONFIG = {
    "memory": {"enabled": True, "model": "scripted"},
    "summarization": {"enabled": True, "trigger_tokens": TRIGGER_TOKENS, "keep_messages": 2},
    "titles": {"enabled": True, "max_chars": 40},
}


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    data_dir = tmp_path_factory.mktemp(f"stack-memory-{request.param}")
    with auth_stack_in_mode(request.param, data_dir, KEYS, CONFIG) as running:
        yield running


@pytest.fixture
async def alice(stack: Stack) -> AsyncIterator[LangGraphClient]:
    async with sdk_with_key(stack, KEYS["alice"]) as sdk:
        yield sdk


@pytest.fixture
async def bob(stack: Stack) -> AsyncIterator[LangGraphClient]:
    async with sdk_with_key(stack, KEYS["bob"]) as sdk:
        yield sdk


def http_of(stack: Stack, user: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=stack.url, headers={"x-api-key": KEYS[user]}, timeout=30)


async def answer(sdk: LangGraphClient, message: str, thread_id: str | None = None) -> str:
    """The last AI message of a run of `message` on a thread (a new one by default)."""
    if thread_id is None:
        thread_id = (await sdk.threads.create())["thread_id"]
    values = await sdk.runs.wait(thread_id, "lead_agent", input=says(message))
    assert isinstance(values, dict), values
    return str(values["messages"][-1]["content"])


async def facts_of(stack: Stack, user: str) -> list[dict[str, Any]]:
    async with http_of(stack, user) as http:
        response = await http.get("/memory")
    assert response.status_code == 200, response.text
    facts: list[dict[str, Any]] = response.json()["facts"]
    return facts


async def fact_named(stack: Stack, user: str, fact: str) -> dict[str, Any] | None:
    return next((f for f in await facts_of(stack, user) if f["fact"] == fact), None)


# ---- memory ---------------------------------------------------------------------------


async def test_a_fact_of_one_run_is_in_the_next_runs_prompt_of_that_user_only(
    stack: Stack, alice: LangGraphClient, bob: LangGraphClient
) -> None:
    fact = f"my favourite colour is teal {uuid.uuid4().hex[:6]}"
    thread = await alice.threads.create()
    await answer(alice, f"remember: {fact}", thread["thread_id"])
    found = await eventually(lambda: fact_named(stack, "alice", fact), "the fact remembered")
    assert found["thread_id"] == thread["thread_id"] and found["run_id"]

    # Another thread of hers: the system prompt the model was shown has it.
    prompt = await answer(alice, "/system")
    assert "What you remember about the user" in prompt and fact in prompt
    # Bob's has not, and his memory is empty of it.
    bobs = await answer(bob, "/system")
    assert "You are Waybill" in bobs and fact not in bobs
    assert all(f["fact"] != fact for f in await facts_of(stack, "bob"))

    # The extraction's tokens are in her ledger, as `memory`.
    async with http_of(stack, "alice") as http:
        usage = (await http.get(f"/threads/{thread['thread_id']}/token-usage")).json()
    assert usage["by_source"]["memory"]["llm_calls"] >= 1
    assert usage["by_source"]["memory"]["total_tokens"] > 0


async def test_memory_is_listed_edited_and_deleted_by_its_user_alone(
    stack: Stack, alice: LangGraphClient
) -> None:
    async with http_of(stack, "alice") as mine, http_of(stack, "bob") as theirs:
        added = await mine.post("/memory", json={"fact": "works at the harbour office"})
        assert added.status_code == 201, added.text
        fact_id = added.json()["fact_id"]
        assert added.json()["thread_id"] is None  # added by hand, not from a run

        edited = await mine.patch(f"/memory/{fact_id}", json={"fact": "works at the lighthouse"})
        assert edited.status_code == 200 and edited.json()["fact"] == "works at the lighthouse"
        assert "works at the lighthouse" in await answer(alice, "/system")

        # Someone else's fact is not there for bob: 404, and it stays as it was.
        assert (await theirs.patch(f"/memory/{fact_id}", json={"fact": "x"})).status_code == 404
        assert (await theirs.delete(f"/memory/{fact_id}")).status_code == 404
        assert await fact_named(stack, "alice", "works at the lighthouse") is not None

        # Bad input: a clear 4xx, nothing written.
        assert (await mine.patch(f"/memory/{fact_id}", json={"fact": ""})).status_code == 422
        secret = {"fact": "my key is sk-" + "a" * 40}
        assert (await mine.post("/memory", json=secret)).status_code == 422
        assert (
            await mine.patch(f"/memory/{uuid.uuid4().hex}", json={"fact": "y"})
        ).status_code == 404

        assert (await mine.delete(f"/memory/{fact_id}")).status_code == 204
        assert await fact_named(stack, "alice", "works at the lighthouse") is None
        assert (await mine.delete(f"/memory/{fact_id}")).status_code == 404
    assert "works at the lighthouse" not in await answer(alice, "/system")


async def test_a_stale_epoch_writes_no_memory(stack: Stack, alice: LangGraphClient) -> None:
    """A zombie runner (its run taken over: admission holds a newer epoch) may finish
    extracting, but admission refuses its tokens, and it writes no fact."""
    thread = await alice.threads.create()
    run = await alice.runs.create(thread["thread_id"], "lead_agent", input=says("hello"))
    await alice.runs.join(thread["thread_id"], run["run_id"])
    settings = stack.settings
    engine = service_engine(settings, settings.sqlalchemy_url("admission"))
    async with engine.begin() as conn:  # as a takeover would have left it
        await conn.execute(
            text("UPDATE runs SET epoch = epoch + 1 WHERE run_id = :run_id"),
            {"run_id": run["run_id"]},
        )
    await engine.dispose()

    def work(epoch: int, fact: str) -> AfterRun:
        said = [HumanMessage(f"remember: {fact}"), AIMessage("noted")]
        return AfterRun(run["run_id"], epoch, thread["thread_id"], "alice", said)

    async with (
        aio_service_channel(stack.address_of("admission")) as channel,
        open_store(settings, setup=False) as store,
    ):
        peers = RunnerPeers(admission_pb2_grpc.AdmissionStub(channel), None, None, None)  # type: ignore[arg-type]
        zombie = uuid.uuid4().hex
        assert await after_run(work(1, zombie), store, peers, settings) is False
        assert await fact_named(stack, "alice", zombie) is None
        # The epoch admission holds writes (so the refusal above is the fence's).
        current = uuid.uuid4().hex
        assert await after_run(work(2, current), store, peers, settings) is True
        assert await fact_named(stack, "alice", current) is not None


# ---- titles -----------------------------------------------------------------------------


async def thread_of(sdk: LangGraphClient, thread_id: str) -> dict[str, Any]:
    return dict(await sdk.threads.get(thread_id))


async def test_a_new_thread_gets_a_title_after_its_first_run_only(
    stack: Stack, alice: LangGraphClient
) -> None:
    thread_id = (await alice.threads.create())["thread_id"]
    await answer(alice, "plan a trip to Lisbon", thread_id)

    async def titled() -> str | None:
        return (await thread_of(alice, thread_id))["metadata"].get("title")

    assert await eventually(titled, "the title") == "You said: plan a trip to Lisbon"
    # The second run makes none (its memory work ends after the title's would).
    fact = f"likes trams {uuid.uuid4().hex[:6]}"
    await answer(alice, f"remember: {fact}", thread_id)
    await eventually(lambda: fact_named(stack, "alice", fact), "the second run's fact")
    async with http_of(stack, "alice") as http:
        usage = (await http.get(f"/threads/{thread_id}/token-usage")).json()
    assert usage["by_source"]["title"]["llm_calls"] == 1
    assert usage["by_source"]["memory"]["llm_calls"] == 2


async def test_a_title_the_user_set_stays(stack: Stack, alice: LangGraphClient) -> None:
    thread_id = (await alice.threads.create(metadata={"title": "Mine"}))["thread_id"]
    fact = f"owns a bicycle {uuid.uuid4().hex[:6]}"
    await answer(alice, f"remember: {fact}", thread_id)
    await eventually(lambda: fact_named(stack, "alice", fact), "the run's fact")
    assert (await thread_of(alice, thread_id))["metadata"]["title"] == "Mine"


# ---- summaries -------------------------------------------------------------------------


async def test_a_long_history_is_summarized_into_state_and_kept_in_history(
    stack: Stack, alice: LangGraphClient
) -> None:
    thread_id = (await alice.threads.create())["thread_id"]
    await answer(alice, f"first {LONG}", thread_id)  # one message: nothing to summarize yet
    second = await alice.runs.create(thread_id, "lead_agent", input=says("second question"))
    await alice.runs.join(thread_id, second["run_id"])

    values = (await alice.threads.get_state(thread_id))["values"]
    assert isinstance(values, dict)
    assert values["summary"].startswith("You said: user: first word")
    contents = [str(m["content"]) for m in values["messages"]]
    assert not any(c.startswith("first ") for c in contents)  # summarized away
    assert contents[-2:] == ["second question", "You said: second question"]

    # The originals are in the thread's checkpoint history.
    history = await alice.threads.get_history(thread_id, limit=20)
    seen = [m["content"] for h in history for m in (h["values"] or {}).get("messages", [])]
    assert f"first {LONG}" in seen

    # The run's journal says what was summarized, and the summary's tokens are
    # middleware's, not the lead agent's.
    async with http_of(stack, "alice") as http:
        path = f"/threads/{thread_id}/runs/{second['run_id']}"
        listed = (await http.get(f"{path}/events", params={"type": "middleware"})).json()
        run = (await http.get(path)).json()
    decisions = [event["data"] for event in listed]
    assert {
        "middleware": "Summarization",
        "node": "agent",
        "action": "summarized_history",
        "messages_summarized": 2,  # the first question and its answer
        "messages_kept": 1,  # from the user's newest message
    } in decisions, decisions
    assert run["usage"]["by_source"]["middleware"]["llm_calls"] == 1
    # The next model call is shown the summary.
    assert "Summary of the conversation" in await answer(alice, "/system", thread_id)


# ---- the config -------------------------------------------------------------------------


def test_the_sections_are_read_strictly(tmp_path: Path) -> None:
    path = tmp_path / "waybill.yaml"
    path.write_text(yaml.safe_dump({"memory": {"enable": True}, "titles": {"max_chars": 2}}))
    with pytest.raises(ConfigError) as refused:
        read_config_file(path)
    message = str(refused.value)
    assert "unknown key `memory.enable` (did you mean `enabled`?)" in message
    assert "titles.max_chars" in message

    path.write_text(yaml.safe_dump({"summarization": {"enabled": True, "model": "gpt-9"}}))
    with pytest.raises(ConfigError, match="summarization.model: 'gpt-9' is not in `models`"):
        read_config_file(path)

    path.write_text(yaml.safe_dump({"memory": {"enabled": True}, "summarization": None}))
    config = read_config_file(path)
    assert config.memory.enabled and config.memory.max_facts == 100
    assert not config.summarization.enabled and not config.titles.enabled


def test_the_kept_messages_start_on_a_user_message_never_inside_a_tool_turn() -> None:
    call = AIMessage("", tool_calls=[{"name": "add", "args": {}, "id": "c1"}])
    tool_turn = [HumanMessage("q"), call, ToolMessage("3", tool_call_id="c1"), AIMessage("3")]
    assert cutoff(tool_turn, 2) == 1  # the call stays with its result
    talk = [HumanMessage("a"), AIMessage("b"), HumanMessage("c"), AIMessage("d")]
    assert cutoff(talk, 3) == 2  # from the newest user message within the last 3
    assert cutoff(talk, 4) == 0  # nothing to summarize
