"""One run scope per attempt (services/runner/run/scope.py): a run's tool and middleware
find it in their config, it is never saved with a checkpoint, two runs at once on
one runner each see their own, and no per-run code of the runner reads the
settings on its own."""

from __future__ import annotations

import ast
import asyncio
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import get_client

from tests.support.paths import FIXTURES, REPO
from tests.support.stacks import stack_in_mode
from waybill.common.launch import Stack
from waybill.services.runner.run.scope import SCOPE_KEY, NoRunScope, RunScope

pytestmark = pytest.mark.timeout(180)

ROOT = REPO
RUNNER = ROOT / "services" / "runner"
SCOPE_GRAPHS = FIXTURES / "scope_graphs" / "langgraph.json"

# The runner's modules that may call get_settings(): process-level code, run once
# per process, never on a run's behalf.
PROCESS_LEVEL = {
    # The runner's start: reads the settings once and hands them to the worker,
    # whose executions copy each run's limits from them (scope.py).
    "services/runner/server.py",
    # The process's sandbox provider, made once from the `sandbox` section and
    # shared by every run (a run reaches it through its scope's RunSandbox).
    "services/runner/sandbox/leases.py",
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    data_dir = tmp_path_factory.mktemp("stack-run-scope")
    (data_dir / "probes").mkdir()
    with stack_in_mode(
        "sqlite",
        data_dir,
        WAYBILL_GRAPHS=str(SCOPE_GRAPHS),
        WAYBILL_TEST_SCOPE_DIR=str(data_dir / "probes"),
    ) as running:
        yield running


def reports(stack: Stack) -> list[dict[str, Any]]:
    log = Path(stack.env["WAYBILL_TEST_SCOPE_DIR"]) / "scopes.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


async def probed_run(stack: Stack, together: int) -> tuple[str, str]:
    """A run of the probe graph, to its end: (thread id, run id)."""
    client = get_client(url=stack.url)
    thread = (await client.threads.create())["thread_id"]
    run = await client.runs.create(
        thread,
        "scope_probe",
        input={"messages": [{"role": "user", "content": json.dumps({"together": together})}]},
    )
    await client.runs.join(thread, run["run_id"])
    ended = await client.runs.get(thread, run["run_id"])
    assert ended["status"] == "success", ended
    return thread, run["run_id"]


def of_run(stack: Stack, run_id: str) -> dict[str, dict[str, Any]]:
    """Where -> what it found, for one run (its first model call's middleware)."""
    found: dict[str, dict[str, Any]] = {}
    for report in reports(stack):
        if report["config_run_id"] == run_id:
            found.setdefault(report["where"], report)
    return found


async def test_a_tool_and_a_middleware_find_their_runs_scope(stack: Stack) -> None:
    thread_id, run_id = await probed_run(stack, together=1)
    found = of_run(stack, run_id)
    tool, middleware = found["tool"], found["middleware"]
    assert tool["scope"] == middleware["scope"]  # one scope for the whole attempt
    for report in (tool, middleware):
        assert (report["run_id"], report["thread_id"], report["epoch"]) == (run_id, thread_id, 1)
        assert report["sandbox"][:2] == [run_id, 1]
        assert report["gate"] is not None  # write_file among its tools: delivery verifies
        assert report["ledger_type"] == "ToolCalls"
        assert report["current"]  # the graph's task holds it too (the model-call cache)


async def test_the_scope_is_never_saved_with_a_checkpoint(stack: Stack) -> None:
    thread_id, _ = await probed_run(stack, together=1)
    client = get_client(url=stack.url)
    history = await client.threads.get_history(thread_id, limit=100)
    assert history
    for state in history:
        for config in (state["checkpoint"], state["parent_checkpoint"] or {}):
            assert not [key for key in config if key.startswith("__waybill")]
        assert SCOPE_KEY not in state["metadata"]
        assert not [key for key in state["metadata"] if key.startswith("__")]
    # And nothing of it in the saver's own rows (checkpoints, their metadata, writes).
    database = Path(stack.env["WAYBILL_DATA_DIR"]) / "checkpoints.db"
    with sqlite3.connect(database) as conn:
        tables = [
            row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
        ]
        for table in tables:
            for row in conn.execute(f'SELECT * FROM "{table}"'):  # noqa: S608
                for value in row:
                    raw = value if isinstance(value, bytes) else str(value).encode()
                    assert SCOPE_KEY.encode() not in raw, table


async def test_two_runs_at_once_on_one_runner_each_see_their_own_scope(stack: Stack) -> None:
    (_, first), (_, second) = await asyncio.gather(
        probed_run(stack, together=2), probed_run(stack, together=2)
    )
    mine, theirs = of_run(stack, first), of_run(stack, second)
    for found, run_id in ((mine, first), (theirs, second)):
        assert found["tool"]["run_id"] == found["middleware"]["run_id"] == run_id
        assert found["tool"]["scope"] == found["middleware"]["scope"]
    for part in ("scope", "gate", "slots", "ledger", "sandbox"):
        assert mine["tool"][part] != theirs["tool"][part], part
    assert mine["tool"]["sandbox"][0] == first and theirs["tool"]["sandbox"][0] == second


def test_outside_a_run_the_scope_is_missing_and_says_so() -> None:
    assert RunScope.find({"configurable": {"thread_id": "t"}}) is None
    assert RunScope.current() is None
    with pytest.raises(NoRunScope, match=SCOPE_KEY):
        RunScope.of({"configurable": {"thread_id": "t"}})


def settings_readers() -> dict[str, list[int]]:
    """Module -> the lines where it names get_settings (a call, or passing it on)."""
    found: dict[str, list[int]] = {}
    for path in sorted(RUNNER.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            named = (isinstance(node, ast.Name) and node.id == "get_settings") or (
                isinstance(node, ast.Attribute) and node.attr == "get_settings"
            )
            if named:
                found.setdefault(str(path.relative_to(ROOT)), []).append(node.lineno)
    return found


def test_only_process_level_code_of_the_runner_reads_the_settings() -> None:
    readers = settings_readers()
    per_run = {module: lines for module, lines in readers.items() if module not in PROCESS_LEVEL}
    assert per_run == {}, "per-run code reads its settings from its RunScope's limits"
    assert set(readers) == PROCESS_LEVEL  # an entry no longer needed leaves the list
