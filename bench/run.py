"""`make bench`: streaming, cancel latency, takeover time and admission throughput.

streaming: the same run (a) by `graph.astream(..., stream_mode=["messages"])` in
this process, in-memory checkpointer, and (b) by `POST /threads/{tid}/runs/stream`
with `messages-tuple` against a real embedded stack (five processes, SQLite). The
scripted model streams `/tokens N` without sleeping, so what is measured is
Waybill's own per-event cost.
cancel: a run inside a slow tool is cancelled; time until it is `interrupted`.
takeover: the runner executing a run is killed; time until another resumes it.
concurrent: N token streams at once, aggregate events/s, in-process and gateway.
idle: resident memory of every stack process with N idle streams open.
admission: background runs created per second at a fixed concurrency, on fresh
threads, embedded and Postgres; p50/p99 of `POST /threads/{tid}/runs`.
short: many short runs, embedded and Postgres + Redis: admitted/s and POST p99
while they execute, CPU per run per process, `/runs/wait` runs/s, first token.
Every figure of streaming, cancel and takeover is a median over the repetitions.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from bench import (
    admission,
    cancel,
    concurrent,
    idle_streams,
    in_process,
    short_runs,
    takeover,
    through_gateway,
)
from bench.cpu import CpuProbe, spent_per_run, stack_probe, this_process_probe
from bench.report import (
    Latencies,
    SideResult,
    cpu_table,
    latency_document,
    latency_table,
    ratios,
    side_document,
    table,
)
from bench.timing import RunTiming
from tests.support.stacks import running_stack, stack_env

TimeRun = Callable[[int], RunTiming]

MEASUREMENTS = (
    "streaming",
    "concurrent",
    "idle",
    "cancel",
    "takeover",
    "admission",
    "short",
)


def measurement_names(text: str) -> list[str]:
    chosen = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in MEASUREMENTS]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"choose from {','.join(MEASUREMENTS)}")
    return chosen


def backend_names(text: str) -> list[str]:
    chosen = [name.strip() for name in text.split(",") if name.strip()]
    if not chosen or any(name not in admission.BACKENDS for name in chosen):
        raise argparse.ArgumentTypeError(f"choose from {','.join(admission.BACKENDS)}")
    return chosen


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--only",
        type=measurement_names,
        default=list(MEASUREMENTS),
        metavar="NAMES",
        help=f"comma-separated measurements to run (default: {','.join(MEASUREMENTS)})",
    )
    parser.add_argument("--tokens", type=int, default=2000, help="tokens of the throughput run")
    parser.add_argument(
        "--small-tokens", type=int, default=10, help="tokens of the short latency run"
    )
    parser.add_argument("--repetitions", type=int, default=5, help="measured runs per size")
    parser.add_argument(
        "--concurrent-streams", type=int, default=10, help="streams at once (concurrent)"
    )
    parser.add_argument(
        "--concurrent-tokens", type=int, default=500, help="tokens of each concurrent stream"
    )
    parser.add_argument(
        "--idle-streams", type=int, default=1000, help="idle streams held open (idle)"
    )
    parser.add_argument(
        "--idle-runs", type=int, default=10, help="quiet runs the idle streams follow"
    )
    parser.add_argument(
        "--warmups", type=int, default=1, help="unmeasured runs first (per size; per cancel kind)"
    )
    parser.add_argument(
        "--cancel-repetitions", type=int, default=5, help="measured cancels of each kind"
    )
    # Every takeover needs a fresh two-runner stack (the killed runner is gone): a few
    # seconds of start-up each, so fewer of them.
    parser.add_argument(
        "--takeover-repetitions", type=int, default=3, help="kills, each on a fresh stack"
    )
    parser.add_argument(
        "--admission-runs", type=int, default=2000, help="background runs created per backend"
    )
    parser.add_argument(
        "--admission-concurrency", type=int, default=32, help="POSTs in flight at once"
    )
    parser.add_argument(
        "--admission-clients",
        type=int,
        default=1,
        help="client processes the admission runs and concurrency are split over",
    )
    parser.add_argument(
        "--backends",
        type=backend_names,
        default=list(admission.BACKENDS),
        metavar="NAMES",
        help=f"admission: comma-separated backends (default: {','.join(admission.BACKENDS)})",
    )
    parser.add_argument(
        "--short-runs", type=int, default=200, help="short: background runs per backend"
    )
    parser.add_argument(
        "--short-concurrency", type=int, default=10, help="short: POSTs in flight at once"
    )
    parser.add_argument("--wait-runs", type=int, default=50, help="short: runs/wait calls")
    parser.add_argument(
        "--count-runs", type=int, default=50, help="short: runs whose calls and SQL are counted"
    )
    parser.add_argument(
        "--wait-concurrency", type=int, default=5, help="short: runs/wait calls in flight"
    )
    parser.add_argument(
        "--drain-timeout",
        type=float,
        default=600.0,
        help="seconds the admitted runs get to end, after the last POST is answered",
    )
    parser.add_argument(
        "--run-timeout",
        type=float,
        default=60.0,
        help="seconds before a gateway run counts as stuck",
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write results here")
    return parser.parse_args(argv)


def measure_side(
    name: str, time_run: TimeRun, probe: CpuProbe, sizes: list[int], args: argparse.Namespace
) -> SideResult:
    side = SideResult(name)
    for tokens in sizes:
        for _ in range(args.warmups):
            time_run(tokens)
        before = probe()
        side.runs[tokens] = [time_run(tokens) for _ in range(args.repetitions)]
        side.cpu_seconds_per_run[tokens] = spent_per_run(before, probe(), args.repetitions)
    return side


def measure_in_process(sizes: list[int], args: argparse.Namespace) -> SideResult:
    graph = in_process.build_graph()
    # One event loop for every run, as a long-lived application would have.
    with asyncio.Runner() as loop:
        return measure_side(
            "in-process",
            lambda tokens: loop.run(in_process.time_run(graph, tokens)),
            this_process_probe("bench"),
            sizes,
            args,
        )


def measure_gateway(sizes: list[int], args: argparse.Namespace) -> SideResult:
    with tempfile.TemporaryDirectory(prefix="waybill-bench-") as tmp:
        data_dir = Path(tmp)
        with (
            running_stack(stack_env(data_dir), data_dir) as stack,
            httpx.Client(base_url=stack.url, timeout=60) as client,
        ):
            pids = {name: process.pid for name, process in stack.processes.items()}
            return measure_side(
                "gateway",
                lambda tokens: through_gateway.time_run(client, tokens, args.run_timeout),
                stack_probe(pids, "bench client"),
                sizes,
                args,
            )


def machine() -> dict[str, Any]:
    return {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        # Other work on the machine skews every figure; say how busy it was.
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


def parameters(args: argparse.Namespace, sizes: list[int]) -> dict[str, Any]:
    return {"token_counts": sizes, "repetitions": args.repetitions, "warmups": args.warmups}


def write_json(path: Path, document: dict[str, Any]) -> None:
    path.write_text(json.dumps(document, indent=2) + "\n")
    print(f"\nresults written to {path}")


def measure_streaming(args: argparse.Namespace) -> dict[str, Any]:
    sizes = sorted({args.small_tokens, args.tokens})
    print(
        f"\n== streaming: median of {args.repetitions} runs after {args.warmups} "
        f"warm-up(s) per size",
        flush=True,
    )
    baseline = measure_in_process(sizes, args)
    gateway = measure_gateway(sizes, args)
    print(f"\n{table(baseline, gateway, sizes)}\n\n{cpu_table([baseline, gateway], max(sizes))}")
    return {
        "parameters": parameters(args, sizes),
        "in_process": side_document(baseline),
        "gateway": side_document(gateway),
        "ratios_gateway_over_in_process": ratios(baseline, gateway),
    }


def measure_concurrent(args: argparse.Namespace) -> dict[str, Any]:
    print(
        f"\n== concurrent: {args.concurrent_streams} streams of {args.concurrent_tokens} tokens "
        f"at once; median of {args.repetitions} bursts after {args.warmups} warm-up(s)",
        flush=True,
    )
    document = concurrent.measure(
        args.concurrent_streams,
        args.concurrent_tokens,
        args.repetitions,
        args.warmups,
        args.run_timeout,
    )
    print(f"\n{concurrent.table(document)}")
    return document


def measure_idle(args: argparse.Namespace) -> dict[str, Any]:
    print(
        f"\n== idle: {args.idle_streams:,} streams joined to {args.idle_runs} runs waiting "
        "in a tool, embedded stack; resident memory of each process",
        flush=True,
    )
    document = idle_streams.measure(args.idle_streams, args.idle_runs)
    print(f"\n{idle_streams.table(document)}")
    return document


def measure_cancel(args: argparse.Namespace) -> dict[str, Any]:
    print(
        f"\n== cancel: a run inside a {cancel.TOOL_SECONDS} s `wait` tool, embedded stack; "
        f"median of {args.cancel_repetitions} of each kind after {args.warmups} warm-up(s)",
        flush=True,
    )
    result = cancel.measure(args.cancel_repetitions, args.warmups, args.run_timeout)
    return show(result)


def measure_takeover(args: argparse.Namespace) -> dict[str, Any]:
    print(
        f"\n== takeover: SIGKILL the executing runner inside a {takeover.TOOL_SECONDS} s "
        f"`wait` tool; median of {args.takeover_repetitions} kills, one fresh two-runner "
        f"stack each (embedded SQLite)",
        flush=True,
    )
    result = takeover.measure(args.takeover_repetitions, args.run_timeout)
    lease = result.parameters
    print(
        f"lease {lease['lease_seconds']:g} s, renewed every {lease['renew_every_seconds']:.2f} s "
        f"(the takeover waits for the dead runner's lease to run out)"
    )
    return show(result)


def measure_admission(args: argparse.Namespace) -> dict[str, Any]:
    print(
        f"\n== admission: {args.admission_runs:,} background runs on fresh threads, "
        f"{args.admission_concurrency} POSTs in flight from {args.admission_clients} "
        "client process(es), async httpx",
        flush=True,
    )
    results, loads = [], {}
    for backend in args.backends:
        # Others' work on the machine moves these figures most: say how busy it was.
        before = os.getloadavg()[0]
        results.append(
            admission.measure(
                backend,
                args.admission_runs,
                args.admission_concurrency,
                args.admission_clients,
                args.drain_timeout,
            )
        )
        after = os.getloadavg()[0]
        loads[backend] = {"before": round(before, 2), "after": round(after, 2)}
        print(f"{backend}: 1-min load average {before:.2f} before, {after:.2f} after")
    print(f"\n{admission.table(results)}")
    return {r.backend: {**r.as_dict(), "load_average_1m": loads[r.backend]} for r in results}


def measure_short(args: argparse.Namespace) -> dict[str, Any]:
    print(
        f"\n== short: {args.short_runs} background /tokens {short_runs.TOKENS} runs, "
        f"{args.short_concurrency} POSTs in flight; {args.wait_runs} runs/wait, "
        f"{args.wait_concurrency} in flight; first token, median of {args.repetitions}",
        flush=True,
    )
    document = short_runs.measure(args)
    print(f"\n{short_runs.table(document)}")
    return document


def show(result: Latencies) -> dict[str, Any]:
    print(f"\n{latency_table(result)}")
    return latency_document(result)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    host = machine()
    print(
        f"Waybill bench: lead_agent + scripted model; {', '.join(args.only)}\n"
        f"machine: {host['cores']} cores, Python {host['python']}, {host['platform']}, "
        f"1-min load average at start {host['load_average_1m']}",
        flush=True,
    )
    started = time.perf_counter()
    document: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": host,
    }
    if "streaming" in args.only:  # top-level keys, as in the JSON of earlier runs
        document.update(measure_streaming(args))
    if "concurrent" in args.only:
        document["concurrent"] = measure_concurrent(args)
    if "idle" in args.only:
        document["idle_streams"] = measure_idle(args)
    if "cancel" in args.only:
        document["cancel"] = measure_cancel(args)
    if "takeover" in args.only:
        document["takeover"] = measure_takeover(args)
    if "admission" in args.only:
        document["admission"] = measure_admission(args)
    if "short" in args.only:
        document["short"] = measure_short(args)
    print(f"\nbench took {time.perf_counter() - started:.1f} s (stack start-ups included)")
    if args.json:
        write_json(args.json, document)


if __name__ == "__main__":
    main()
