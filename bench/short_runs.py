"""Many short runs: a run's fixed cost, on the embedded and the Postgres + Redis stack.

Per backend, one fresh stack (`tests.support.stacks.stack_in_mode`), three parts in turn:

- background: N threads are created (not timed), then one background
  `POST /threads/{tid}/runs` of a `/tokens 10` run per thread, `concurrency` in
  flight; the runs execute while the POSTs arrive. Reported: runs admitted per
  second, POST p50/p99, first POST -> every run ended, and the CPU each process
  spent from the first POST until the last run ended, divided by N: the run's
  fixed cost. Ends are found by one poller reading the runs in creation order.
- wait: `POST /threads/{tid}/runs/wait` on fresh threads, `concurrency` in flight;
  runs answered per second.
- first token: `POST /threads/{tid}/runs/stream` of a `/tokens 10` run, one at a
  time; time until the first token, against `graph.astream` in this process.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench import in_process, through_gateway, work_counts
from bench.admission import client, create_threads, expect, in_parallel
from bench.cpu import CpuProbe, postgres_probe, spent_per_run, stack_probe
from bench.timing import BenchError, token_input
from tests.support.stacks import stack_in_mode
from waybill.common.launch import Stack
from waybill.common.settings import Settings

BACKENDS = {"embedded": "sqlite", "postgres": "postgres"}
TERMINAL = {"success", "error", "timeout", "interrupted"}
TOKENS = 10
POLL_SECONDS = 0.01


def run_body(tokens: int = TOKENS) -> dict[str, Any]:
    return {"assistant_id": "lead_agent", "input": token_input(tokens)}


def percentile(values: list[float], p: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


@dataclass
class Background:
    runs: int
    concurrency: int
    admit_seconds: float = 0.0  # first POST sent -> last answer
    finish_seconds: float = 0.0  # first POST sent -> last run seen ended
    latencies: list[float] = field(default_factory=list)
    cpu_ms_per_run: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "concurrency": self.concurrency,
            "admitted_per_second": self.runs / self.admit_seconds,
            "post_ms": {
                "p50": 1000 * percentile(self.latencies, 50),
                "p99": 1000 * percentile(self.latencies, 99),
            },
            "until_all_ended_seconds": self.finish_seconds,
            "cpu_ms_per_run": self.cpu_ms_per_run,
        }


async def follow_to_end(http: httpx.AsyncClient, paths: list[str]) -> None:
    """Read each run until it ended, oldest first: runs are claimed in that order."""
    for path in paths:
        while True:
            run = expect(await http.get(path), f"GET {path}")
            if run["status"] in TERMINAL:
                if run["status"] != "success":
                    raise BenchError(f"{path} ended {run['status']}")
                break
            await asyncio.sleep(POLL_SECONDS)


async def background(url: str, probe: CpuProbe, runs: int, concurrency: int) -> Background:
    result = Background(runs, concurrency)
    async with client(url, concurrency) as http:
        thread_ids = await create_threads(http, runs, concurrency)
        paths: list[str] = []

        def post(thread_id: str) -> Callable[[], Awaitable[None]]:
            async def send() -> None:
                sent = time.perf_counter()
                reply = await http.post(f"/threads/{thread_id}/runs", json=run_body())
                result.latencies.append(time.perf_counter() - sent)
                paths.append(f"/threads/{thread_id}/runs/{expect(reply, 'POST run')['run_id']}")

            return send

        before, started = probe(), time.perf_counter()
        await in_parallel(concurrency, (post(tid) for tid in thread_ids))
        result.admit_seconds = time.perf_counter() - started
        await follow_to_end(http, paths)
        result.finish_seconds = time.perf_counter() - started
        spent = spent_per_run(before, probe(), runs)
    result.cpu_ms_per_run = {name: 1000 * seconds for name, seconds in spent.items()}
    return result


async def waits(url: str, runs: int, concurrency: int) -> dict[str, Any]:
    latencies: list[float] = []
    async with client(url, concurrency) as http:
        thread_ids = await create_threads(http, runs, concurrency)

        def wait(thread_id: str) -> Callable[[], Awaitable[None]]:
            async def send() -> None:
                sent = time.perf_counter()
                reply = await http.post(f"/threads/{thread_id}/runs/wait", json=run_body())
                latencies.append(time.perf_counter() - sent)
                if not expect(reply, "POST runs/wait").get("messages"):
                    raise BenchError(f"runs/wait answered no messages: {reply.text}")

            return send

        started = time.perf_counter()
        await in_parallel(concurrency, (wait(tid) for tid in thread_ids))
        seconds = time.perf_counter() - started
    return {
        "runs": runs,
        "concurrency": concurrency,
        "runs_per_second": runs / seconds,
        "latency_ms_p50": 1000 * statistics.median(latencies),
    }


def first_tokens(url: str, repetitions: int, run_timeout: float) -> list[float]:
    with httpx.Client(base_url=url, timeout=60) as http:
        through_gateway.time_run(http, TOKENS, run_timeout)  # warm-up
        runs = [through_gateway.time_run(http, TOKENS, run_timeout) for _ in range(repetitions)]
    return [1000 * run.first_token_seconds for run in runs]


def in_process_first_tokens(repetitions: int) -> list[float]:
    graph = in_process.build_graph()
    with asyncio.Runner() as loop:
        loop.run(in_process.time_run(graph, TOKENS))  # warm-up
        runs = [loop.run(in_process.time_run(graph, TOKENS)) for _ in range(repetitions)]
    return [1000 * run.first_token_seconds for run in runs]


def probe_of(stack: Stack) -> CpuProbe:
    processes = stack_probe({n: p.pid for n, p in stack.processes.items()}, "bench client")
    database_url = stack.env.get("WAYBILL_DATABASE_URL")
    if database_url is None:
        return processes
    database = postgres_probe(database_url.rsplit("/", 1)[1])
    return lambda: {**processes(), **database()}


def shipped_defaults() -> dict[str, str]:
    """What the test stacks change and a user's stack does not: the runner's priority
    (tests.support.stacks sets 0; builds before that setting have none)."""
    field = Settings.model_fields.get("runner_nice")
    return {} if field is None else {"WAYBILL_RUNNER_NICE": str(field.default)}


def measure_backend(backend: str, args: Any) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="waybill-bench-") as tmp,
        stack_in_mode(BACKENDS[backend], Path(tmp), **shipped_defaults()) as stack,
    ):
        probe = probe_of(stack)
        # A few runs first, so that no part pays for the stack's first imports.
        asyncio.run(background(stack.url, probe, 10, 5))
        result = asyncio.run(background(stack.url, probe, args.short_runs, args.short_concurrency))
        wait = asyncio.run(waits(stack.url, args.wait_runs, args.wait_concurrency))
        tokens = first_tokens(stack.url, args.repetitions, args.run_timeout)
        counts = asyncio.run(work_counts.measure(stack, args.count_runs, 5))
    return {
        "background": result.as_dict(),
        "wait": wait,
        "first_token_ms_p50": statistics.median(tokens),
        "counts_per_run": counts,
    }


def measure(args: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "in_process_first_token_ms_p50": statistics.median(
            in_process_first_tokens(args.repetitions)
        )
    }
    for backend in args.backends:
        document[backend] = measure_backend(backend, args)
    return document


def table(document: dict[str, Any]) -> str:
    backends = [name for name in BACKENDS if name in document]
    width = 40
    lines = [f"{'':{width}}" + "".join(f"{name:>14}" for name in backends)]

    def row(label: str, cell: Callable[[dict[str, Any]], str]) -> None:
        cells = "".join(f"{cell(document[name]):>14}" for name in backends)
        lines.append(f"  {label:{width - 2}}{cells}")

    row("background: runs/s admitted", lambda d: f"{d['background']['admitted_per_second']:,.0f}")
    row("background: POST p50, ms", lambda d: f"{d['background']['post_ms']['p50']:.1f}")
    row("background: POST p99, ms", lambda d: f"{d['background']['post_ms']['p99']:.1f}")
    row(
        "background: until all ended, s",
        lambda d: f"{d['background']['until_all_ended_seconds']:.2f}",
    )
    row("background: CPU per run, ms (all)", lambda d: f"{stack_cpu(d):.1f}")
    row("runs/wait: runs/s", lambda d: f"{d['wait']['runs_per_second']:.0f}")
    row("runs/wait: p50, ms", lambda d: f"{d['wait']['latency_ms_p50']:.1f}")
    row("first token p50, ms", lambda d: f"{d['first_token_ms_p50']:.1f}")
    lines.append(
        f"  {'in-process first token p50, ms':{width - 2}}"
        f"{document['in_process_first_token_ms_p50']:>14.1f}"
    )
    lines.append("CPU per background run, ms, by process (the bench client apart)")
    for name in backends:
        cpu = document[name]["background"]["cpu_ms_per_run"]
        lines.append(f"  {name}: " + ", ".join(f"{p} {ms:.1f}" for p, ms in cpu.items()))
    lines.append("Work per background run (nothing polled; the logs' backstop closes included)")
    for name in backends:
        if "counts_per_run" in document[name]:
            lines.append(f"  {name}:")
            lines += work_counts.table(document[name]["counts_per_run"])
    return "\n".join(lines)


def stack_cpu(backend: dict[str, Any]) -> float:
    cpu = backend["background"]["cpu_ms_per_run"]
    return sum(ms for name, ms in cpu.items() if name != "bench client")
