"""The log closer's timer, against a real admission store on SQLite: a terminal
write sets the sleeping closer to wake when its close is due (no pass before),
and that pass claims the close. The journal here is unreachable, so the claim
moves the close on by the retry time instead of settling it."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.admission_stores import admission_stores
from tests.support.stacks import free_port
from waybill.common.background import DUE_MARGIN_SECONDS
from waybill.common.grpc_channels import open_channel
from waybill.services.admission.runs.log_closes import LogCloser, LogCloseStore, owe_close

pytestmark = pytest.mark.timeout(60)

GRACE = 0.6
RETRY = 30.0


@pytest.fixture
async def closer(tmp_path: Path) -> AsyncIterator[LogCloser]:
    async with admission_stores(tmp_path) as stores:
        journal_nowhere = open_channel(f"127.0.0.1:{free_port()}")
        started = LogCloser(
            LogCloseStore(stores.threads.engine), journal_nowhere, GRACE, RETRY, 1.0
        )
        started.start()
        yield started
        await started.stop()
        await journal_nowhere.close()


async def asleep(closer: LogCloser) -> None:
    deadline = time.monotonic() + 5.0
    while closer.loop.in_pass:
        assert time.monotonic() < deadline, "the log closer never went to sleep"
        await asyncio.sleep(0.01)


async def test_an_owed_close_sets_an_alarm_for_its_due_time_and_is_claimed_then(
    closer: LogCloser,
) -> None:
    await asleep(closer)
    assert closer.loop.wakes_at is None  # nothing owed: it sleeps until told
    async with closer.store.engine.begin() as conn:  # the terminal write's part
        await owe_close(conn, str(uuid.uuid4()), 1, GRACE)
    first_due = await closer.store.next_due()
    owed_at = time.monotonic()
    closer.owed()
    assert not closer.loop.in_pass, "an owed close cost a pass before it was due"
    alarm = closer.loop.wakes_at
    assert alarm is not None
    assert GRACE - 0.2 < alarm - asyncio.get_running_loop().time() <= GRACE + DUE_MARGIN_SECONDS

    deadline = time.monotonic() + 10.0
    while await closer.store.next_due() == first_due:  # claimed: moved on by the retry
        assert time.monotonic() < deadline, "the owed close was never claimed"
        await asyncio.sleep(0.02)
    assert GRACE - 0.1 <= time.monotonic() - owed_at < 3.0
