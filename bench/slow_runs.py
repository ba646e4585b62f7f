"""Runs that sit inside the slow `wait` tool, followed over SSE, for cancel and takeover.

The scripted model answers `/tool wait {"seconds": N}` with a call to the `wait`
tool; once the `agent` node's `updates` event is in the journal, the tools node
is starting, and then waits. The run's stream is joined with `Last-Event-ID: -1`
(replay from the first event, then follow live) and closes only after the run's
terminal status is stored, so "stream closed" is when a client sees the run end.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx

from bench import sse
from bench.through_gateway import create_thread
from bench.timing import BenchError


@dataclass(frozen=True)
class RunRef:
    thread_id: str
    run_id: str

    @property
    def path(self) -> str:
        return f"/threads/{self.thread_id}/runs/{self.run_id}"


def slow_tool_input(seconds: float) -> dict[str, object]:
    return {"messages": [{"role": "user", "content": f'/tool wait {{"seconds": {seconds}}}'}]}


def start_slow_tool_run(client: httpx.Client, tool_seconds: float) -> RunRef:
    thread_id = create_thread(client)
    body = {
        "assistant_id": "lead_agent",
        "input": slow_tool_input(tool_seconds),
        "stream_mode": ["updates"],
    }
    reply = client.post(f"/threads/{thread_id}/runs", json=body)
    reply.raise_for_status()
    return RunRef(thread_id, str(reply.json()["run_id"]))


@contextmanager
def followed(client: httpx.Client, run: RunRef, timeout_seconds: float) -> Iterator[sse.Frames]:
    """The run's events from its first one, as they arrive; exhausted when the stream closes."""
    headers = {"Last-Event-ID": "-1"}
    with client.stream("GET", f"{run.path}/stream", headers=headers) as response:
        response.raise_for_status()
        deadline = time.perf_counter() + timeout_seconds
        yield sse.frames(response.iter_lines(), deadline, f"run {run.run_id}")


def wait_until_in_tool(events: sse.Frames) -> None:
    """Consume events until the model has asked for the tool: the tools node is now waiting."""
    for name, data in events:
        fail_on_error(name, data)
        if name == "updates" and "agent" in json.loads(data):
            return
    raise BenchError("the run ended before calling its tool")


def wait_for_attempt(events: sse.Frames, attempt: int) -> None:
    """Consume events until the `metadata` event that opens `attempt` of the run."""
    for name, data in events:
        fail_on_error(name, data)
        if name == "metadata" and json.loads(data).get("attempt") == attempt:
            return
    raise BenchError(f"the stream closed without an attempt {attempt}")


def follow_to_end(events: sse.Frames) -> None:
    for name, data in events:
        fail_on_error(name, data)


def fail_on_error(name: str, data: str) -> None:
    if name == "error":
        raise BenchError(f"the run failed: {data}")


def run_status(client: httpx.Client, run: RunRef) -> str:
    reply = client.get(run.path)
    reply.raise_for_status()
    return str(reply.json()["status"])


def expect_status(client: httpx.Client, run: RunRef, expected: str) -> None:
    status = run_status(client, run)
    if status != expected:
        raise BenchError(
            f"run {run.run_id} ended {status!r} after its stream closed, not {expected!r}"
        )
