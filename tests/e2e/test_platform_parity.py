"""LangGraph Platform behaviours (issue 39), each side by side with what the
reference (`langgraph dev`, langgraph-api 0.16.7) answered to the same requests;
its answer is quoted in each test."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi.testclient import TestClient
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient

from tests.support.helpers import wait_for_status
from waybill.common.launch import Stack
from waybill.common.settings import Settings
from waybill.gateway.app import create_app, server_info


@pytest.fixture
async def sdk(sqlite_stack: Stack) -> AsyncIterator[LangGraphClient]:
    client = get_client(url=sqlite_stack.url, timeout=30)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def http_sqlite(sqlite_stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=sqlite_stack.url, timeout=30) as client:
        yield client


async def test_a_graphs_own_user_id_is_the_clients(sdk: LangGraphClient) -> None:
    """LangChain's memory template chooses `context.user_id` itself: two users'
    memories stay apart. The reference answered, for ann then ben:
    `{"memories": ["ann likes tea"], "seen_context": {"user_id": "ann", "role":
    "admin", "channel": "x"}, "seen_configurable_user_id": "ann", ...}` (the
    context mirrored into `configurable`), and for `config.configurable.user_id
    = "cat"` alone: `seen_context == {"user_id": "cat"}`."""
    seen = {}
    for user in ("ann", "ben"):
        thread = await sdk.threads.create()
        seen[user] = await sdk.runs.wait(
            thread["thread_id"],
            "recall",
            input={"remember": f"{user} likes tea"},
            context={"user_id": user, "role": "admin", "channel": "x"},
        )
    for user in ("ann", "ben"):
        assert seen[user]["memories"] == [f"{user} likes tea"]
        assert seen[user]["seen_context"] == {"user_id": user, "role": "admin", "channel": "x"}
        assert seen[user]["seen_configurable_user_id"] == user
    thread = await sdk.threads.create()
    by_config = await sdk.runs.wait(
        thread["thread_id"], "recall", input={}, config={"configurable": {"user_id": "cat"}}
    )
    assert by_config["seen_context"] == {"user_id": "cat"}
    assert by_config["seen_configurable_user_id"] == "cat"


def test_liveness_asks_no_peer_while_readiness_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every peer down (nothing listens on their ports): `/ok`, readiness, is 503;
    `/livez` is 200, so Kubernetes restarts no gateway during a runner outage. (The
    reference has no `/livez`, 404; its `/ok` answered `{"ok":true,"services":{}}`.)"""
    for name in ("ADMISSION", "RUNNER", "JOURNAL", "DELIVERY"):
        monkeypatch.setenv(f"WAYBILL_{name}_ADDR", "127.0.0.1:9")
    monkeypatch.setenv("WAYBILL_READY_CHECK_TIMEOUT_SECONDS", "0.3")
    with TestClient(create_app(Settings())) as gateway:
        assert gateway.get("/ok").status_code == 503
        live = gateway.get("/livez")
    assert (live.status_code, live.json()) == (200, {"ok": True})


