"""Several token streams at once: aggregate events/s, in-process against the gateway.

(a) `streams` runs of `lead_agent` driven by `graph.astream` as concurrent tasks
on one event loop, in-memory checkpointer; (b) the same number of
`POST /threads/{tid}/runs/stream` requests in flight at once against a real
embedded stack, each on its own thread. Aggregate events/s is every event of
every stream divided by the time from the first request sent to the last
stream closed.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench import in_process
from bench.sse import StreamTally
from bench.timing import BenchError, token_input
from tests.support.stacks import running_stack, stack_env


@dataclass(frozen=True)
class Burst:
    """One round of `streams` concurrent runs."""

    streams: int
    tokens: int
    events: int
    seconds: float

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds

    def as_dict(self) -> dict[str, Any]:
        return {
            "events": self.events,
            "seconds": self.seconds,
            "events_per_second": self.events_per_second,
        }


async def in_process_burst(graph: Any, streams: int, tokens: int) -> Burst:
    started = time.perf_counter()
    timings = await asyncio.gather(*(in_process.time_run(graph, tokens) for _ in range(streams)))
    seconds = time.perf_counter() - started
    return Burst(streams, tokens, sum(t.events for t in timings), seconds)


async def _one_stream(client: httpx.AsyncClient, tokens: int, timeout_seconds: float) -> int:
    reply = await client.post("/threads", json={})
    reply.raise_for_status()
    thread_id = reply.json()["thread_id"]
    body = {
        "assistant_id": "lead_agent",
        "input": token_input(tokens),
        "stream_mode": ["messages-tuple"],
    }
    tally = StreamTally()
    async with client.stream("POST", f"/threads/{thread_id}/runs/stream", json=body) as response:
        response.raise_for_status()
        async with asyncio.timeout(timeout_seconds):
            async for line in response.aiter_lines():
                tally.feed(line)
    if tally.events < tokens:
        raise BenchError(f"a /tokens {tokens} stream closed after {tally.events} events")
    return tally.events


async def gateway_burst(
    client: httpx.AsyncClient, streams: int, tokens: int, timeout_seconds: float
) -> Burst:
    started = time.perf_counter()
    counts = await asyncio.gather(
        *(_one_stream(client, tokens, timeout_seconds) for _ in range(streams))
    )
    seconds = time.perf_counter() - started
    return Burst(streams, tokens, sum(counts), seconds)


def median_burst(bursts: list[Burst]) -> Burst:
    return sorted(bursts, key=lambda b: b.events_per_second)[len(bursts) // 2]


def measure(
    streams: int, tokens: int, repetitions: int, warmups: int, timeout_seconds: float
) -> dict[str, Any]:
    graph = in_process.build_graph()
    with asyncio.Runner() as loop:
        for _ in range(warmups):
            loop.run(in_process_burst(graph, streams, tokens))
        baseline = [loop.run(in_process_burst(graph, streams, tokens)) for _ in range(repetitions)]
    with tempfile.TemporaryDirectory(prefix="waybill-bench-") as tmp:
        data_dir = Path(tmp)
        # Every stream is started at once: give the runner a slot for each.
        env = stack_env(data_dir, WAYBILL_RUNNER_SLOTS=str(max(8, streams)))
        with running_stack(env, data_dir) as stack:
            gateway = asyncio.run(
                _gateway_bursts(stack.url, streams, tokens, repetitions, warmups, timeout_seconds)
            )
    a, b = median_burst(baseline), median_burst(gateway)
    return {
        "parameters": {"streams": streams, "tokens": tokens, "repetitions": repetitions},
        "in_process": a.as_dict(),
        "gateway": b.as_dict(),
        "ratio_gateway_over_in_process": b.events_per_second / a.events_per_second,
    }


async def _gateway_bursts(
    url: str, streams: int, tokens: int, repetitions: int, warmups: int, timeout_seconds: float
) -> list[Burst]:
    limits = httpx.Limits(max_connections=streams * 2, max_keepalive_connections=streams * 2)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        for _ in range(warmups):
            await gateway_burst(client, streams, tokens, timeout_seconds)
        return [
            await gateway_burst(client, streams, tokens, timeout_seconds)
            for _ in range(repetitions)
        ]


def table(document: dict[str, Any]) -> str:
    p, a, b = document["parameters"], document["in_process"], document["gateway"]
    ratio = document["ratio_gateway_over_in_process"]
    return "\n".join(
        [
            f"{p['streams']} concurrent {p['tokens']:,}-token streams"
            "             (a) in-process   (b) gateway   (b)/(a)",
            f"  aggregate events/s                  {a['events_per_second']:>12,.0f}"
            f"  {b['events_per_second']:>12,.0f}     {ratio:.2f}x",
            f"  burst time, ms                      {a['seconds'] * 1000:>12,.1f}"
            f"  {b['seconds'] * 1000:>12,.1f}",
        ]
    )
