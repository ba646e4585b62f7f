"""`waybill dev`: the embedded stack on a project, restarted when a file of the
project changes; a broken edit is reported, and fixing it brings the stack back."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from langgraph_sdk import get_client

from tests.support.helpers import WAYBILL
from tests.support.stacks import free_port, stack_env, wait_until

GRAPH_PY = """
import typing_extensions
from langgraph.graph import END, START, StateGraph

from words import SUFFIX


class State(typing_extensions.TypedDict):
    text: str


def decorate(state: State) -> dict:
    return {"text": state["text"] + SUFFIX}


builder = StateGraph(State)
builder.add_node("decorate", decorate)
builder.add_edge(START, "decorate")
builder.add_edge("decorate", END)
graph = builder.compile()
"""

WEBAPP_PY = """
from fastapi import FastAPI

from words import SUFFIX

app = FastAPI()


@app.get("/suffix")
async def suffix() -> dict:
    return {"suffix": SUFFIX}
"""


@dataclass
class Dev:
    process: subprocess.Popen[bytes]
    output: Path
    url: str
    root: Path

    def said(self) -> str:
        return self.output.read_text()

    def wait_for(self, text: str, after: int = 0, seconds: float = 60) -> None:
        wait_until(
            lambda: text in self.said()[after:], f"'{text}' in waybill dev's output", seconds
        )


def write_project(root: Path) -> Path:
    root.mkdir()
    (root / "words.py").write_text('SUFFIX = "!"\n')
    (root / "graph.py").write_text(textwrap.dedent(GRAPH_PY))
    (root / "webapp.py").write_text(textwrap.dedent(WEBAPP_PY))
    manifest = {"graphs": {"decorate": "./graph.py:graph"}, "http": {"app": "./webapp.py:app"}}
    (root / "langgraph.json").write_text(json.dumps(manifest))
    return root / "langgraph.json"


def start(command: str, tmp_path: Path, *options: str) -> Dev:
    """`waybill <command> --config <project> --port <free port>`, output to a file."""
    manifest = write_project(tmp_path / "project")
    # stack_env names a test project in WAYBILL_GRAPHS: --config must win over it.
    env = {**os.environ, **stack_env(tmp_path / "data")}
    port = free_port()
    output = tmp_path / f"{command}.log"
    with output.open("wb") as sink:
        process = subprocess.Popen(
            [WAYBILL, command, "--config", str(manifest), "--port", str(port), *options],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    return Dev(process, output, f"http://127.0.0.1:{port}", manifest.parent)


def stop(running: Dev) -> None:
    running.process.send_signal(signal.SIGTERM)
    try:
        running.process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        running.process.kill()
    print(running.said()[-6000:])


@pytest.fixture
def dev(tmp_path: Path) -> Iterator[Dev]:
    running = start("dev", tmp_path, "--debounce", "0.2")
    try:
        running.wait_for("ready at", seconds=90)  # every service answers
        yield running
    finally:
        stop(running)


async def test_up_serves_the_project_config_names(tmp_path: Path) -> None:
    running = start("up", tmp_path)
    try:
        running.wait_for("ready at", seconds=90)  # every service answers
        assert await decorated(running.url, "up") == "up!"
        assert await suffix(running.url) == {"suffix": "!"}
    finally:
        stop(running)


async def decorated(url: str, text: str, graph: str = "decorate") -> str:
    client = get_client(url=url)
    try:
        thread = await client.threads.create()
        result = await client.runs.wait(thread["thread_id"], graph, input={"text": text})
        return str(result["text"])  # type: ignore[index,call-overload]
    finally:
        await client.aclose()


async def suffix(url: str) -> object:
    async with httpx.AsyncClient(base_url=url) as raw:
        return (await raw.get("/suffix")).json()


async def test_an_edit_is_served_by_the_next_run(dev: Dev) -> None:
    assert await decorated(dev.url, "hi") == "hi!"
    assert await suffix(dev.url) == {"suffix": "!"}

    seen = len(dev.said())
    (dev.root / "words.py").write_text('SUFFIX = "?"\n')
    dev.wait_for("words.py changed: restarting runner, gateway", seen)
    dev.wait_for("ready at", seen)
    assert await decorated(dev.url, "hi") == "hi?"
    assert await suffix(dev.url) == {"suffix": "?"}

    # langgraph.json itself: admission (the graphs' assistants) restarts too.
    seen = len(dev.said())
    manifest = dev.root / "langgraph.json"
    config = json.loads(manifest.read_text())
    config["graphs"]["again"] = "./graph.py:graph"
    manifest.write_text(json.dumps(config))
    dev.wait_for("langgraph.json changed: restarting admission, runner, gateway", seen)
    dev.wait_for("ready at", seen)
    assert await decorated(dev.url, "hi", graph="again") == "hi?"


async def test_a_broken_edit_is_reported_and_a_fix_brings_it_back(dev: Dev) -> None:
    seen = len(dev.said())
    (dev.root / "words.py").write_text("SUFFIX = \n")  # a syntax error
    dev.wait_for("it starts again on the next change", seen)
    assert "SyntaxError" in dev.said()[seen:]
    await asyncio.sleep(2)  # no crash loop: nothing is restarted while the file stays broken
    assert dev.said()[seen:].count("restarting") == 1
    assert dev.process.poll() is None  # `waybill dev` itself goes on

    seen = len(dev.said())
    (dev.root / "words.py").write_text('SUFFIX = "#"\n')
    dev.wait_for("ready at", seen)
    assert await decorated(dev.url, "ok") == "ok#"
