"""A project's `http.app` lifespan runs where graphs run (issue 39).

On LangGraph Platform the API server runs graphs in its own process, and its
dedicated queue workers enter the app's lifespan too (`langgraph_api/
queue_entrypoint.py`): a client or a pool the lifespan opens in a module is there
for the graphs. Waybill's graphs run in the runner, so the runner enters the
lifespan at start-up and exits it at shutdown, as the gateway does for its routes.
Real processes, through the SDK."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from langgraph_sdk import get_client

from tests.support.stacks import stack_env, stack_in_mode
from waybill.common.launch import Stack
from waybill.common.project import PROJECT_EXIT_CODE

pytestmark = pytest.mark.timeout(120)

RUNNER = "waybill.services.runner.server"
GATEWAY = "waybill.gateway.server"

# A module the app and the graph both import: where the lifespan puts its "client".
RESOURCES_PY = """
CLIENT = None
"""

# The lifespan opens the client, and leaves a marker per process at start-up and
# at shutdown: `<start|stop>-<the process's module>-<pid>`.
WEBAPP_PY = """
import os
import sys
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI

import resources

MARKERS = Path({markers!r})


def mark(what):
    process = sys.modules["__main__"].__spec__.name
    (MARKERS / f"{{what}}-{{process}}-{{os.getpid()}}").write_text("")
    return process


@asynccontextmanager
async def lifespan(app):
    if {fail!r}:
        raise RuntimeError("the database is not there")
    process = mark("start")
    resources.CLIENT = f"client opened in {{process}} {{os.getpid()}}"
    yield
    resources.CLIENT = None
    mark("stop")


app = FastAPI(lifespan=lifespan)


@app.get("/client")
async def client():
    return {{"client": resources.CLIENT}}
"""

GRAPH_PY = """
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

import resources


class State(TypedDict, total=False):
    client: str


def use_client(state: State) -> dict:
    return {"client": resources.CLIENT}


builder = StateGraph(State)
builder.add_node("use_client", use_client)
builder.add_edge(START, "use_client")
builder.add_edge("use_client", END)
graph = builder.compile()
"""


def write_project(root: Path, markers: Path, fail: bool = False) -> Path:
    markers.mkdir(parents=True, exist_ok=True)
    (root / "resources.py").write_text(textwrap.dedent(RESOURCES_PY))
    webapp = textwrap.dedent(WEBAPP_PY).format(markers=str(markers), fail=fail)
    (root / "webapp.py").write_text(webapp)
    (root / "graph.py").write_text(textwrap.dedent(GRAPH_PY))
    manifest = root / "langgraph.json"
    config = {"graphs": {"client": "./graph.py:graph"}, "http": {"app": "./webapp.py:app"}}
    manifest.write_text(json.dumps(config))
    return manifest


def marked(markers: Path, what: str, process: str) -> set[int]:
    """The pids of `process` that left a `what` marker."""
    prefix = f"{what}-{process}-"
    return {int(p.name[len(prefix) :]) for p in markers.iterdir() if p.name.startswith(prefix)}


async def test_a_graph_sees_what_the_app_lifespan_opened_in_the_runner(tmp_path: Path) -> None:
    root, markers = tmp_path / "project", tmp_path / "markers"
    root.mkdir()
    manifest = write_project(root, markers)
    (tmp_path / "stack").mkdir()
    with stack_in_mode("sqlite", tmp_path / "stack", WAYBILL_GRAPHS=str(manifest)) as stack:
        client = get_client(url=stack.url)
        try:
            thread = await client.threads.create()
            output = await client.runs.wait(thread["thread_id"], "client", input={})
            # The gateway's own copy serves its routes, as before.
            gateway_view = await client.http.get("/client")
        finally:
            await client.aclose()
        (runner_pid,) = marked(markers, "start", RUNNER)
        (gateway_pid,) = marked(markers, "start", GATEWAY)
        assert runner_pid == pid_of(stack, "runner")
        assert not marked(markers, "stop", RUNNER)  # open for as long as the runner runs
    assert output == {"client": f"client opened in {RUNNER} {runner_pid}"}
    assert gateway_view == {"client": f"client opened in {GATEWAY} {gateway_pid}"}
    # Stopped: each process closed what its lifespan opened.
    assert marked(markers, "stop", RUNNER) == {runner_pid}
    assert marked(markers, "stop", GATEWAY) == {gateway_pid}


def pid_of(stack: Stack, name: str) -> int:
    return stack.processes[name].pid


def test_a_lifespan_that_fails_stops_the_runner_with_one_line(tmp_path: Path) -> None:
    root, markers = tmp_path / "project", tmp_path / "markers"
    root.mkdir()
    manifest = write_project(root, markers, fail=True)
    env = {**os.environ, **stack_env(tmp_path / "stack", WAYBILL_GRAPHS=str(manifest))}
    (tmp_path / "stack").mkdir()
    for module in ("waybill.common.migrate", RUNNER):
        done = subprocess.run(
            [sys.executable, "-m", module], env=env, capture_output=True, text=True, timeout=60
        )
    said = done.stdout + done.stderr
    assert done.returncode == PROJECT_EXIT_CODE, said
    assert (
        "refusing to start: http.app './webapp.py:app': its lifespan failed at start-up "
        "(RuntimeError: the database is not there)"
    ) in said
    assert "Traceback" not in said
