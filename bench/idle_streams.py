"""Memory of open idle streams: what 1,000 followers of quiet runs cost the stack.

A few runs sit inside the slow `wait` tool, so their streams stay open and carry
nothing but heartbeats. `followers` clients join them (`GET .../stream`, live
only) from one asyncio process. Each stack process's resident memory (RSS, from
/proc) is read before the streams open and again once every stream has its
response headers and a short settle time has passed; the difference is what the
open streams cost, per process and per stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import httpx

from bench.slow_runs import RunRef, slow_tool_input
from bench.timing import BenchError
from tests.support.stacks import running_stack, stack_env

TOOL_SECONDS = 600  # far longer than the measurement: the runs end by being cancelled


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise BenchError(f"no VmRSS for process {pid}")


def memory(pids: Mapping[str, int]) -> dict[str, int]:
    return {name: rss_bytes(pid) for name, pid in pids.items()}


async def start_quiet_runs(client: httpx.AsyncClient, count: int) -> list[RunRef]:
    runs = []
    for _ in range(count):
        thread = (await client.post("/threads", json={})).json()["thread_id"]
        body = {"assistant_id": "lead_agent", "input": slow_tool_input(TOOL_SECONDS)}
        reply = await client.post(f"/threads/{thread}/runs", json=body)
        reply.raise_for_status()
        runs.append(RunRef(thread, str(reply.json()["run_id"])))
    return runs


async def hold_stream(
    client: httpx.AsyncClient, run: RunRef, opened: asyncio.Queue[str], release: asyncio.Event
) -> None:
    async with client.stream("GET", f"{run.path}/stream") as response:
        if response.status_code != 200:
            raise BenchError(f"joining {run.path} answered {response.status_code}")
        await opened.put(run.run_id)
        await release.wait()


@contextlib.asynccontextmanager
async def open_streams(
    client: httpx.AsyncClient, runs: list[RunRef], followers: int, timeout_seconds: float
) -> AsyncIterator[None]:
    opened: asyncio.Queue[str] = asyncio.Queue()
    release = asyncio.Event()
    holders = [
        asyncio.create_task(hold_stream(client, runs[i % len(runs)], opened, release))
        for i in range(followers)
    ]
    try:
        async with asyncio.timeout(timeout_seconds):
            for _ in range(followers):
                await opened.get()
        yield
    finally:
        release.set()
        await asyncio.gather(*holders, return_exceptions=True)


async def _measure(
    url: str, pids: Mapping[str, int], runs_count: int, followers: int, settle_seconds: float
) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=followers + 16, max_keepalive_connections=16)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        runs = await start_quiet_runs(client, runs_count)
        await asyncio.sleep(settle_seconds)
        before = memory(pids)
        started = time.perf_counter()
        async with open_streams(client, runs, followers, timeout_seconds=120):
            opened_seconds = time.perf_counter() - started
            await asyncio.sleep(settle_seconds)
            during = memory(pids)
        for run in runs:
            await client.post(f"{run.path}/cancel")
    return {
        "parameters": {
            "followers": followers,
            "runs": runs_count,
            "settle_seconds": settle_seconds,
        },
        "seconds_to_open_all": opened_seconds,
        "rss_before_bytes": before,
        "rss_with_streams_bytes": during,
    }


def measure(followers: int, runs_count: int, settle_seconds: float = 2.0) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="waybill-bench-") as tmp:
        data_dir = Path(tmp)
        env = stack_env(data_dir, WAYBILL_RUNNER_SLOTS=str(max(8, runs_count)))
        with running_stack(env, data_dir) as stack:
            pids = {name: process.pid for name, process in stack.processes.items()}
            return asyncio.run(_measure(stack.url, pids, runs_count, followers, settle_seconds))


def table(document: dict[str, Any]) -> str:
    p = document["parameters"]
    before, during = document["rss_before_bytes"], document["rss_with_streams_bytes"]
    lines = [
        f"{p['followers']:,} idle streams on {p['runs']} quiet runs (all open after "
        f"{document['seconds_to_open_all']:.1f} s)",
        "  process        RSS before, MB   with streams, MB   per stream, KB",
    ]
    for name in before:
        grown = during[name] - before[name]
        lines.append(
            f"  {name:<12} {before[name] / 2**20:>15.1f} {during[name] / 2**20:>18.1f}"
            f" {grown / p['followers'] / 1024:>16.1f}"
        )
    total_before, total_during = sum(before.values()), sum(during.values())
    lines.append(
        f"  {'all':<12} {total_before / 2**20:>15.1f} {total_during / 2**20:>18.1f}"
        f" {(total_during - total_before) / p['followers'] / 1024:>16.1f}"
    )
    return "\n".join(lines)
