"""The run journal and token accounting, end to end against the OpenAI-compatible stub.

What the stub reports as usage for each call must reach the run record, the
thread's and the user's sums exactly; model and tool calls, errors and
middleware decisions are listed at `/events`, and never sent on the stream.
One stack with auth on (two users), embedded and on Postgres.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import httpx
import pytest
import yaml
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient

from tests.support.helpers import says
from tests.support.openai_stub import OpenAIStub, running_openai_stub
from tests.support.stacks import (
    aio_service_channel,
    fresh_postgres_database,
    running_stack,
    stack_env,
)
from waybill.common.launch import Stack
from waybill.common.usage import Price, TokenCount, summarize
from waybill.services.runner.reporting.run_journal import source_of
from waybill.services.runner.reporting.token_ledger import CallUsage, TokenLedger
from waybill.v1 import journal_pb2, journal_pb2_grpc

KEYS = {"alice": "alice-key-accounting", "bob": "bob-key-accounting"}
MODEL = "stub-gpt"
PRICE = {"input_per_million": 2.0, "output_per_million": 8.0, "cache_read_per_million": 0.5}
CACHED = 3  # the stub reports this many prompt tokens as cache reads
TYPED = {
    "chain_start",
    "chain_end",
    "chain_error",
    "llm_start",
    "llm_end",
    "llm_error",
    "tool_start",
    "tool_end",
    "tool_error",
    "middleware",
    "delivery",
    "usage",
}


def write_config(path: Any, stub: OpenAIStub) -> Any:
    principals = [
        {"user_id": user, "key_sha256": hashlib.sha256(key.encode()).hexdigest()}
        for user, key in KEYS.items()
    ]
    config = {
        "models": [
            {"name": "scripted", "provider": "scripted"},
            {"name": MODEL, "provider": "openai", "model": "gpt-stub", "base_url": stub.base_url},
        ],
        "prices": {MODEL: PRICE},
        "auth": {"principals": principals},
    }
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def stub() -> Iterator[OpenAIStub]:
    with running_openai_stub() as served:
        served.cached_tokens = CACHED
        yield served


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def stack(
    request: pytest.FixtureRequest, stub: OpenAIStub, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    data_dir = tmp_path_factory.mktemp(f"stack-accounting-{request.param}")
    config = str(write_config(data_dir / "waybill.yaml", stub))
    if request.param == "postgres":
        with (
            fresh_postgres_database() as url,
            running_stack(stack_env(data_dir, url, WAYBILL_CONFIG=config), data_dir) as running,
        ):
            yield running
    else:
        with running_stack(stack_env(data_dir, WAYBILL_CONFIG=config), data_dir) as running:
            yield running


@pytest.fixture
async def client(stack: Stack) -> AsyncIterator[LangGraphClient]:
    sdk = get_client(url=stack.url, api_key=KEYS["alice"], timeout=30)
    try:
        yield sdk
    finally:
        await sdk.aclose()


@pytest.fixture
async def alice(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"x-api-key": KEYS["alice"]}
    async with httpx.AsyncClient(base_url=stack.url, headers=headers, timeout=30) as raw:
        yield raw


@pytest.fixture
async def bob(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"x-api-key": KEYS["bob"]}
    async with httpx.AsyncClient(base_url=stack.url, headers=headers, timeout=30) as raw:
        yield raw


# ---- expectations from what the stub reported ---------------------------------------


def reported_block(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """The counts the stub's reports add up to, with their cost by PRICE."""
    counts = TokenCount(
        model=MODEL,
        source="lead_agent",
        input_tokens=sum(r["prompt_tokens"] for r in reports),
        output_tokens=sum(r["completion_tokens"] for r in reports),
        total_tokens=sum(r["total_tokens"] for r in reports),
        cache_read_tokens=sum(r["prompt_tokens_details"]["cached_tokens"] for r in reports),
        llm_calls=len(reports),
    )
    uncached = counts.input_tokens - counts.cache_read_tokens
    cost = (uncached * 2.0 + counts.cache_read_tokens * 0.5 + counts.output_tokens * 8.0) / 1e6
    return {
        "input_tokens": counts.input_tokens,
        "output_tokens": counts.output_tokens,
        "total_tokens": counts.total_tokens,
        "cache_read_tokens": counts.cache_read_tokens,
        "llm_calls": counts.llm_calls,
        "cost": pytest.approx(cost, rel=1e-9),
    }


