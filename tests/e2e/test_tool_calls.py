"""Tool calls run once: a runner SIGKILLed between a tool's effect and its checkpoint,
another taking the run over, and every kind of call answered as documented — a
finished call replayed from its record (one effect), a non-idempotent call left
started answered with an error the model sees (one effect), an idempotent one run
again — on SQLite and on Postgres, through a `create_agent` graph's ToolNode."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import InternalServerError

from tests.support.helpers import poll_until_done
from tests.support.paths import FIXTURES
from tests.support.stacks import TwoRunners, eventually, fresh_postgres_database, two_runner_stack
from waybill.services.runner.effects.tool_calls import INTERRUPTED_TOOL_REPLY, REPLAYED_KEY

pytestmark = pytest.mark.timeout(180)

EFFECTS_GRAPHS = FIXTURES / "effects_graphs" / "langgraph.json"


def plan(*calls: tuple[str, str]) -> dict[str, Any]:
    """The effects graph's input: its model calls these tools at once."""
    content = json.dumps({"calls": [{"name": n, "args": {"key": k}} for n, k in calls]})
    return {"messages": [{"role": "user", "content": content}]}


class CallRows:
    """The runner's `tool_calls` rows, read straight from its database."""

    def __init__(self, data_dir: Path, url: str | None) -> None:
        self.data_dir, self.url = data_dir, url

    def of(self, run_id: str, kind: str = "tool") -> dict[str, str]:
        """name -> status of the run's calls of that kind (tool, model)."""
        query = "SELECT name, status FROM tool_calls WHERE kind = '" + kind + "' AND run_id = "
        if self.url is None:
            with sqlite3.connect(self.data_dir / "checkpoints.db") as conn:
                rows = conn.execute(query + "?", (run_id,)).fetchall()
        else:
            plain = self.url.replace("postgresql+asyncpg://", "postgresql://")
            with psycopg.connect(plain) as conn:
                rows = conn.execute(query + "%s", (run_id,)).fetchall()
        return dict(rows)


@contextmanager
def effects_stack_in(mode: str, data_dir: Path) -> Iterator[tuple[TwoRunners, CallRows, Path]]:
    """Two runners serving the effects graphs, on SQLite or on Postgres."""
    effects = data_dir / "effects"
    effects.mkdir()
    env = {"WAYBILL_GRAPHS": str(EFFECTS_GRAPHS), "WAYBILL_TEST_EFFECTS_DIR": str(effects)}
    if mode == "sqlite":
        with two_runner_stack(data_dir, **env) as two:
            yield two, CallRows(data_dir, None), effects
        return
    with fresh_postgres_database() as url, two_runner_stack(data_dir, url, **env) as two:
        yield two, CallRows(data_dir, url), effects


async def until(check: Any, what: str, seconds: float = 30) -> Any:
    for _ in range(int(seconds / 0.05)):
        found = check()
        if found:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"never: {what}")


async def state_of(client: LangGraphClient, thread_id: str) -> Any:
    """The thread's state; None while the gateway's reads still try the dead runner."""
    try:
        return await client.threads.get_state(thread_id)
    except InternalServerError:
        return None


async def kill_mid_tool(
    two: TwoRunners, rows: CallRows, effects: Path, graph_id: str
) -> tuple[str, str, dict[str, Any]]:
    """A run calling the three tools at once, its runner SIGKILLed once `charge` has
    finished and the slow two are executing; returns (thread, run, tool answers)."""
    stack = two.stack
    client = get_client(url=stack.url, timeout=30)
    thread_id = (await client.threads.create())["thread_id"]
    calls = plan(("charge", "a"), ("slow_charge", "b"), ("slow_lookup", "c"))
    run_id = (await client.runs.create(thread_id, graph_id, input=calls))["run_id"]

    expected = {"charge": "finished", "slow_charge": "started", "slow_lookup": "started"}
    await until(lambda: rows.of(run_id) == expected, f"the calls recorded as {expected}")
    victim = two.executing()
    stack.processes[victim].send_signal(signal.SIGKILL)
    stack.processes[victim].wait()
    (effects / "release").touch()  # from now on the slow tools return at once

    ended = await poll_until_done(client, thread_id, run_id)
    assert ended["status"] == "success", ended
    assert two.stats(two.other_than(victim))["runs_taken_over"] == 1

    # One effect per call; the idempotent lookup ran twice, as it declared it may.
    lines = (effects / "effects.log").read_text().splitlines()
    assert sorted(lines) == ["charge a", "slow_charge b", "slow_lookup c", "slow_lookup c"]

    state = await eventually(lambda: state_of(client, thread_id), "a runner answering reads")
    messages = state["values"]["messages"]
    answers = {m["name"]: m for m in messages if m["type"] == "tool"}
    assert answers["charge"]["content"] == "charged a"
    # Started, never finished, not idempotent: not run again; the model is told.
    assert answers["slow_charge"]["status"] == "error"
    assert answers["slow_charge"]["content"] == INTERRUPTED_TOOL_REPLY
    # Idempotent: run again, its second result is the answer.
    assert answers["slow_lookup"]["content"] == "looked up c"
    assert messages[-1]["type"] == "ai" and INTERRUPTED_TOOL_REPLY in messages[-1]["content"]
    assert rows.of(run_id) == rows.of(run_id, "model") == {}  # the run ended: record gone
    await client.aclose()
    return thread_id, run_id, answers


