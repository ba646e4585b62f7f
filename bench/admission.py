"""Admission throughput: background runs created per second, at a fixed concurrency.

For each backend a fresh stack (embedded: SQLite files; Postgres: a fresh
database). Client processes (one by default; runs and concurrency are split
evenly over them) each create their share of N threads first (not timed), wait
until all are ready, then their workers, `concurrency` in all, send one
`POST /threads/{tid}/runs` per thread (a background run of `lead_agent`, a
one-line input) over an async httpx client, each as soon as its previous one is
answered. creations/s = N / (first POST sent -> last answer).
The runner starts executing runs while the POSTs arrive: that cost is part of
the figure. Afterwards every run is followed until it ends; all must end
`success`.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import statistics
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

import httpx

from bench.cpu import CpuProbe, postgres_probe, stack_probe
from bench.timing import BenchError
from tests.support.stacks import fresh_postgres_database, running_stack, stack_env
from waybill.common.launch import Stack

BACKENDS = ("embedded", "postgres")
TERMINAL = {"success", "error", "timeout", "interrupted"}
RUN_BODY = {
    "assistant_id": "lead_agent",
    "input": {"messages": [{"role": "user", "content": "hi"}]},
}
POLLERS = 8  # concurrent status readers while the runs drain
POLL_SECONDS = 0.25
STARTUP_SECONDS = 300.0  # for the client processes to start and create their threads
FIRING_SECONDS = 600.0


@dataclass
class AdmissionResult:
    backend: str
    runs: int
    concurrency: int
    clients: int  # client processes the runs and the concurrency are split over
    seconds: float = 0.0  # first POST sent -> last answer received
    latencies: list[float] = field(default_factory=list)  # of each POST, seconds
    cpu_seconds: dict[str, float] = field(default_factory=dict)  # per process, while firing
    drain_seconds: float = 0.0  # last answer -> every run ended (or the timeout)
    statuses: Counter[str] = field(default_factory=Counter)

    @property
    def per_second(self) -> float:
        return self.runs / self.seconds

    def percentile(self, p: int) -> float:
        return statistics.quantiles(self.latencies, n=100, method="inclusive")[p - 1]

    def as_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "runs": self.runs,
            "concurrency": self.concurrency,
            "client_processes": self.clients,
            "seconds": self.seconds,
            "creations_per_second": self.per_second,
            "latency_seconds": {
                "p50": self.percentile(50),
                "p99": self.percentile(99),
                "max": max(self.latencies),
            },
            "cpu_seconds_while_firing": self.cpu_seconds,
            "drain_seconds": self.drain_seconds,
            "statuses": dict(self.statuses),
        }


async def in_parallel(count: int, jobs: Iterator[Callable[[], Awaitable[None]]]) -> None:
    """Run `jobs` with at most `count` in flight; each worker takes the next when done."""

    async def worker() -> None:
        for job in jobs:  # one shared iterator: every job is taken exactly once
            await job()

    await asyncio.gather(*(worker() for _ in range(count)))


def expect(reply: httpx.Response, what: str) -> dict[str, Any]:
    if reply.status_code != 200:
        raise BenchError(f"{what} answered {reply.status_code}: {reply.text}")
    body: dict[str, Any] = reply.json()
    return body


@dataclass
class Volley:
    """What one client process saw while firing its share of the POSTs."""

    created: list[tuple[float, str]]  # (when answered, run path)
    latencies: list[float]
    started: float  # time.perf_counter(): CLOCK_MONOTONIC, the same in every process
    finished: float
    cpu_seconds: float


def client(url: str, concurrency: int) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=concurrency)
    return httpx.AsyncClient(base_url=url, timeout=60, limits=limits)


async def create_threads(http: httpx.AsyncClient, count: int, concurrency: int) -> list[str]:
    thread_ids: list[str] = []

    async def create() -> None:
        reply = await http.post("/threads", json={})
        thread_ids.append(expect(reply, "POST /threads")["thread_id"])

    await in_parallel(concurrency, (create for _ in range(count)))
    return thread_ids


async def fire_runs(http: httpx.AsyncClient, thread_ids: list[str], concurrency: int) -> Volley:
    """One background run per thread, `concurrency` POSTs in flight."""
    created: list[tuple[float, str]] = []
    latencies: list[float] = []

    def post(thread_id: str) -> Callable[[], Awaitable[None]]:
        async def send() -> None:
            sent = time.perf_counter()
            reply = await http.post(f"/threads/{thread_id}/runs", json=RUN_BODY)
            answered = time.perf_counter()
            latencies.append(answered - sent)
            run = expect(reply, "POST /threads/{tid}/runs")
            created.append((answered, f"/threads/{thread_id}/runs/{run['run_id']}"))

        return send

    started, cpu_before = time.perf_counter(), time.process_time()
    await in_parallel(concurrency, (post(tid) for tid in thread_ids))
    cpu_seconds = time.process_time() - cpu_before
    return Volley(created, latencies, started, time.perf_counter(), cpu_seconds)


def client_process(
    url: str, runs: int, concurrency: int, start_line: Barrier, results: Queue[Any]
) -> None:
    """One client process: create its threads, wait for the others, fire its runs."""

    async def share() -> Volley:
        async with client(url, concurrency) as http:
            thread_ids = await create_threads(http, runs, concurrency)
            start_line.wait()  # every client is ready: the timed part starts together
            return await fire_runs(http, thread_ids, concurrency)

    try:
        results.put(asyncio.run(share()))
    except BaseException as error:
        start_line.abort()
        results.put(f"{type(error).__name__}: {error}")


def fire_from_processes(
    url: str, runs: int, concurrency: int, processes: int, probe: CpuProbe
) -> tuple[list[Volley], dict[str, float]]:
    """Split runs and concurrency over `processes` client processes (spawned, so their
    start-up is not timed). What each saw, and the CPU the stack spent meanwhile."""
    context = multiprocessing.get_context("spawn")
    start_line = context.Barrier(processes + 1)
    results = context.Queue()
    workers = [
        context.Process(
            target=client_process,
            args=(
                url,
                share(runs, processes, i),
                share(concurrency, processes, i),
                start_line,
                results,
            ),
        )
        for i in range(processes)
    ]
    for worker in workers:
        worker.start()
    try:
        return collect(start_line, results, len(workers), probe)
    finally:
        for worker in workers:  # on failure too: the others still hold the start line
            worker.join(timeout=30)
            if worker.is_alive():
                worker.terminate()


def collect(
    start_line: Barrier, results: Queue[Any], clients: int, probe: CpuProbe
) -> tuple[list[Volley], dict[str, float]]:
    try:
        start_line.wait(timeout=STARTUP_SECONDS)
    except threading.BrokenBarrierError:  # a client failed before the start
        raise BenchError(f"a client process failed: {results.get(timeout=5)}") from None
    before = probe()
    volleys = [results.get(timeout=FIRING_SECONDS) for _ in range(clients)]
    stack_cpu = spent(before, probe())
    errors = [volley for volley in volleys if isinstance(volley, str)]
    if errors:
        raise BenchError(f"a client process failed: {errors[0]}")
    return volleys, stack_cpu


def share(total: int, parts: int, index: int) -> int:
    return total // parts + (1 if index < total % parts else 0)


async def wait_for_ends(url: str, paths: list[str], timeout_seconds: float) -> Counter[str]:
    """The final status of every run; a run still going at the deadline counts as it stands."""
    deadline = time.perf_counter() + timeout_seconds
    statuses: Counter[str] = Counter()

    def follow(http: httpx.AsyncClient, path: str) -> Callable[[], Awaitable[None]]:
        async def poll() -> None:
            while True:
                status = expect(await http.get(path), f"GET {path}")["status"]
                if status in TERMINAL or time.perf_counter() > deadline:
                    statuses[status] += 1
                    return
                await asyncio.sleep(POLL_SECONDS)

        return poll

    # Runs are claimed oldest first, so following them in creation order rarely waits twice.
    async with client(url, POLLERS) as http:
        await in_parallel(POLLERS, (follow(http, path) for path in paths))
    return statuses


def spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {name: after[name] - before[name] for name in after if name in before}


def measure_on(
    stack: Stack, probe: CpuProbe, result: AdmissionResult, drain_timeout: float
) -> None:
    volleys, stack_cpu = fire_from_processes(
        stack.url, result.runs, result.concurrency, result.clients, probe
    )
    result.seconds = max(v.finished for v in volleys) - min(v.started for v in volleys)
    result.latencies = [latency for volley in volleys for latency in volley.latencies]
    result.cpu_seconds = {**stack_cpu, "bench client": sum(v.cpu_seconds for v in volleys)}
    answered = time.perf_counter()
    paths = [path for _, path in sorted(c for volley in volleys for c in volley.created)]
    result.statuses = asyncio.run(wait_for_ends(stack.url, paths, drain_timeout))
    result.drain_seconds = time.perf_counter() - answered


@contextmanager
def backend_stack(backend: str) -> Iterator[tuple[Stack, CpuProbe]]:
    with tempfile.TemporaryDirectory(prefix="waybill-bench-") as tmp:
        data_dir = Path(tmp)
        if backend == "embedded":
            with running_stack(stack_env(data_dir), data_dir) as stack:
                yield stack, stack_probe(pids_of(stack), "bench client")
            return
        with (
            fresh_postgres_database() as url,
            running_stack(stack_env(data_dir, url), data_dir) as stack,
        ):
            database = url.rsplit("/", 1)[1]
            processes = stack_probe(pids_of(stack), "bench client")
            yield stack, lambda: {**processes(), **postgres_probe(database)()}


def pids_of(stack: Stack) -> dict[str, int]:
    return {name: process.pid for name, process in stack.processes.items()}


def measure(
    backend: str, runs: int, concurrency: int, clients: int, drain_timeout: float
) -> AdmissionResult:
    result = AdmissionResult(backend, runs, concurrency, clients)
    with backend_stack(backend) as (stack, probe):
        measure_on(stack, probe, result, drain_timeout)
    if result.statuses["success"] != runs:
        raise BenchError(f"{backend}: not every run ended `success`: {dict(result.statuses)}")
    return result


def table(results: list[AdmissionResult]) -> str:
    width = 36
    lines = [f"{'':{width}}" + "".join(f"{r.backend:>16}" for r in results)]

    def row(label: str, cells: list[str]) -> None:
        lines.append(f"  {label:{width - 2}}" + "".join(f"{cell:>16}" for cell in cells))

    row("creations/s", [f"{r.per_second:,.0f}" for r in results])
    row("firing time, s", [f"{r.seconds:.2f}" for r in results])
    for label, p in (("p50", 50), ("p99", 99)):
        row(f"POST latency {label}, ms", [f"{r.percentile(p) * 1000:,.1f}" for r in results])
    row("POST latency max, ms", [f"{max(r.latencies) * 1000:,.1f}" for r in results])
    row("drain after last answer, s", [f"{r.drain_seconds:.1f}" for r in results])
    for status in sorted({status for r in results for status in r.statuses}):
        row(f"runs ended {status}", [f"{r.statuses[status]:,}" for r in results])
    lines.append("CPU while firing: ms per run created (% of one core)")
    for r in results:
        parts = [
            f"{name} {1000 * s / r.runs:.2f} ({100 * s / r.seconds:.0f}%)"
            for name, s in r.cpu_seconds.items()
        ]
        lines.append(f"  {r.backend}: {', '.join(parts)}")
    return "\n".join(lines)