ZERO = {
    "input_tokens": 0,
    "output_tokens": 0,
    "total_tokens": 0,
    "cache_read_tokens": 0,
    "llm_calls": 0,
    "cost": None,
}


def lead_agent_usage(reports: list[dict[str, Any]]) -> dict[str, Any]:
    block = reported_block(reports)
    return {
        **block,
        "by_model": {MODEL: block},
        "by_source": {"lead_agent": block, "subagents": ZERO, "middleware": ZERO},
    }


async def finished_run(
    client: LangGraphClient, stub: OpenAIStub, thread_id: str, *texts: str
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the run record after the run ended, the usage the stub reported for its calls)."""
    seen = len(stub.reported)
    run = await client.runs.create(
        thread_id, "lead_agent", input=says(*texts), context={"model_name": MODEL}
    )
    await client.runs.join(thread_id, run["run_id"])
    record = await client.runs.get(thread_id, run["run_id"])
    return dict(record), stub.reported[seen:]


async def events(http: httpx.AsyncClient, run: dict[str, Any], **params: Any) -> list[Any]:
    reply = await http.get(
        f"/threads/{run['thread_id']}/runs/{run['run_id']}/events", params=params
    )
    assert reply.status_code == 200, reply.text
    listed: list[Any] = reply.json()
    return listed


def of_type(listed: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [event["data"] for event in listed if event["type"] == kind]


# ---- tests ---------------------------------------------------------------------------


async def test_the_run_record_carries_exactly_the_usage_the_provider_reported(
    client: LangGraphClient, alice: httpx.AsyncClient, stub: OpenAIStub
) -> None:
    thread = await client.threads.create()
    run, reports = await finished_run(client, stub, thread["thread_id"], "hi there")

    assert run["status"] == "success"
    assert len(reports) == 1
    assert reports[0]["prompt_tokens_details"]["cached_tokens"] == CACHED
    assert run["usage"] == lead_agent_usage(reports)

    listed = await events(alice, run)
    assert [event["seq"] for event in listed] == list(range(len(listed)))
    assert [event["type"] for event in listed] == [
        "chain_start",
        "llm_start",
        "llm_end",
        "chain_end",
        "delivery",
        "usage",
    ]
    [start] = of_type(listed, "llm_start")
    assert (start["model"], start["source"], start["node"]) == (MODEL, "lead_agent", "agent")
    [end] = of_type(listed, "llm_end")
    assert (end["model"], end["provider_model"], end["source"]) == (MODEL, "gpt-stub", "lead_agent")
    assert end["usage"] == {
        "input_tokens": reports[0]["prompt_tokens"],
        "output_tokens": reports[0]["completion_tokens"],
        "total_tokens": reports[0]["total_tokens"],
        "cache_read_tokens": CACHED,
    }
    assert end["counted"] is True
    assert end["duration_ms"] > 0
    [delivery] = of_type(listed, "delivery")
    assert delivery == {
        "status": "success",
        "stop_reason": "",
        "answer": "Hello from the stub: hi there",
        "next": [],
    }
    [usage] = of_type(listed, "usage")
    assert usage == run["usage"]


async def test_a_second_run_adds_up_in_the_threads_and_the_users_token_usage(
    client: LangGraphClient, alice: httpx.AsyncClient, stub: OpenAIStub
) -> None:
    before = (await alice.get("/token-usage")).json()
    thread_id = (await client.threads.create())["thread_id"]
    first, first_reports = await finished_run(client, stub, thread_id, "one")
    second, second_reports = await finished_run(client, stub, thread_id, "two words")

    assert first["usage"] == lead_agent_usage(first_reports)
    assert second["usage"] == lead_agent_usage(second_reports)
    # The second run's prompt holds the first exchange too: not the same counts.
    assert second["usage"]["input_tokens"] > first["usage"]["input_tokens"]

    reply = await alice.get(f"/threads/{thread_id}/token-usage")
    assert reply.status_code == 200, reply.text
    assert reply.json() == {
        "thread_id": thread_id,
        "runs": 2,
        **lead_agent_usage(first_reports + second_reports),
    }

    after = (await alice.get("/token-usage")).json()
    assert after["owner_id"] == "alice"
    assert after["runs"] == before["runs"] + 2
    both = reported_block(first_reports + second_reports)
    for name in ("input_tokens", "output_tokens", "total_tokens", "cache_read_tokens"):
        assert after[name] == before[name] + both[name]
        assert after["by_model"][MODEL][name] == before["by_model"][MODEL][name] + both[name]
    assert after["cost"] == pytest.approx((before["cost"] or 0) + both["cost"].expected)


async def test_a_tool_calling_run_records_its_tool_calls_and_both_model_calls(
    client: LangGraphClient, alice: httpx.AsyncClient, stub: OpenAIStub
) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    run, reports = await finished_run(client, stub, thread_id, '/tool add {"a": 1, "b": 2}')

    assert run["status"] == "success"
    assert len(reports) == 2  # the call, then the answer about its result
    assert run["usage"] == lead_agent_usage(reports)
    state = await client.threads.get_state(thread_id)
    call, result, answer = state["values"]["messages"][1:]
    assert (result["type"], result["content"]) == ("tool", "3.0")
    assert answer["content"] == "The tool said: 3.0"

    listed = await events(alice, run)
    assert [event["type"] for event in listed] == [
        "chain_start",
        "llm_start",
        "llm_end",
        "tool_start",
        "tool_end",
        "llm_start",
        "llm_end",
        "chain_end",
        "delivery",
        "usage",
    ]
    call_id = stub.requests[-1]["messages"][-2]["tool_calls"][0]["id"]
    assert of_type(listed, "tool_start") == [{"name": "add", "tool_call_id": call_id}]
    [tool_end] = of_type(listed, "tool_end")
    assert (tool_end["name"], tool_end["tool_call_id"], tool_end["status"]) == (
        "add",
        call_id,
        "success",
    )
    assert 0 < tool_end["duration_ms"] < 10_000
    assert [end["usage"]["output_tokens"] for end in of_type(listed, "llm_end")] == [
        report["completion_tokens"] for report in reports
    ]
    assert call["tool_calls"][0]["id"] == call_id


async def test_a_failing_tool_call_is_recorded_with_its_error(
    client: LangGraphClient, alice: httpx.AsyncClient, stub: OpenAIStub
) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    run, _ = await finished_run(client, stub, thread_id, '/tool add {"a": "x", "b": 2}')

    assert run["status"] == "success"  # the model hears of the error and answers
    listed = await events(alice, run)
    [failed] = of_type(listed, "tool_error")
    assert (failed["name"], failed["error"]) == ("add", "ValidationError")
    assert "a" in failed["message"]
    assert failed["duration_ms"] >= 0
    assert of_type(listed, "tool_end") == []


async def test_a_model_error_is_recorded_and_ends_the_run(
    client: LangGraphClient, alice: httpx.AsyncClient, stub: OpenAIStub
) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    run, reports = await finished_run(client, stub, thread_id, "/fail")

    assert run["status"] == "error"
    assert reports == []
    listed = await events(alice, run)
    types = [event["type"] for event in listed]
    assert types == ["chain_start", "llm_start", "llm_error", "chain_error", "delivery", "usage"]
    [failed] = of_type(listed, "llm_error")
    assert (failed["model"], failed["source"], failed["error"]) == (
        MODEL,
        "lead_agent",
        "OpenAIInvalidRequestError",  # langchain-openai's name for OpenAI's 400
    )
    assert "The stub refuses /fail." in failed["message"]
    assert of_type(listed, "chain_error")[0]["error"] == "OpenAIInvalidRequestError"
    assert of_type(listed, "delivery")[0]["status"] == "error"
    # No tokens were reported, and the record says so rather than nothing.
    assert run["usage"] == {
        **ZERO,
        "by_model": {},
        "by_source": {"lead_agent": ZERO, "subagents": ZERO, "middleware": ZERO},
    }


async def test_history_trimming_is_recorded_as_a_middleware_decision(
    client: LangGraphClient, alice: httpx.AsyncClient, stub: OpenAIStub
) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    texts = [f"m{i}" for i in range(205)]  # the history limit is 200 messages
    run, reports = await finished_run(client, stub, thread_id, *texts)

    assert run["usage"] == lead_agent_usage(reports)
    assert len(stub.requests[-1]["messages"]) == 201  # the system prompt and 200 more
    listed = await events(alice, run, type="middleware")
    assert [event["data"] for event in listed] == [
        {
            "middleware": "TrimHistory",
            "node": "agent",
            "action": "trimmed_history",
            "keep": 200,
            "messages_before": 206,
            "messages_after": 201,
        }
    ]


async def test_events_filter_by_type_and_page_both_ways(
    client: LangGraphClient, alice: httpx.AsyncClient, stub: OpenAIStub
) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    run, _ = await finished_run(client, stub, thread_id, '/tool add {"a": 2, "b": 2}')
    everything = await events(alice, run)
    assert len(everything) == 10

    wanted = [e for e in everything if e["type"] in ("llm_end", "tool_end")]
    assert [e["type"] for e in wanted] == ["llm_end", "tool_end", "llm_end"]
    assert await events(alice, run, type=["llm_end", "tool_end"]) == wanted
    assert await events(alice, run, type="llm_end,tool_end") == wanted
    assert await events(alice, run, type="tool_end, llm_end", order="desc") == wanted[::-1]

    # Pages of 3 by cursor, oldest first and newest first, cover everything once.
    for order, expected in (("asc", everything), ("desc", everything[::-1])):
        pages: list[Any] = []
        cursor: dict[str, Any] = {}
        while True:
            reply = await alice.get(
                f"/threads/{thread_id}/runs/{run['run_id']}/events",
                params={"limit": 3, "order": order, **cursor},
            )
            page = reply.json()
            pages.extend(page)
            if "x-pagination-next" not in reply.headers:
                break
            assert int(reply.headers["x-pagination-next"]) == page[-1]["seq"]
            cursor = {"after": reply.headers["x-pagination-next"]}
        assert pages == expected
    assert await events(alice, run, limit=2, offset=4) == everything[4:6]
    assert await events(alice, run, type="llm_end", after=wanted[0]["seq"]) == [wanted[2]]

    base = f"/threads/{thread_id}/runs/{run['run_id']}/events"
    unknown = await alice.get(base, params={"type": "llm_end,tokens"})
    assert unknown.status_code == 422
    assert "'tokens' is not a record type" in unknown.json()["detail"]
    assert "llm_end" in unknown.json()["detail"]
    for bad in ({"limit": 0}, {"limit": 1001}, {"offset": -1}):
        refused = await alice.get(base, params=bad)
        assert refused.status_code == 422, bad
        assert isinstance(refused.json()["detail"], str)
    assert (await alice.get(base, params={"order": "sideways"})).status_code == 422
    missing = await alice.get(f"/threads/{thread_id}/runs/{uuid.uuid4()}/events")
    assert missing.status_code == 404


async def test_the_stream_of_a_run_carries_none_of_its_typed_events(
    client: LangGraphClient, alice: httpx.AsyncClient, stub: OpenAIStub
) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    modes = ["values", "updates", "messages-tuple"]
    streamed: list[str] = []
    async for part in client.runs.stream(
        thread_id,
        "lead_agent",
        input=says('/tool add {"a": 5, "b": 1}'),
        context={"model_name": MODEL},
        stream_mode=modes,
    ):
        streamed.append(part.event)
    [run] = await client.runs.list(thread_id)
    replay = client.runs.join_stream(thread_id, run["run_id"], last_event_id="-1")
    replayed = [part.event async for part in replay]

    assert set(streamed) == {"metadata", "values", "updates", "messages"}
    assert replayed == streamed
    listed = await events(alice, run)
    assert {event["type"] for event in listed} == TYPED - {
        "chain_error",
        "llm_error",
        "tool_error",
        "middleware",
    }
    assert not set(streamed) & TYPED


async def test_another_users_run_events_and_token_usage_are_not_found(
    client: LangGraphClient, alice: httpx.AsyncClient, bob: httpx.AsyncClient, stub: OpenAIStub
) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    run, _ = await finished_run(client, stub, thread_id, "mine")
    bobs_before = (await bob.get("/token-usage")).json()

    assert (await alice.get(f"/threads/{thread_id}/runs/{run['run_id']}/events")).status_code == 200
    events_reply = await bob.get(f"/threads/{thread_id}/runs/{run['run_id']}/events")
    assert events_reply.status_code == 404
    assert (await bob.get(f"/threads/{thread_id}/token-usage")).status_code == 404
    assert (await bob.get(f"/threads/{thread_id}/runs/{run['run_id']}")).status_code == 404
    others = await bob.get("/token-usage", params={"owner_id": "alice"})
    assert others.status_code == 403
    assert "Only admins" in others.json()["detail"]
    assert (await bob.get("/token-usage")).json() == bobs_before  # alice's run is not his
    assert bobs_before["owner_id"] == "bob"


async def test_the_token_usage_of_a_thread_with_no_runs_is_zero(
    alice: httpx.AsyncClient,
) -> None:
    thread_id = (await alice.post("/threads", json={})).json()["thread_id"]
    reply = await alice.get(f"/threads/{thread_id}/token-usage")
    assert reply.status_code == 200
    assert reply.json() == {
        "thread_id": thread_id,
        "runs": 0,
        **ZERO,
        "by_model": {},
        "by_source": {"lead_agent": ZERO, "subagents": ZERO, "middleware": ZERO},
    }
    assert (await alice.get(f"/threads/{uuid.uuid4()}/token-usage")).status_code == 404


async def test_records_are_fenced_and_go_with_their_thread_but_the_ledger_stays(
    stack: Stack, client: LangGraphClient, alice: httpx.AsyncClient, stub: OpenAIStub
) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    run, reports = await finished_run(client, stub, thread_id, "keep count")
    before = (await alice.get("/token-usage")).json()

    async with aio_service_channel(stack.settings.journal_addr) as channel:
        journal = journal_pb2_grpc.JournalStub(channel)
        late = journal_pb2.RunRecord(type="usage", data=b"{}")
        with pytest.raises(grpc.aio.AioRpcError) as closed:  # the run ended: its log is closed
            await journal.AppendRecords(
                journal_pb2.AppendRecordsRequest(run_id=run["run_id"], epoch=1, records=[late])
            )
        assert closed.value.code() == grpc.StatusCode.ABORTED
        assert "closed" in (closed.value.details() or "")

        fresh = str(uuid.uuid4())  # a run the journal has seen nothing of yet
        newer = journal_pb2.AppendRecordsRequest(run_id=fresh, epoch=2, records=[late, late])
        assert (await journal.AppendRecords(newer)).last_seq == 1
        with pytest.raises(grpc.aio.AioRpcError) as stale:
            await journal.AppendRecords(
                journal_pb2.AppendRecordsRequest(run_id=fresh, epoch=1, records=[late])
            )
        assert stale.value.code() == grpc.StatusCode.ABORTED
        assert "stale" in (stale.value.details() or "")
        await journal.Forget(journal_pb2.ForgetRequest(run_ids=[fresh]))
        listed = await journal.ListRecords(journal_pb2.ListRecordsRequest(run_id=fresh, limit=10))
        assert list(listed.records) == []

        assert (await alice.delete(f"/threads/{thread_id}")).status_code == 204
        gone = await journal.ListRecords(
            journal_pb2.ListRecordsRequest(run_id=run["run_id"], limit=10)
        )
        assert list(gone.records) == []

    # Tokens spent stay spent: the user's sums still hold the deleted thread's run.
    assert (await alice.get("/token-usage")).json() == before
    assert len(reports) == 1
    assert before["runs"] >= 1


# ---- the parts, without a stack --------------------------------------------------------


def test_each_model_call_is_counted_once_by_its_callback_run_id() -> None:
    ledger = TokenLedger()
    call = uuid.uuid4()
    usage = CallUsage(input_tokens=10, output_tokens=4, total_tokens=14, cache_read_tokens=6)
    assert ledger.add(call, MODEL, "lead_agent", usage) is True
    assert ledger.add(call, MODEL, "lead_agent", usage) is False  # the same call again
    assert ledger.add(uuid.uuid4(), MODEL, "middleware", usage) is True
    [lead, middleware] = ledger.counts({MODEL: Price.model_validate(PRICE)})
    assert (lead.input_tokens, lead.output_tokens, lead.llm_calls) == (10, 4, 1)
    assert lead.cost == pytest.approx((4 * 2.0 + 6 * 0.5 + 4 * 8.0) / 1e6)
    summary = summarize([lead, middleware])
    assert summary["total_tokens"] == 28
    assert summary["by_source"]["middleware"]["llm_calls"] == 1
    assert summary["by_source"]["subagents"] == ZERO
    unpriced = summarize(ledger.counts({}))
    assert unpriced["cost"] is None


def test_a_model_calls_source_comes_from_its_node_and_namespace() -> None:
    top = {"langgraph_node": "agent", "langgraph_checkpoint_ns": "agent:1"}
    assert source_of(top, []) == "lead_agent"
    nested = {"langgraph_node": "agent", "langgraph_checkpoint_ns": "tools:1|agent:2"}
    assert source_of(nested, []) == "subagents"
    assert source_of({"langgraph_node": "tools"}, []) == "subagents"
    assert source_of(top, ["waybill:middleware"]) == "middleware"
    assert source_of({**nested, "waybill_source": "middleware"}, []) == "middleware"