async def journal_records(url: str, thread_id: str, run_id: str) -> set[tuple[str, str]]:
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        reply = await http.get(
            f"/threads/{thread_id}/runs/{run_id}/events",
            params={"type": "tool_replayed,tool_ambiguous,tool_rerun"},
        )
    return {(e["type"], e["data"]["name"]) for e in reply.json()}


@pytest.mark.parametrize("mode", ["sqlite", "postgres"])
async def test_a_runner_killed_between_an_effect_and_its_checkpoint_leaves_one_effect(
    mode: str, tmp_path: Path
) -> None:
    """A ToolNode runs a step's calls in one task: `charge` finished, but the step
    (and so its checkpoint) had not, when the runner died."""
    with effects_stack_in(mode, tmp_path) as (two, rows, effects):
        thread_id, run_id, answers = await kill_mid_tool(two, rows, effects, "effects")
        # Answered from the record, and marked so on the stream and in the state.
        assert answers["charge"]["response_metadata"][REPLAYED_KEY] is True
        assert await journal_records(two.stack.url, thread_id, run_id) == {
            ("tool_replayed", "charge"),
            ("tool_ambiguous", "slow_charge"),
            ("tool_rerun", "slow_lookup"),
        }


async def test_create_agent_tools_run_once_across_a_takeover(tmp_path: Path) -> None:
    """`create_agent` runs each call as a task of its own: a finished one is kept by
    LangGraph's pending writes, the cut ones are answered by the record."""
    with effects_stack_in("sqlite", tmp_path) as (two, rows, effects):
        thread_id, run_id, _ = await kill_mid_tool(two, rows, effects, "effects_agent")
        found = await journal_records(two.stack.url, thread_id, run_id)
        assert {("tool_ambiguous", "slow_charge"), ("tool_rerun", "slow_lookup")} <= found


async def test_a_model_call_recorded_before_the_kill_is_not_paid_again(tmp_path: Path) -> None:
    """The model answered and its tool was executing, in one node (no checkpoint
    between them), when the runner died: the takeover runs the node again, the model
    call is answered from the record — one call to the provider, the same tool call
    id — so the tool call is found in its record too (ambiguous, not run again)."""
    with effects_stack_in("sqlite", tmp_path) as (two, rows, effects):
        stack = two.stack
        client = get_client(url=stack.url, timeout=30)
        thread_id = (await client.threads.create())["thread_id"]
        calls = plan(("slow_charge", "b"))
        run_id = (await client.runs.create(thread_id, "effects_model", input=calls))["run_id"]
        await until(lambda: rows.of(run_id) == {"slow_charge": "started"}, "the tool started")
        assert rows.of(run_id, "model") == {"model": "finished"}  # written before it
        victim = two.executing()
        stack.processes[victim].send_signal(signal.SIGKILL)
        stack.processes[victim].wait()
        (effects / "release").touch()

        ended = await poll_until_done(client, thread_id, run_id)
        assert ended["status"] == "success", ended
        lines = (effects / "effects.log").read_text().splitlines()
        assert lines == ["model", "slow_charge b"]
        state = await eventually(lambda: state_of(client, thread_id), "a runner answering reads")
        answer, reply = state["values"]["messages"][-2:]
        assert answer["tool_calls"][0]["name"] == "slow_charge"
        assert answer["response_metadata"][REPLAYED_KEY] is True
        assert reply["tool_call_id"] == answer["tool_calls"][0]["id"]
        assert reply["content"] == INTERRUPTED_TOOL_REPLY
        async with httpx.AsyncClient(base_url=stack.url, timeout=30) as http:
            reply = await http.get(
                f"/threads/{thread_id}/runs/{run_id}/events", params={"type": "llm_replayed"}
            )
        assert len(reply.json()) == 1
        await client.aclose()
