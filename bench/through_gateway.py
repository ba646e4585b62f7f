"""(b) The same run through a real embedded stack: HTTP -> admission -> runner -> journal -> SSE."""

from __future__ import annotations

import time

import httpx

from bench.sse import StreamTally
from bench.timing import BenchError, RunTiming, checked_timing, token_input


def create_thread(client: httpx.Client) -> str:
    reply = client.post("/threads", json={})
    reply.raise_for_status()
    return str(reply.json()["thread_id"])


def time_run(client: httpx.Client, tokens: int, timeout_seconds: float) -> RunTiming:
    # A fresh thread per run, so no run replays a growing history to the model.
    thread_id = create_thread(client)
    body = {
        "assistant_id": "lead_agent",
        "input": token_input(tokens),
        "stream_mode": ["messages-tuple"],
    }
    tally = StreamTally()
    started = time.perf_counter()
    with client.stream("POST", f"/threads/{thread_id}/runs/stream", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            tally.feed(line)
            # Heartbeats keep a stuck run's stream alive forever; give up instead.
            if time.perf_counter() - started > timeout_seconds:
                raise BenchError(f"a /tokens {tokens} run did not end in {timeout_seconds} s")
    closed = time.perf_counter()
    return checked_timing(
        tokens,
        tally.events,
        closed - started,
        None if tally.first_token_at is None else tally.first_token_at - started,
        None if tally.last_event_at is None else tally.last_event_at - started,
    )
