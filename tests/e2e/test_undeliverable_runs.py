"""A run that can never be handed to a runner (its assignment is larger than the
runner accepts, so the runner's work stream breaks on receipt each time) counts
its attempts and ends `error` with the reason in its record: it never loops."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from langgraph_sdk import get_client

from tests.support.helpers import says
from tests.support.stacks import http_ok, stack_env, wait_until
from waybill.common.launch import SERVICES, Stack

pytestmark = pytest.mark.timeout(180)

MAX_ATTEMPTS = 2
MiB = 1024 * 1024
# The one runner accepts messages of 2 MiB at most (its own settings must agree).
SMALL_RUNNER = {
    "WAYBILL_GRPC_MAX_MESSAGE_BYTES": str(2 * MiB),
    "WAYBILL_MAX_REQUEST_BYTES": str(MiB),
    "WAYBILL_UPLOAD_MAX_BYTES": str(MiB),
}


@contextmanager
def stack_with_a_small_runner(data_dir: Path) -> Iterator[Stack]:
    env = stack_env(data_dir, WAYBILL_LEASE_SECONDS="2", WAYBILL_MAX_ATTEMPTS=str(MAX_ATTEMPTS))
    stack = Stack(env=env, log_dir=str(data_dir))
    try:
        stack.start(only=[name for name in SERVICES if name != "runner"])
        stack.start_one("runner", extra_env=SMALL_RUNNER)
        wait_until(lambda: http_ok(stack.url), "the runner connected")
        yield stack
    finally:
        stack.stop()


def stored_run(data_dir: Path, run_id: str) -> tuple[str, int, str]:
    with sqlite3.connect(data_dir / "admission.db") as db:
        row = db.execute(
            "SELECT status, attempt, stop_reason FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()
    return row[0], row[1], row[2]


async def test_a_run_too_large_for_its_runner_ends_error_after_its_attempts(
    tmp_path: Path,
) -> None:
    with stack_with_a_small_runner(tmp_path) as stack:
        client = get_client(url=stack.url, timeout=30)
        thread = await client.threads.create()
        run = await client.runs.create(
            thread["thread_id"], "lead_agent", input=says("x" * (3 * MiB))
        )

        deadline = time.monotonic() + 60  # a looping run never ends
        while time.monotonic() < deadline:
            got = await client.runs.get(thread["thread_id"], run["run_id"])
            if got["status"] not in ("pending", "running"):
                break
            await asyncio.sleep(0.2)
        status, attempt, reason = stored_run(tmp_path, run["run_id"])
        assert status == "error", (status, attempt, reason)
        # Its attempts, then one hand-off for its runner to end it; then admission did.
        assert attempt == MAX_ATTEMPTS + 1
        assert "could not be handed to a runner" in reason
        assert (await client.threads.get(thread["thread_id"]))["status"] == "error"
        # A small run is served by the same runner afterwards.
        small = await client.runs.wait(thread["thread_id"], "lead_agent", input=says("hi"))
        assert small["messages"][-1]["content"] == "You said: hi"
        await client.aclose()
