"""A run's journal log is closed even when its runner dies right after admission
accepted the run's end and before the runner closed the log: the run's open stream
still ends (admission closes the log once `WAYBILL_LOG_CLOSE_GRACE_SECONDS` have
passed; services/admission/runs/log_closes.py).

This is what left a stream on heartbeats forever in about one soak in five: a
runner SIGKILLed in the few milliseconds between the commit of its FinishRun and
its journal Close. Here the moment is made exact with real processes: admission is
frozen while the runner's FinishRun is on its way, the runner is frozen so that it
never sees the answer, admission is let go (it commits the end), and the runner is
killed. Embedded (SQLite, in-memory fan-out) and Postgres + Redis.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.helpers import Frame, exactly_once, says, sse
from tests.support.stacks import eventually, metrics_url, runner_stats, scrape, stack_in_mode
from waybill.common.launch import Stack

pytestmark = pytest.mark.timeout(120)

GRACE = 3.0  # admission closes an ended run's log this long after its end (unless told)
TOOL_SECONDS = 3  # time to freeze admission before the run asks for its end


@pytest.fixture(params=["sqlite", "postgres"])
def stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stack]:
    with stack_in_mode(
        request.param, tmp_path, WAYBILL_LOG_CLOSE_GRACE_SECONDS=str(GRACE)
    ) as running:
        yield running


def log_closes(stack: Stack) -> dict[str, float]:
    """Admission's closes after the grace, by what it found (open | closed)."""
    page = scrape(metrics_url(stack, "admission"))
    return {
        found: page.get(f'waybill_log_closes_total{{found="{found}"}}', 0.0)
        for found in ("open", "closed")
    }


async def test_a_runner_killed_between_its_end_and_its_close(stack: Stack) -> None:
    runner = stack.address_of("runner")
    async with httpx.AsyncClient(base_url=stack.url, timeout=30) as http:
        # A run that ends normally: its runner closes the log and says so, and
        # admission, told, owes it no second close (none comes after the grace).
        thread = (await http.post("/threads", json={})).json()["thread_id"]
        body = {"assistant_id": "lead_agent", "input": says("hi")}
        assert (await http.post(f"/threads/{thread}/runs/wait", json=body)).status_code == 200
        await asyncio.sleep(GRACE + 2)
        assert log_closes(stack) == {"open": 0, "closed": 0}
        closes = 'waybill_rpcs_served_total{method="/waybill.v1.Journal/Close"}'
        assert scrape(metrics_url(stack, "journal"))[closes] == 1

        thread = (await http.post("/threads", json={})).json()["thread_id"]
        body = {
            "assistant_id": "lead_agent",
            "input": says(f'/tool wait {{"seconds": {TOOL_SECONDS}}}'),
            "stream_mode": ["values", "updates"],
        }
        frames: list[Frame] = []
        started: list[str] = []
        tool_called = asyncio.Event()

        async def follow() -> None:
            async with http.stream("POST", f"/threads/{thread}/runs/stream", json=body) as reply:
                started.append(reply.headers["Content-Location"].rsplit("/", 1)[-1])
                async for frame in sse(reply):
                    frames.append(frame)
                    if frame.event == "updates" and "agent" in frame.data:
                        tool_called.set()

        stream = asyncio.create_task(follow())
        await asyncio.wait_for(tool_called.wait(), 30)
        admission = stack.processes["admission"]
        admission.send_signal(signal.SIGSTOP)  # the run's FinishRun will wait in its socket
        try:
            assert runner_stats(runner)["finishes_requested"] == 1, "the run ended too soon"

            async def finish_requested() -> bool:
                stats = await asyncio.to_thread(runner_stats, runner)
                return stats["finishes_requested"] == 2

            await eventually(finish_requested, "the run to ask admission for its end")
            # Let the request leave the runner's process (counted as it is made, sent
            # after): half a second was not always enough on a loaded machine.
            await asyncio.sleep(2.0)
            stack.processes["runner"].send_signal(signal.SIGSTOP)  # it never sees the answer
        finally:
            admission.send_signal(signal.SIGCONT)

        [run_id] = started

        async def ended() -> bool:
            reply = await http.get(f"/threads/{thread}/runs/{run_id}")
            return reply.json()["status"] == "success"

        await eventually(ended, "admission to accept the run's end")
        stack.processes["runner"].send_signal(signal.SIGKILL)
        stack.processes["runner"].wait()

        # Nobody else appends to the log: only admission's close can end the stream.
        await asyncio.wait_for(stream, GRACE + 20)
        exactly_once(frames)
        answer = frames[-1].data["messages"][-1]["content"]
        assert answer == f"Tool wait returned: waited {TOOL_SECONDS} s", frames[-1]
        # Admission counts its close once the journal answered it, which is after
        # the stream was told its end: the count may come a moment later.
        await eventually(
            lambda: asyncio.to_thread(lambda: log_closes(stack) == {"open": 1, "closed": 0}),
            "admission to count its close of the open log",
        )

        # The log is closed for good: a replay ends too, with the same events.
        replay = await http.get(
            f"/threads/{thread}/runs/{run_id}/stream", headers={"Last-Event-ID": "-1"}
        )
        replayed = [(f.seq, f.event) async for f in sse(replay)]
        assert replayed == [(f.seq, f.event) for f in frames]
