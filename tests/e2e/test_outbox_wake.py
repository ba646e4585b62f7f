"""A webhook released while the outbox is in a pass goes out at once, not a
whole poll later.

The outbox worker runs in-process on a real delivery store (SQLite) and posts
to a local receiver; admission's one answer it needs (GetRun: the run ended) is
scripted. The race is made certain rather than hoped for: the second run's
confirm lands right after the pass has read its next due time, the worst moment
(that pass saw nothing due, and sleeps the poll unless the wake is kept). The
poll is 30 s, so a lost wake cannot pass for a prompt delivery.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.support.stacks import free_port
from tests.support.webhook_receiver import WebhookReceiver
from waybill.common import codec
from waybill.common.settings import Settings
from waybill.common.sql import create_engine
from waybill.common.statuses import RunStatus
from waybill.services.delivery.outbox import Outbox
from waybill.services.delivery.outbox_store import OutboxStore
from waybill.services.delivery.receipting import write_receipt
from waybill.services.delivery.store import ReceiptStore
from waybill.v1 import admission_pb2, common_pb2, delivery_pb2

pytestmark = pytest.mark.timeout(60)

POLL_SECONDS = 30.0
EPOCH = 1


class RaceAfterNextDue(OutboxStore):
    """The outbox's store, with a hook run right after the next pass reads its
    next due time (then cleared)."""

    after_next_due: Callable[[], Awaitable[Any]] | None = None

    async def next_due(self, now: datetime) -> datetime | None:
        due = await super().next_due(now)
        hook, self.after_next_due = self.after_next_due, None
        if hook is not None:
            await hook()
        return due


class EndedRuns:
    """Admission's GetRun, scripted: every run asked about ended successfully."""

    async def GetRun(  # noqa: N802 (the gRPC stub's naming)
        self, request: admission_pb2.GetRunRequest, **_call_options: Any
    ) -> common_pb2.Run:
        return common_pb2.Run(
            run_id=request.run_id,
            thread_id=request.thread_id,
            status=codec.RUN_STATUS_VALUES[RunStatus.SUCCESS],
            epoch=EPOCH,
        )


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    found = WebhookReceiver(free_port()).start()
    yield found
    found.stop()


@pytest.fixture
async def parts(tmp_path: Path) -> AsyncIterator[tuple[Settings, ReceiptStore, RaceAfterNextDue]]:
    settings = Settings(
        data_dir=tmp_path,
        webhook_secret="outbox-wake-secret",
        webhook_allow_networks="127.0.0.1/32",
        webhook_poll_seconds=POLL_SECONDS,
        webhook_held_seconds=3600.0,  # only confirms release rows here
    )
    engine = create_engine(settings.sqlalchemy_url("delivery"))
    receipts = ReceiptStore(engine)
    await receipts.migrate()
    yield settings, receipts, RaceAfterNextDue(engine)
    await engine.dispose()


async def held_webhook(
    settings: Settings, receipts: ReceiptStore, outbox_store: OutboxStore, url: str
) -> str:
    """A run's receipt, holding its webhook in the outbox; returns the run id."""
    run_id = str(uuid.uuid4())
    request = delivery_pb2.WriteReceiptRequest(
        run_id=run_id,
        thread_id=str(uuid.uuid4()),
        epoch=EPOCH,
        outcome=codec.RUN_STATUS_VALUES[RunStatus.SUCCESS],
        assistant_id=str(uuid.uuid4()),
        webhook=url,
    )
    _, held = await write_receipt(request, settings, receipts, outbox_store)
    assert held == 1
    return run_id


def delivered_runs(receiver: WebhookReceiver) -> list[str]:
    return [codec.loads(hit.body, {})["run_id"] for hit in receiver.snapshot()]


async def delivered(receiver: WebhookReceiver, run_id: str, seconds: float) -> float:
    """Seconds until `run_id`'s webhook reached the receiver (fails after `seconds`)."""
    began = time.monotonic()
    while run_id not in delivered_runs(receiver):
        waited = time.monotonic() - began
        assert waited < seconds, f"webhook of {run_id} not delivered after {waited:.1f}s"
        await asyncio.sleep(0.05)
    return time.monotonic() - began


async def asleep(outbox: Outbox) -> None:
    deadline = time.monotonic() + 5.0
    while outbox.loop.in_pass:
        assert time.monotonic() < deadline, "the outbox never finished its first pass"
        await asyncio.sleep(0.01)


async def test_a_webhook_released_during_a_pass_is_sent_without_waiting_a_poll(
    parts: tuple[Settings, ReceiptStore, RaceAfterNextDue], receiver: WebhookReceiver
) -> None:
    settings, receipts, outbox_store = parts
    outbox = Outbox(settings, outbox_store, EndedRuns())  # type: ignore[arg-type]
    outbox.start()
    try:
        first = await held_webhook(settings, receipts, outbox_store, receiver.url)
        second = await held_webhook(settings, receipts, outbox_store, receiver.url)
        await asleep(outbox)  # its first pass, with nothing to send, is done
        confirmed_mid_pass = asyncio.Event()

        async def confirm_second() -> None:
            assert await outbox.confirm(second, EPOCH) == 1
            confirmed_mid_pass.set()

        outbox_store.after_next_due = confirm_second
        # Confirming the first wakes the outbox: that pass sends it, reads its next
        # due time (none), and then the second is confirmed.
        assert await outbox.confirm(first, EPOCH) == 1
        await delivered(receiver, first, seconds=10.0)
        await asyncio.wait_for(confirmed_mid_pass.wait(), 10.0)
        waited = await delivered(receiver, second, seconds=POLL_SECONDS / 3)
        assert waited < 5.0
        assert sorted(delivered_runs(receiver)) == sorted([first, second])
    finally:
        await outbox.close()


class CountedPasses(OutboxStore):
    """The outbox's store, counting the passes of the replica that uses it."""

    passes = 0

    async def next_due(self, now: datetime) -> datetime | None:
        self.passes += 1
        return await super().next_due(now)


async def test_a_row_claimed_by_another_replica_is_waited_for_not_polled(
    parts: tuple[Settings, ReceiptStore, RaceAfterNextDue], receiver: WebhookReceiver
) -> None:
    """Two delivery replicas on one outbox: while one holds a due row's claim, the
    other sleeps until the claim ends (it used to wake every 50 ms for a row it
    could not take), and sends the row once the claim lapses unfinished."""
    settings, receipts, other_replica = parts
    run_id = await held_webhook(settings, receipts, other_replica, receiver.url)
    other_outbox = Outbox(settings, other_replica, EndedRuns())  # type: ignore[arg-type]
    try:
        assert await other_outbox.confirm(run_id, EPOCH) == 1  # pending, due now
    finally:
        await other_outbox.close()
    claim = 2.0  # the other replica's claim: it never finishes its attempt
    claimed = await other_replica.claim_due(codec.now_utc(), timedelta(seconds=claim), 10)
    assert [found.run_id for found in claimed] == [run_id]

    this_replica = CountedPasses(other_replica.engine)
    outbox = Outbox(settings, this_replica, EndedRuns())  # type: ignore[arg-type]
    began = time.monotonic()
    outbox.start()
    try:
        waited = await delivered(receiver, run_id, seconds=claim + 10.0)
        assert waited >= claim - 0.5, "sent while another replica held its claim"
        # The first pass, one when the claim lapses (a margin's early one at most),
        # and the pass after the send: never one every 50 ms.
        assert this_replica.passes <= 5, f"{this_replica.passes} passes in {waited:.1f}s"
    finally:
        await outbox.close()
    assert time.monotonic() - began < claim + 10.0
