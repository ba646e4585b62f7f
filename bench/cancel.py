"""Cancel latency: a run sits inside a slow tool on an embedded stack; how soon is it over?

Timed from the moment `POST .../cancel` is sent. Without `wait`, the end is seen
by a client already following the run's stream: the stream closes only once the
`interrupted` status is stored. With `wait=true`, the gateway itself waits for
the run's journal to end before answering 204.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import httpx

from bench.report import Latencies
from bench.slow_runs import (
    expect_status,
    follow_to_end,
    followed,
    start_slow_tool_run,
    wait_until_in_tool,
)
from bench.timing import BenchError
from tests.support.stacks import running_stack, stack_env

# Far longer than any cancel: the run can only end by being cancelled.
TOOL_SECONDS = 30

LABELS = {
    "answered_seconds": "POST cancel -> 202 received, ms",
    "interrupted_seconds": "POST cancel -> stream closed (interrupted), ms",
    "wait_round_trip_seconds": "POST cancel?wait=true -> 204 received, ms",
}


def time_cancel(client: httpx.Client, timeout_seconds: float) -> dict[str, float]:
    run = start_slow_tool_run(client, TOOL_SECONDS)
    with followed(client, run, timeout_seconds) as events:
        wait_until_in_tool(events)
        sent = time.perf_counter()
        reply = client.post(f"{run.path}/cancel")
        answered = time.perf_counter()
        expect_code(reply, 202)
        follow_to_end(events)
        closed = time.perf_counter()
    expect_status(client, run, "interrupted")
    return {"answered_seconds": answered - sent, "interrupted_seconds": closed - sent}


def time_cancel_and_wait(client: httpx.Client, timeout_seconds: float) -> dict[str, float]:
    run = start_slow_tool_run(client, TOOL_SECONDS)
    # Followed as in `time_cancel`, so both variants have one SSE subscriber.
    with followed(client, run, timeout_seconds) as events:
        wait_until_in_tool(events)
        sent = time.perf_counter()
        reply = client.post(f"{run.path}/cancel", params={"wait": "true"})
        returned = time.perf_counter()
        expect_code(reply, 204)
        follow_to_end(events)
    expect_status(client, run, "interrupted")
    return {"wait_round_trip_seconds": returned - sent}


def expect_code(reply: httpx.Response, code: int) -> None:
    if reply.status_code != code:
        raise BenchError(f"cancel answered {reply.status_code}, not {code}: {reply.text}")


def time_repetition(client: httpx.Client, timeout_seconds: float) -> dict[str, float]:
    return {**time_cancel(client, timeout_seconds), **time_cancel_and_wait(client, timeout_seconds)}


def measure(repetitions: int, warmups: int, timeout_seconds: float) -> Latencies:
    result = Latencies(
        "cancel",
        LABELS,
        {"repetitions": repetitions, "warmups": warmups, "tool_seconds": TOOL_SECONDS},
    )
    with tempfile.TemporaryDirectory(prefix="waybill-bench-") as tmp:
        data_dir = Path(tmp)
        with (
            running_stack(stack_env(data_dir), data_dir) as stack,
            httpx.Client(base_url=stack.url, timeout=60) as client,
        ):
            for _ in range(warmups):
                time_repetition(client, timeout_seconds)
            for _ in range(repetitions):
                result.add(time_repetition(client, timeout_seconds))
    return result
