"""End to end on the multi-replica profile (tests/support/scale.py): every request goes to a
gateway picked at random, so nothing works only through the replica that started
a run: stream, join with Last-Event-ID, cancel, wait, and a runner killed mid-run."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.helpers import exactly_once, says, slow, sse
from tests.support.scale import ScaledStack, join, scaled_stack
from tests.support.stacks import wait_until
from waybill.common.statuses import TERMINAL_RUN_STATUSES

pytestmark = [pytest.mark.scale, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def scaled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScaledStack]:
    with scaled_stack(tmp_path_factory.mktemp("scaled")) as stack:
        yield stack


async def new_thread(scaled: ScaledStack) -> str:
    async with httpx.AsyncClient(base_url=scaled.gateway(), timeout=30) as http:
        reply = await http.post("/threads", json={})
        assert reply.status_code == 200, reply.text
        return str(reply.json()["thread_id"])


async def create_run(scaled: ScaledStack, thread_id: str, input: dict[str, Any]) -> str:
    async with httpx.AsyncClient(base_url=scaled.gateway(), timeout=30) as http:
        body = {"assistant_id": "lead_agent", "input": input, "stream_mode": ["values", "updates"]}
        reply = await http.post(f"/threads/{thread_id}/runs", json=body)
        assert reply.status_code == 200, reply.text
        return str(reply.json()["run_id"])


async def run_status(scaled: ScaledStack, thread_id: str, run_id: str) -> str:
    async with httpx.AsyncClient(base_url=scaled.gateway(), timeout=30) as http:
        reply = await http.get(f"/threads/{thread_id}/runs/{run_id}")
        assert reply.status_code == 200, reply.text
        return str(reply.json()["status"])


async def ended(scaled: ScaledStack, thread_id: str, run_id: str, seconds: float = 60) -> str:
    for _ in range(int(seconds / 0.1)):
        status = await run_status(scaled, thread_id, run_id)
        if status in TERMINAL_RUN_STATUSES:
            return status
        await asyncio.sleep(0.1)
    raise AssertionError(f"run {run_id} still {status} after {seconds}s")


async def test_streams_through_either_gateway_are_complete(scaled: ScaledStack) -> None:
    for _ in range(4):
        thread_id = await new_thread(scaled)
        body = {
            "assistant_id": "lead_agent",
            "input": says("/tokens 40"),
            "stream_mode": "messages",
        }
        async with (
            httpx.AsyncClient(base_url=scaled.gateway(), timeout=60) as http,
            http.stream("POST", f"/threads/{thread_id}/runs/stream", json=body) as response,
        ):
            assert response.status_code == 200
            run_id = response.headers["Content-Location"].rsplit("/", 1)[-1]
            frames = [frame async for frame in sse(response)]
        exactly_once(frames)
        assert len(frames) > 40  # a message chunk per token, at least
        assert await ended(scaled, thread_id, run_id) == "success"
        replayed = await join(scaled, thread_id, run_id, "-1")  # likely the other gateway
        assert [(f.seq, f.event) for f in replayed] == [(f.seq, f.event) for f in frames]


async def test_join_resumes_with_last_event_id_on_any_gateway(scaled: ScaledStack) -> None:
    thread_id = await new_thread(scaled)
    run_id = await create_run(scaled, thread_id, slow(2))
    head = await join(scaled, thread_id, run_id, "-1", limit=2)
    tail = await join(scaled, thread_id, run_id, str(head[-1].seq))
    frames = head + tail
    exactly_once(frames)
    assert await ended(scaled, thread_id, run_id) == "success"
    assert frames[-1].event == "values"
    assert frames[-1].data["messages"][-1]["content"].startswith("Tool wait returned")


async def test_cancel_and_wait_cross_gateways(scaled: ScaledStack) -> None:
    thread_id = await new_thread(scaled)
    run_id = await create_run(scaled, thread_id, slow(60))
    async with httpx.AsyncClient(base_url=scaled.gateway(), timeout=60) as http:
        await asyncio.sleep(0.5)
        reply = await http.post(f"/threads/{thread_id}/runs/{run_id}/cancel?wait=1")
        # Once it has ended, with its last values (LangGraph Platform: docs/api-parity.md).
        assert reply.status_code == 200, reply.text
        assert reply.json()["messages"][0]["content"] == '/tool wait {"seconds": 60}'
    assert await run_status(scaled, thread_id, run_id) == "interrupted"

    async with httpx.AsyncClient(base_url=scaled.gateway(), timeout=60) as http:
        body = {"assistant_id": "lead_agent", "input": says("after the cancel")}
        reply = await http.post(f"/threads/{thread_id}/runs/wait", json=body)
        assert reply.status_code == 200, reply.text
        assert reply.json()["messages"][-1]["content"] == "You said: after the cancel"
    async with httpx.AsyncClient(base_url=scaled.gateway(), timeout=60) as http:
        run_id = await create_run(scaled, thread_id, says("joined elsewhere"))
        reply = await http.get(f"/threads/{thread_id}/runs/{run_id}/join")
        assert reply.status_code == 200, reply.text
        assert reply.json()["messages"][-1]["content"] == "You said: joined elsewhere"


async def test_a_killed_runner_is_taken_over_and_its_stream_stays_whole(
    scaled: ScaledStack,
) -> None:
    admitted = scaled.total("admission", "waybill_runs_admitted_total")
    takeovers = scaled.total("admission", "waybill_lease_takeovers_total")
    renewals = scaled.total("admission", "waybill_lease_renewals_total")
    started = {name: _started(scaled, name) for name in scaled.runners()}
    thread_id = await new_thread(scaled)
    run_id = await create_run(scaled, thread_id, slow(3))
    head = await join(scaled, thread_id, run_id, "-1", limit=2)  # it is running now

    executing = [name for name in scaled.runners() if _started(scaled, name) > started[name]]
    assert len(executing) == 1, executing
    scaled.kill(executing[0])
    try:
        tail = await join(scaled, thread_id, run_id, str(head[-1].seq))
        exactly_once(head + tail)
        assert await ended(scaled, thread_id, run_id) == "success"
    finally:
        scaled.restart(executing[0])
    assert scaled.total("admission", "waybill_runs_admitted_total") == admitted + 1
    wait_until(
        lambda: scaled.total("admission", "waybill_lease_takeovers_total") == takeovers + 1,
        "the takeover counted",
    )
    # Its 3 seconds outlive a 2-second lease: it was renewed.
    assert scaled.total("admission", "waybill_lease_renewals_total") > renewals
    assert sum(page["waybill_runs_running"] for page in scaled.metrics("admission")) == 0
    rows = scaled.sql("SELECT status, attempt FROM runs WHERE run_id = %s", run_id)
    assert rows == [("success", 2)]


def _started(scaled: ScaledStack, name: str) -> float:
    from tests.support.stacks import scrape

    return scrape(scaled.replicas[name].metrics).get("waybill_runner_runs_started_total", 0.0)


@pytest.fixture(autouse=True)
def _all_alive(scaled: ScaledStack) -> Iterator[None]:
    yield
    scaled.stack.raise_if_dead()


def test_every_process_of_the_profile_is_up(scaled: ScaledStack) -> None:
    names = set(scaled.stack.processes)
    assert names == {
        "gateway",
        "gateway-2",
        "admission",
        "admission-2",
        "runner",
        "runner-2",
        "journal",
        "journal-2",
        "delivery",
    }
    assert len(scaled.gateways) == 2
    assert Path(scaled.stack.env["WAYBILL_DATA_DIR"]).is_dir()
