"""`waybill runs tail`: follow a run's events to its end, with a progress line.

It joins the run's stream from the first event (`Last-Event-ID: -1`) and, when
the stream drops or a stopping gateway ends it while the run goes on, resumes
after the last event it saw, as the SDK does."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

import httpx
from httpx_sse import EventSource

from waybill.cli.api import CommandFailed, Gateway, check, unreachable

ACTIVE = ("pending", "running")


@dataclass
class SseEvent:
    id: str | None
    event: str
    data: Any


def sse_events(reply: httpx.Response) -> Iterator[SseEvent]:
    """Server-sent events of a stream (httpx-sse; heartbeats, i.e. comments, skipped),
    their data read as JSON where it is."""
    for sse in EventSource(reply).iter_sse():
        try:
            data = json.loads(sse.data) if sse.data else None
        except ValueError:
            data = sse.data
        yield SseEvent(sse.id or None, sse.event, data)


@dataclass
class Progress:
    """What the run did so far: a line per step, and on a terminal one status line
    redrawn in place (events, tokens streamed, the node at work, time)."""

    out: TextIO
    live: bool
    run_id: str
    started: float = field(default_factory=time.monotonic)
    events: int = 0
    tokens: int = 0
    node: str = ""
    messages: list[dict[str, Any]] = field(default_factory=list)
    error: dict[str, Any] | None = None

    def log(self, text: str) -> None:
        if self.live:
            self.out.write("\r\033[K")
        self.out.write(text + "\n")
        self.redraw()

    def redraw(self) -> None:
        if not self.live:
            return
        elapsed = time.monotonic() - self.started
        node = f" · {self.node}" if self.node else ""
        self.out.write(
            f"\r\033[K… {self.run_id[:8]} · {self.events} events · {self.tokens} tokens"
            f"{node} · {elapsed:.1f}s"
        )
        self.out.flush()

    def see(self, event: SseEvent) -> None:
        self.events += 1
        name, data = event.event, event.data
        kind = name.split("|", 1)[0]
        if kind == "metadata" and isinstance(data, dict):
            self.log(f"run {data.get('run_id', self.run_id)} attempt {data.get('attempt', 1)}")
        elif kind == "updates" and isinstance(data, dict):
            for node, update in data.items():
                self.node = node
                self.log(f"step {node}{_tool_calls(update)}")
        elif kind == "values" and isinstance(data, dict):
            self.messages = list(data.get("messages") or [])
        elif kind.startswith("messages"):
            self.tokens += _tokens(data)
            meta = data[1] if isinstance(data, list) and len(data) > 1 else {}
            if isinstance(meta, dict) and meta.get("langgraph_node"):
                self.node = str(meta["langgraph_node"])
        elif kind == "error":
            self.error = data if isinstance(data, dict) else {"message": str(data)}
            self.log(f"error {self.error.get('error', '')}: {self.error.get('message', '')}")
        elif kind == "custom":
            self.log(f"custom {json.dumps(data)[:120]}")
        self.redraw()

    def finish(self, status: str) -> None:
        if self.live:
            self.out.write("\r\033[K")
        answer = _last_answer(self.messages)
        if answer:
            self.out.write(f"answer: {answer}\n")
        elapsed = time.monotonic() - self.started
        self.out.write(
            f"run {self.run_id} {status} · {self.events} events · {self.tokens} tokens "
            f"streamed · {elapsed:.1f}s\n"
        )
        self.out.flush()


def _tool_calls(update: Any) -> str:
    if not isinstance(update, dict):
        return ""
    calls = [
        call.get("name", "?")
        for message in update.get("messages") or []
        if isinstance(message, dict)
        for call in message.get("tool_calls") or []
    ]
    return f" → tool {', '.join(calls)}" if calls else ""


def _tokens(data: Any) -> int:
    chunk = data[0] if isinstance(data, list) and data else data
    if isinstance(chunk, dict) and chunk.get("content"):
        return 1
    return 0


def _last_answer(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("type") == "ai" and isinstance(message.get("content"), str):
            return str(message["content"])[:500]
    return ""


def follow(
    gateway: Gateway,
    thread_id: str,
    run_id: str,
    progress: Progress,
    retries: int = 5,
    retry_seconds: float = 1.0,
) -> str:
    """Follow the run's stream to its end; return the run's final status."""
    last_id = "-1"
    failures = 0
    path = f"/threads/{thread_id}/runs/{run_id}"
    while True:
        try:
            with gateway.http.stream(
                "GET", f"{path}/stream", headers={"Last-Event-ID": last_id}, timeout=None
            ) as reply:
                if not reply.is_success:
                    reply.read()
                    check(reply)
                for event in sse_events(reply):
                    if event.id is not None:
                        last_id = event.id
                    failures = 0
                    progress.see(event)
        except httpx.TransportError as error:
            failures += 1
            if failures > retries:
                raise CommandFailed(unreachable(gateway.url, error)) from error
            time.sleep(retry_seconds)
            continue
        status = str(gateway.get(path)["status"])
        if status not in ACTIVE or progress.error is not None:
            return status
        # The stream ended but the run goes on (a gateway stopped): resume.
        failures += 1
        if failures > retries:
            raise CommandFailed(f"the stream of run {run_id} keeps ending while it is {status}")
        time.sleep(retry_seconds)
