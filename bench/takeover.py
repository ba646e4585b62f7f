"""Takeover after a kill: the runner executing a run is SIGKILLed inside a slow tool.

A fresh two-runner stack (embedded SQLite, 1-second leases) per repetition,
since the killed runner is gone. Timed from the kill, as seen by a client
following the run's stream: the `metadata` event of attempt 2 (the survivor has
claimed the expired lease and resumed from the last checkpoint), then the
stream closing with the run `success` (attempt 2 runs the tool again).
"""

from __future__ import annotations

import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.report import Latencies
from bench.slow_runs import (
    expect_status,
    follow_to_end,
    followed,
    start_slow_tool_run,
    wait_for_attempt,
    wait_until_in_tool,
)
from tests.support.stacks import TwoRunners, two_runner_stack
from waybill.common.settings import Settings

TOOL_SECONDS = 1

LABELS = {
    "resumed_seconds": "SIGKILL -> first event of attempt 2, ms",
    "succeeded_seconds": "SIGKILL -> stream closed (success), ms",
}


def time_takeover(running: TwoRunners, timeout_seconds: float) -> dict[str, float]:
    with httpx.Client(base_url=running.stack.url, timeout=60) as client:
        run = start_slow_tool_run(client, TOOL_SECONDS)
        with followed(client, run, timeout_seconds) as events:
            wait_until_in_tool(events)
            victim = running.stack.processes[running.executing()]
            victim.send_signal(signal.SIGKILL)
            killed = time.perf_counter()
            wait_for_attempt(events, 2)
            resumed = time.perf_counter()
            follow_to_end(events)
            closed = time.perf_counter()
        expect_status(client, run, "success")
    return {"resumed_seconds": resumed - killed, "succeeded_seconds": closed - killed}


def lease_parameters(settings: Settings) -> dict[str, Any]:
    # Takeover waits for the dead runner's lease to run out, so it sets the figures.
    return {"lease_seconds": settings.lease_seconds, "renew_every_seconds": settings.renew_every}


def time_on_fresh_stack(timeout_seconds: float) -> tuple[dict[str, float], dict[str, Any]]:
    with (
        tempfile.TemporaryDirectory(prefix="waybill-bench-") as tmp,
        two_runner_stack(Path(tmp), lease_seconds=1.0) as running,  # as recorded in RESULTS.md
    ):
        return time_takeover(running, timeout_seconds), lease_parameters(running.stack.settings)


def measure(repetitions: int, timeout_seconds: float) -> Latencies:
    result = Latencies(
        "takeover", LABELS, {"repetitions": repetitions, "tool_seconds": TOOL_SECONDS}
    )
    for _ in range(repetitions):
        figures, lease = time_on_fresh_stack(timeout_seconds)
        result.add(figures)
        result.parameters.update(lease)
    return result
