"""A deliberately small SSE reader: the client must cost far less than the server.

Waybill frames carry exactly one `data:` line, so a `data:` line is one event;
only `messages` payloads are parsed, and only until the first token is seen.
`frames` hands out every event's name and raw data, for callers that wait for one.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator

import orjson

from bench.timing import BenchError


class StreamTally:
    """Counts events as lines arrive and notes when the first and last ones came."""

    def __init__(self) -> None:
        self.events = 0
        self.event_name = ""
        self.first_token_at: float | None = None
        self.last_event_at: float | None = None

    def feed(self, line: str) -> None:
        if line.startswith("data:"):
            self._on_event(line[5:])
        elif line.startswith("event:"):
            self.event_name = line[6:].strip()
        # Blank lines, `id:` lines and `: heartbeat` comments carry nothing we count.

    def _on_event(self, data: str) -> None:
        self.events += 1
        self.last_event_at = time.perf_counter()
        if self.event_name == "error":
            raise BenchError(f"the run failed: {data.strip()}")
        waiting_for_token = self.first_token_at is None and self.event_name == "messages"
        if waiting_for_token and message_has_content(data):
            self.first_token_at = self.last_event_at


def message_has_content(data: str) -> bool:
    """`messages` data is `[message, metadata]`; a token is a non-empty `content`."""
    message, _metadata = orjson.loads(data)
    return bool(message.get("content"))


Frame = tuple[str, str]  # (event name, data)
Frames = Iterator[Frame]


def frames(lines: Iterable[str], deadline: float, what: str) -> Frames:
    """Every event of a stream as (name, data), until it closes or `deadline` passes."""
    name = ""
    for line in lines:
        # Heartbeats keep a stuck run's stream alive forever; give up instead.
        if time.perf_counter() > deadline:
            raise BenchError(f"{what} did not end in time")
        if line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            yield name, line[5:].strip()
