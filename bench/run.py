"""`make bench`: stream the same `lead_agent` run in-process and through the gateway.

(a) `graph.astream(..., stream_mode=["messages"])` in this process, in-memory
checkpointer; (b) `POST /threads/{tid}/runs/stream` with `messages-tuple` against
a real embedded stack (five processes, SQLite). The scripted model streams
`/tokens N` without sleeping, so what is measured is Waybill's own per-event cost.
Every figure is a median over the repetitions, after warm-up runs.
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

from bench import in_process, through_gateway
from bench.cpu import CpuProbe, spent_per_run, stack_probe, this_process_probe
from bench.report import SideResult, cpu_table, ratios, side_document, table
from bench.timing import RunTiming
from tests.stacks import running_stack, stack_env

TimeRun = Callable[[int], RunTiming]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    parser.add_argument("--tokens", type=int, default=2000, help="tokens of the throughput run")
    parser.add_argument(
        "--small-tokens", type=int, default=10, help="tokens of the short latency run"
    )
    parser.add_argument("--repetitions", type=int, default=5, help="measured runs per size")
    parser.add_argument("--warmups", type=int, default=1, help="unmeasured runs per size first")
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


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    sizes = sorted({args.small_tokens, args.tokens})
    host = machine()
    print(
        f"Waybill streaming bench: lead_agent + scripted model; median of "
        f"{args.repetitions} runs after {args.warmups} warm-up(s) per size\n"
        f"machine: {host['cores']} cores, Python {host['python']}, {host['platform']}, "
        f"1-min load average at start {host['load_average_1m']}",
        flush=True,
    )
    started = time.perf_counter()
    baseline = measure_in_process(sizes, args)
    gateway = measure_gateway(sizes, args)
    print(f"\n{table(baseline, gateway, sizes)}\n\n{cpu_table([baseline, gateway], max(sizes))}")
    print(f"\nbench took {time.perf_counter() - started:.1f} s (stack start-up included)")
    if args.json:
        write_json(
            args.json,
            {
                "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                "machine": host,
                "parameters": parameters(args, sizes),
                "in_process": side_document(baseline),
                "gateway": side_document(gateway),
                "ratios_gateway_over_in_process": ratios(baseline, gateway),
            },
        )


if __name__ == "__main__":
    main()