def test_info_says_langsmith_when_runs_are_traced(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference's `flags.langsmith` is tracing on and a LangSmith key set
    (`langgraph dev` without them answered `"langsmith": false`)."""
    for name in ("LANGSMITH_TRACING_V2", "LANGCHAIN_TRACING_V2", "LANGCHAIN_TRACING"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("LANGCHAIN_API_KEY", raising=False)
    monkeypatch.setenv("LANGSMITH_TRACING", "true")
    monkeypatch.delenv("LANGSMITH_API_KEY", raising=False)
    assert server_info()["flags"]["langsmith"] is False  # no key: nothing is sent
    monkeypatch.setenv("LANGSMITH_API_KEY", "lsv2-test-not-a-key")
    assert server_info()["flags"]["langsmith"] is True
    monkeypatch.setenv("LANGSMITH_TRACING", "false")
    assert server_info()["flags"]["langsmith"] is False


BAD_CHECKPOINTS = (
    {"configurable": 5},
    {"configurable": []},
    {"configurable": {"checkpoint_id": 5}},
)


async def test_a_malformed_checkpoint_is_a_422_never_a_500(sdk: LangGraphClient) -> None:
    """`before` (history) and `checkpoint` (a run's start) of the wrong shape. The
    reference answered each `before` above with a 500 ("Internal Server Error", a
    bug there: our rule is a 4xx); a well-formed unknown id, 200 with the history."""
    thread = await sdk.threads.create()
    await sdk.runs.wait(thread["thread_id"], "recall", input={})
    tid = thread["thread_id"]
    async with httpx.AsyncClient(base_url=str(sdk.http.client.base_url), timeout=30) as http:
        for bad in BAD_CHECKPOINTS:
            history = await http.post(f"/threads/{tid}/history", json={"before": bad})
            assert history.status_code == 422, (bad, history.text)
            run = await http.post(
                f"/threads/{tid}/runs", json={"assistant_id": "recall", "checkpoint": bad}
            )
            assert run.status_code == 422, (bad, run.text)
        unknown = {"configurable": {"checkpoint_id": "nope"}}
        history = await http.post(f"/threads/{tid}/history", json={"before": unknown})
        assert history.status_code == 200
        assert (await http.get(f"/threads/{tid}/runs")).json()[0]["status"] == "success"


async def test_wait_and_join_answer_the_output_schema_not_the_state(sdk: LangGraphClient) -> None:
    """The reference: `runs.wait` -> `{"answer": "answer to q"}`, the thread's state
    `{"question": "q", "scratch": "private notes", "answer": "answer to q"}`;
    `runs.join` -> `{"answer": "answer to q2"}`."""
    thread = await sdk.threads.create()
    tid = thread["thread_id"]
    assert await sdk.runs.wait(tid, "shaped", input={"question": "q"}) == {"answer": "answer to q"}
    state = await sdk.threads.get_state(tid)
    assert state["values"] == {"question": "q", "scratch": "private notes", "answer": "answer to q"}
    run = await sdk.runs.create(tid, "shaped", input={"question": "q2"})
    assert await sdk.runs.join(tid, run["run_id"]) == {"answer": "answer to q2"}


async def test_cancel_and_wait_answers_200_with_the_output(sdk: LangGraphClient) -> None:
    """The reference, a run cancelled 1.5 s into a 5 s node: `cancel?wait=true` ->
    200 `{}` (its last `values`, the input through the output schema), `Location`
    `/threads/{t}/runs/{r}/join`; the thread read at once: `interrupted`; the run
    `interrupted`; cancelling it again: 404."""
    thread = await sdk.threads.create()
    tid = thread["thread_id"]
    run = await sdk.runs.create(tid, "shaped", input={"question": "slow 5"})
    await wait_for_status(sdk, tid, run["run_id"], "running")
    async with httpx.AsyncClient(base_url=str(sdk.http.client.base_url), timeout=30) as http:
        cancelled = await http.post(
            f"/threads/{tid}/runs/{run['run_id']}/cancel", params={"wait": "true"}
        )
        assert cancelled.status_code == 200
        assert cancelled.json() == {}
        assert cancelled.headers["location"] == f"/threads/{tid}/runs/{run['run_id']}/join"
        assert (await http.get(f"/threads/{tid}")).json()["status"] == "interrupted"
        assert (await http.get(f"/threads/{tid}/runs/{run['run_id']}")).json()["status"] == (
            "interrupted"
        )


async def test_deleting_an_assistant_with_its_threads(http_sqlite: httpx.AsyncClient) -> None:
    """The reference: 204; the thread that ran on the assistant (its metadata names
    it) 404; a thread of another assistant 200; deleting again 404. A never-run thread
    created with `metadata.assistant_id` stayed there (200), against its own doc
    ("delete all threads where metadata.assistant_id matches"): Waybill follows the doc."""
    http = http_sqlite
    assistant = (await http.post("/assistants", json={"graph_id": "recall"})).json()
    aid = assistant["assistant_id"]
    ran, other, named = [
        (await http.post("/threads", json={})).json()["thread_id"] for _ in "12"
    ] + [
        (await http.post("/threads", json={"metadata": {"assistant_id": aid}})).json()["thread_id"]
    ]
    await http.post(f"/threads/{ran}/runs/wait", json={"assistant_id": aid, "input": {}})
    await http.post(f"/threads/{other}/runs/wait", json={"assistant_id": "recall", "input": {}})
    assert (await http.get(f"/threads/{ran}")).json()["metadata"]["assistant_id"] == aid
    deleted = await http.delete(f"/assistants/{aid}", params={"delete_threads": "true"})
    assert deleted.status_code == 204, deleted.text
    assert (await http.get(f"/threads/{ran}")).status_code == 404
    assert (await http.get(f"/threads/{named}")).status_code == 404
    assert (await http.get(f"/threads/{other}")).status_code == 200
    again = await http.delete(f"/assistants/{aid}", params={"delete_threads": "true"})
    assert again.status_code == 404


async def test_run_metadata_and_request_marks(http_sqlite: httpx.AsyncClient) -> None:
    """The reference, an assistant with metadata `{"from_assistant": 1, "shared":
    "assistant"}`, a thread with `{"from_thread": 2, "shared": "thread"}`, a run with
    `{"from_run": 3}` and `x-request-id: req-123`: the run's metadata
    `{"from_assistant": 1, "shared": "thread", "from_thread": 2, "graph_id": "recall",
    "assistant_id": …, "from_run": 3}` ("shared": "run" when the run sends it); the
    thread's stays `{"from_thread": 2, "shared": "thread", "graph_id", "assistant_id"}`;
    `configurable.langgraph_request_id == "req-123"` (a new uuid without the header)
    and `__request_start_time_ms__` the request's start in ms."""
    http = http_sqlite
    assistant = (
        await http.post(
            "/assistants",
            json={"graph_id": "recall", "metadata": {"from_assistant": 1, "shared": "assistant"}},
        )
    ).json()
    aid = assistant["assistant_id"]
    thread = (
        await http.post("/threads", json={"metadata": {"from_thread": 2, "shared": "thread"}})
    ).json()
    tid = thread["thread_id"]
    before = int(time.time() * 1000)
    run = (
        await http.post(
            f"/threads/{tid}/runs",
            json={"assistant_id": aid, "input": {}, "metadata": {"from_run": 3}},
            headers={"x-request-id": "req-123"},
        )
    ).json()
    await http.get(f"/threads/{tid}/runs/{run['run_id']}/join")
    stored = (await http.get(f"/threads/{tid}/runs/{run['run_id']}")).json()
    assert stored["metadata"] == {
        "from_assistant": 1,
        "shared": "thread",
        "from_thread": 2,
        "graph_id": "recall",
        "assistant_id": aid,
        "from_run": 3,
    }
    threaded = (await http.get(f"/threads/{tid}")).json()["metadata"]
    assert threaded == {
        "from_thread": 2,
        "shared": "thread",
        "graph_id": "recall",
        "assistant_id": aid,
    }
    configurable = stored["kwargs"]["config"]["configurable"]
    assert configurable["langgraph_request_id"] == "req-123"
    assert before <= configurable["__request_start_time_ms__"] <= int(time.time() * 1000)
    second = await http.post(
        f"/threads/{tid}/runs/wait",
        json={"assistant_id": aid, "input": {}, "metadata": {"shared": "run"}},
    )
    assert second.status_code == 200
    runs = (await http.get(f"/threads/{tid}/runs")).json()
    latest = max(runs, key=lambda r: r["created_at"])
    assert latest["metadata"]["shared"] == "run"
    uuid.UUID(latest["kwargs"]["config"]["configurable"]["langgraph_request_id"])


# Inputs of the wrong type to the state routes, each with the field its answer names
# and what the reference (0.16.7) answered.
BAD_STATE_INPUTS = [
    ("POST", "history", {"before": {"configurable": 5}}, "before"),  # ref 500
    ("POST", "history", {"before": 5}, "before"),  # ref 500
    ("POST", "history", {"before": {"checkpoint_id": 5}}, "checkpoint_id"),
    ("POST", "history", {"limit": "5"}, "limit"),  # ref 422
    ("POST", "history", {"limit": True}, "limit"),  # ref 422
    ("POST", "history", {"limit": 2.5}, "limit"),  # ref 422
    ("POST", "history", {"metadata": 5}, "metadata"),  # ref 422
    ("POST", "history", {"metadata": {"": 1}}, "metadata"),  # ref 200 [], Waybill was 500
    ("POST", "history", {"checkpoint": 5}, "checkpoint"),  # ref 422
    ("POST", "history", {"checkpoint": {"checkpoint_id": 5}}, "checkpoint_id"),  # ref 422
    ("POST", "history", {"checkpoint": {"checkpoint_ns": 5}}, "checkpoint_ns"),  # ref 422
    ("POST", "history", {"checkpoint": {"checkpoint_map": {"a": 5}}}, "checkpoint_map"),
    ("GET", "history?limit=x", None, "limit"),  # ref 422 "Invalid limit x"
    ("POST", "state/checkpoint", {"checkpoint": 5}, "checkpoint"),  # ref 422
    ("POST", "state/checkpoint", {"checkpoint": {"checkpoint_id": 5}}, "checkpoint_id"),
    ("POST", "state/checkpoint", {"checkpoint": {}, "subgraphs": "true"}, "subgraphs"),
    ("POST", "state/checkpoint", {"checkpoint": {}, "subgraphs": 1}, "subgraphs"),
    ("GET", "state?subgraphs=x", None, "subgraphs"),  # ref 200 (read as false)
    ("POST", "state", {"values": {"items": ["u"]}, "checkpoint_id": 5}, "checkpoint_id"),
    ("POST", "state", {"values": {"items": ["u"]}, "checkpoint": 5}, "checkpoint"),
    ("POST", "state", {"values": {"items": ["u"]}, "as_node": 5}, "as_node"),  # ref 422
    ("POST", "state", {"values": 5}, "values"),  # ref 422
    ("POST", "state", {"values": {"items": 5}}, "values"),  # a reducer's TypeError: ref 500
]


@pytest.mark.parametrize(("method", "path", "body", "field"), BAD_STATE_INPUTS)
async def test_a_state_input_of_the_wrong_type_is_a_4xx_naming_it(
    http_sqlite: httpx.AsyncClient, method: str, path: str, body: object, field: str
) -> None:
    """Each answer is a 422 (or 400) that names the field, and writes nothing."""
    http = http_sqlite
    tid = (await http.post("/threads", json={})).json()["thread_id"]
    first = {"assistant_id": "dispatch", "input": {"items": []}}
    ran = await http.post(f"/threads/{tid}/runs/wait", json=first)
    assert ran.status_code == 200
    history = (await http.post(f"/threads/{tid}/history", json={"limit": 100})).json()
    options = {} if body is None else {"json": body}
    answer = await http.request(method, f"/threads/{tid}/{path}", **options)
    assert answer.status_code in (400, 422), answer.text
    assert field in answer.text
    assert (await http.post(f"/threads/{tid}/history", json={"limit": 100})).json() == history


async def test_a_commands_goto_sends_and_its_update_pairs(http_sqlite: httpx.AsyncClient) -> None:
    """`goto` objects become `Send`s, a list of [key, value] pairs is an update, as
    the reference's `map_cmd`. The reference answered, on a thread that ran
    `dispatch` once (`{"items": ["started"]}`): goto `{"node": "collect", "input":
    {"item": "x"}}` -> `{"items": ["started", "collected x"]}` (the same on a new
    thread), a list of two Sends -> both collected, `update: [["items", ["paired"]]]`
    -> `{"items": ["started", "paired"]}`; goto `{"node": "collect"}` (no input), `5`,
    or a list mixing names and Sends -> 422."""
    http = http_sqlite

    async def commanded(command: dict, ran_before: bool = True) -> httpx.Response:
        tid = (await http.post("/threads", json={})).json()["thread_id"]
        if ran_before:
            first = {"assistant_id": "dispatch", "input": {"items": []}}
            await http.post(f"/threads/{tid}/runs/wait", json=first)
        body = {"assistant_id": "dispatch", "command": command}
        return await http.post(f"/threads/{tid}/runs/wait", json=body)

    send = {"node": "collect", "input": {"item": "x"}}
    assert (await commanded({"goto": send})).json() == {"items": ["started", "collected x"]}
    fresh = await commanded({"goto": send}, ran_before=False)
    assert fresh.json() == {"items": ["started", "collected x"]}
    two = [send, {"node": "collect", "input": {"item": "y"}}]
    both = (await commanded({"goto": two})).json()["items"]
    assert sorted(both) == ["collected x", "collected y", "started"]
    paired = await commanded({"update": [["items", ["paired"]]]})
    assert paired.json() == {"items": ["started", "paired"]}
    for bad in ({"node": "collect"}, 5, [send, "start"]):
        refused = await commanded({"goto": bad})
        assert refused.status_code == 422, refused.text
        assert "command.goto" in refused.text


async def test_threads_search_sorts_by_state_updated_at(http: httpx.AsyncClient) -> None:
    """The reference's `POST /threads/search` takes `sort_by: state_updated_at`
    (Waybill answered 422): the thread whose state changed last comes first."""
    tag = {"sorted": uuid.uuid4().hex}
    older = (await http.post("/threads", json={"metadata": tag})).json()["thread_id"]
    newer = (await http.post("/threads", json={"metadata": tag})).json()["thread_id"]
    run = {"assistant_id": "dispatch", "input": {"items": []}}
    await http.post(f"/threads/{older}/runs/wait", json=run)  # its state changes last

    async def order(sort_by: str, sort_order: str) -> list[str]:
        body = {"metadata": tag, "sort_by": sort_by, "sort_order": sort_order}
        reply = await http.post("/threads/search", json=body)
        assert reply.status_code == 200, reply.text
        return [thread["thread_id"] for thread in reply.json()]

    assert await order("state_updated_at", "desc") == [older, newer]
    assert await order("state_updated_at", "asc") == [newer, older]
    assert await order("created_at", "desc") == [newer, older]


async def test_threads_carry_config_error_and_state_updated_at(http: httpx.AsyncClient) -> None:
    """`GET /threads/{id}` of the reference: a new thread `config: {}`,
    `state_updated_at == created_at` (and no `error` key: Waybill says null); after a
    run with `config: {"configurable": {"k": 1}, "tags": ["t"]}`: `config:
    {"configurable": {}, "tags": ["t"]}`, `error: null`, `state_updated_at` the run's
    end; after a failed run `error: {"error": "ValueError", "message": "asked to
    fail"}`, status `error`; after an interrupt() `error: null`, status
    `interrupted`; after a cancel `error: {"error": "UserInterrupt", ...}`."""

    async def thread_after(body: dict | None, tid: str | None = None) -> dict:
        tid = tid or (await http.post("/threads", json={})).json()["thread_id"]
        if body is not None:
            await http.post(f"/threads/{tid}/runs/wait", json=body)
        return (await http.get(f"/threads/{tid}")).json()

    new = await thread_after(None)
    assert (new["config"], new["error"]) == ({}, None)
    assert new["state_updated_at"] == new["created_at"]
    run = {"assistant_id": "dispatch", "input": {"items": []}}
    config = {"configurable": {"k": 1}, "tags": ["t"]}
    done = await thread_after({**run, "config": config}, new["thread_id"])
    assert done["config"] == {"configurable": {}, "tags": ["t"]}
    assert (done["status"], done["error"]) == ("idle", None)
    assert done["state_updated_at"] > new["state_updated_at"]
    failed = await thread_after({**run, "input": {"fail": True}})
    assert failed["status"] == "error"
    assert failed["error"] == {"error": "ValueError", "message": "asked to fail"}
    # update_state clears it, as the reference's: the state is the client's now.
    await http.post(f"/threads/{failed['thread_id']}/state", json={"values": {"items": ["u"]}})
    updated = (await http.get(f"/threads/{failed['thread_id']}")).json()
    assert updated["error"] is None
    assert updated["state_updated_at"] > failed["state_updated_at"]
    paused = await thread_after({"assistant_id": "approval", "input": {"action": "go"}})
    assert (paused["status"], paused["error"]) == ("interrupted", None)
    tid = (await http.post("/threads", json={})).json()["thread_id"]
    slow = {"assistant_id": "shaped", "input": {"question": "slow 30"}}
    started = (await http.post(f"/threads/{tid}/runs", json=slow)).json()
    await _until_running(http, tid, started["run_id"])
    await http.post(f"/threads/{tid}/runs/{started['run_id']}/cancel?wait=true")
    cancelled = (await http.get(f"/threads/{tid}")).json()
    assert cancelled["status"] == "interrupted"
    assert cancelled["error"]["error"] == "UserInterrupt"
    assert cancelled["config"] == {"configurable": {}}


async def _until_running(http: httpx.AsyncClient, tid: str, rid: str) -> None:
    for _ in range(400):
        if (await http.get(f"/threads/{tid}/runs/{rid}")).json()["status"] == "running":
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"run {rid} never started")
