"""The receipt is written before the terminal status, and a run is never
`success` without one: a runner is frozen right after delivery stored its
receipt and before it could report the status, then killed; the runner that
takes the run over writes its own receipt (its files still count: the run's
first snapshot is kept) and finishes it; the run's webhook is sent once, for
the epoch that finished it."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from langgraph_sdk import get_client

from tests.support.helpers import present, tools, write
from tests.support.stacks import (
    WEBHOOK_ENV,
    TwoRunners,
    eventually,
    free_port,
    fresh_postgres_database,
    service_channel,
    two_runner_stack,
)
from tests.support.webhook_receiver import WebhookReceiver
from waybill.v1 import delivery_pb2, delivery_pb2_grpc

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def two_runners(tmp_path: Path) -> Iterator[TwoRunners]:
    with (
        fresh_postgres_database() as url,
        two_runner_stack(tmp_path, url, **WEBHOOK_ENV) as running,
    ):
        yield running


def stored_receipt(address: str, run_id: str) -> delivery_pb2.Receipt | None:
    with service_channel(address) as channel:
        try:
            return delivery_pb2_grpc.DeliveryStub(channel).GetReceipt(
                delivery_pb2.GetReceiptRequest(run_id=run_id), timeout=5
            )
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.NOT_FOUND:  # type: ignore[attr-defined]
                return None
            raise


async def test_a_runner_killed_between_receipt_and_status(two_runners: TwoRunners) -> None:
    stack = two_runners.stack
    receiver = WebhookReceiver(free_port()).start()
    client = get_client(url=stack.url, timeout=30)
    raw = httpx.AsyncClient(base_url=stack.url, timeout=30)
    try:
        thread = (await client.threads.create())["thread_id"]
        script = tools(
            write("report.md", "done"),
            ("wait", {"seconds": 1.5}),
            present("report.md"),
        )
        run = await client.runs.create(thread, "lead_agent", input=script, webhook=receiver.url)
        run_id = run["run_id"]
        events = f"/threads/{thread}/runs/{run_id}/events?type=tool_start"

        async def waiting() -> bool:
            found = (await raw.get(events)).json()
            return any(e["data"].get("name") == "wait" for e in found)

        await eventually(waiting, "the slow tool to start", seconds=60.0)
        delivery = stack.processes["delivery"]
        delivery.send_signal(signal.SIGSTOP)  # the receipt request will wait in its socket
        victim = two_runners.executing()

        async def receipt_requested() -> bool:
            return two_runners.stats(victim)["receipts_requested"] >= 1

        await eventually(receipt_requested, "the runner to ask for its receipt", seconds=60.0)
        await asyncio.sleep(0.5)  # let the request leave the runner's process
        stack.processes[victim].send_signal(signal.SIGSTOP)  # it never sees the answer
        delivery.send_signal(signal.SIGCONT)

        address = stack.address_of("delivery")
        first = await eventually(
            lambda: asyncio.to_thread(stored_receipt, address, run_id),
            "the first receipt",
            seconds=60.0,
        )
        assert first.epoch == 1 and first.verdict == "delivered"
        # Receipt written, status not: the run is not a success yet.
        assert (await client.runs.get(thread, run_id))["status"] == "running"

        stack.processes[victim].send_signal(signal.SIGKILL)
        stack.processes[victim].wait()

        async def ended() -> dict[str, Any] | None:
            found = await client.runs.get(thread, run_id)
            if found["status"] == "success":
                # Whenever the run reads `success`, its receipt is already there.
                assert stored_receipt(address, run_id) is not None
                return found
            assert found["status"] == "running"
            return None

        await eventually(ended, "the takeover to finish the run", seconds=60.0)
        receipt = (await raw.get(f"/threads/{thread}/runs/{run_id}/receipt")).json()
        assert receipt["epoch"] == 2  # the runner that took over wrote its own
        assert receipt["verdict"] == "delivered"
        assert receipt["matched"] == ["report.md"]  # written by epoch 1, still the run's
        survivor = two_runners.other_than(victim)
        assert two_runners.stats(survivor)["runs_taken_over"] == 1

        async def settled() -> list[dict[str, Any]] | None:
            found = (await raw.get(f"/threads/{thread}/runs/{run_id}/deliveries")).json()
            states = {d["epoch"]: d["state"] for d in found}
            return found if states == {1: "superseded", 2: "delivered"} else None

        await eventually(settled, "epoch 1's webhook superseded, epoch 2's delivered", seconds=60.0)
        [hit] = receiver.snapshot()
        body = json.loads(hit.body)
        assert body["status"] == "success" and body["receipt"]["epoch"] == 2
    finally:
        receiver.stop()
        await raw.aclose()
        await client.aclose()
