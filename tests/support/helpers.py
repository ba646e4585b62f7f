"""What many test files share: the scripted model's inputs, waiting for a run's
end, reading SSE, and the `waybill` command. Stacks live in tests/support/stacks.py."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from langgraph_sdk.client import LangGraphClient

from waybill.common.statuses import ACTIVE_RUN_STATUSES

# ---- what the scripted model is told ---------------------------------------------------


def says(*texts: str) -> dict[str, Any]:
    """A graph input of user messages, one per text."""
    return {"messages": [{"role": "user", "content": text} for text in texts]}


def slow(seconds: float) -> dict[str, Any]:
    """An input whose run calls the `wait` tool for `seconds`."""
    return says(f'/tool wait {{"seconds": {seconds}}}')


def tools(*steps: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    """A scripted agent that calls these tools in turn, one per model turn."""
    script = [{"name": name, "args": args} for name, args in steps]
    return says(f"/tools {json.dumps(script)}")


def write(path: str, content: str) -> tuple[str, dict[str, Any]]:
    return ("write_file", {"path": path, "content": content})


def present(*paths: str) -> tuple[str, dict[str, Any]]:
    return ("present_files", {"paths": list(paths)})


def chat_writer(run: dict[str, Any]) -> dict[str, Any]:
    """Who wrote on the chat platform, for a channel's run: in the run's caller
    (`langgraph_auth_user`), never in its context (the client's)."""
    caller: dict[str, Any] = run["kwargs"]["config"]["configurable"]["langgraph_auth_user"]
    return dict(caller["channel"])


# A project's smallest graph (a file tests write into their project folders).
SHOUT_GRAPH_PY = """
from typing_extensions import TypedDict
from langgraph.graph import END, START, StateGraph


class State(TypedDict):
    text: str


def shout(state: State) -> dict:
    return {"text": state["text"].upper()}


builder = StateGraph(State)
builder.add_node("shout", shout)
builder.add_edge(START, "shout")
builder.add_edge("shout", END)
graph = builder.compile()
"""


# ---- a run's end, through langgraph-sdk --------------------------------------------------


async def after_its_end(client: LangGraphClient, thread_id: str, run_id: str) -> dict[str, Any]:
    """The run once it has ended. A run with a cancel on record reads `interrupted`
    before its runner has stopped it: join waits for its log's close, which follows
    its terminal write."""
    await client.runs.join(thread_id, run_id)
    run: dict[str, Any] = await client.runs.get(thread_id, run_id)
    return run


async def poll_until_done(client: LangGraphClient, thread_id: str, run_id: str) -> dict[str, Any]:
    for _ in range(600):
        run = await client.runs.get(thread_id, run_id)
        if run["status"] not in ACTIVE_RUN_STATUSES:
            return await after_its_end(client, thread_id, run_id)
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} did not finish in 30 s: {run}")


async def wait_for_status(
    client: LangGraphClient, thread_id: str, run_id: str, status: str
) -> dict[str, Any]:
    for _ in range(400):
        run = await client.runs.get(thread_id, run_id)
        if run["status"] == status:
            if status in ACTIVE_RUN_STATUSES:
                return run
            return await after_its_end(client, thread_id, run_id)
        await asyncio.sleep(0.025)
    raise AssertionError(f"run {run_id} never reached {status}; last {run['status']}")


async def start_slow_tool(client: LangGraphClient, thread_id: str, seconds: float = 30) -> dict:
    """A run that calls the `wait` tool, and returns once the tool is running."""
    run = await client.runs.create(
        thread_id, "lead_agent", input=slow(seconds), stream_mode="updates"
    )
    async for part in client.runs.join_stream(thread_id, run["run_id"], last_event_id="-1"):
        if part.event == "updates" and "agent" in part.data:
            return run  # the model asked for the tool; the tools node is now waiting
    raise AssertionError("the run ended before calling its tool")


# ---- SSE, read by hand -------------------------------------------------------------------


def parse_sse(body: str) -> list[dict[str, str]]:
    """Raw SSE frames, comments (heartbeats) dropped."""
    frames = []
    for block in body.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            if line.startswith(":") or not line:
                continue
            name, _, value = line.partition(": ")
            fields[name] = value
        if fields:
            frames.append(fields)
    return frames


@dataclass
class Frame:
    seq: int
    event: str
    data: Any


async def sse(response: httpx.Response) -> AsyncIterator[Frame]:
    """LangGraph Platform's SSE, frame by frame (heartbeat comments skipped)."""
    fields: dict[str, str] = {}
    async for line in response.aiter_lines():
        if line == "":
            if "event" in fields:
                yield Frame(int(fields["id"]), fields["event"], json.loads(fields["data"]))
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")


def exactly_once(frames: list[Frame]) -> None:
    """Sequence numbers 0..n, each once, in order: nothing lost, nothing repeated."""
    assert [f.seq for f in frames] == list(range(len(frames))), [f.seq for f in frames]
    assert frames[0].event == "metadata"


async def stream_until_tool_call(
    raw: httpx.AsyncClient, thread_id: str, seconds: int = 2
) -> tuple[str, list]:
    """Start a run that calls the slow tool; return once the tool call is journaled."""
    body = {"assistant_id": "lead_agent", "input": slow(seconds), "stream_mode": ["updates"]}
    frames: list[dict[str, str]] = []
    async with raw.stream("POST", f"/threads/{thread_id}/runs/stream", json=body) as response:
        run_id = response.headers["content-location"].rsplit("/", 1)[1]
        buffer = ""
        async for chunk in response.aiter_text():
            buffer += chunk
            frames = parse_sse(buffer.rsplit("\n\n", 1)[0] + "\n\n") if "\n\n" in buffer else []
            if any(f["event"] == "updates" and '"agent"' in f["data"] for f in frames):
                break
    return run_id, frames


# ---- the `waybill` command ---------------------------------------------------------------

WAYBILL = str(Path(sys.executable).parent / "waybill")  # the installed console script

Completed = subprocess.CompletedProcess[str]


def ok(done: Completed) -> str:
    """Its output, once it exited 0."""
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout
