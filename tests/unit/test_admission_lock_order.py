"""Admission's transactions take their row locks in one order on Postgres
(services/admission/runs/lock_order.py), so two of them never wait on each other in
a cycle: Postgres broke such cycles by failing one (`deadlock detected`, seen
on `UPDATE threads` in the dispatcher under the fuzz).

Each test makes the worst interleaving certain rather than hoped for: the first
transaction is paused right after its first write, the second is started and
seen waiting on a row lock (pg_stat_activity), and only then does the first go
on. With the locks taken in two orders, that was a deadlock every time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from tests.support.admission_stores import AdmissionStores, a_pending_run, admission_stores
from waybill.common.statuses import MultitaskStrategy, RunStatus
from waybill.services.admission.runs import run_store
from waybill.services.admission.runs.leases import LeaseStore

pytestmark = pytest.mark.timeout(60)

LEASE = 30.0
MAX_ATTEMPTS = 3


@pytest.fixture
async def stores(tmp_path: Path) -> AsyncIterator[AdmissionStores]:
    async with admission_stores(tmp_path, "postgres") as opened:
        yield opened


async def a_lock_wait(stores: AdmissionStores) -> None:
    """Returns once a transaction of this database waits on a row lock."""
    query = text(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    deadline = time.monotonic() + 10.0
    while True:
        async with stores.threads.engine.connect() as conn:
            if (await conn.execute(query)).scalar_one():
                return
        assert time.monotonic() < deadline, "the second transaction never waited on a lock"
        await asyncio.sleep(0.02)


def paused_at_first_call(
    wrapped: Callable[..., Awaitable[Any]],
    paused: asyncio.Event,
    resume: asyncio.Event,
    after: bool = False,
) -> Callable[..., Awaitable[Any]]:
    """`wrapped`, whose first call waits for `resume` before it runs (`after`:
    once it has run), its transaction holding what it locked so far."""
    calls = 0

    async def pause() -> None:
        paused.set()
        await resume.wait()

    async def pausing(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1 and not after:
            await pause()
        result = await wrapped(*args, **kwargs)
        if calls == 1 and after:
            await pause()
        return result

    return pausing


async def while_paused(
    first: Awaitable[Any],
    paused: asyncio.Event,
    resume: asyncio.Event,
    second: Callable[[], Awaitable[Any]],
    stores: AdmissionStores,
) -> tuple[Any, Any]:
    """Run `first` to its pause, start `second`, see it wait, let `first` go on."""
    first_task = asyncio.ensure_future(first)
    await asyncio.wait_for(paused.wait(), 10.0)
    second_task = asyncio.ensure_future(second())
    await a_lock_wait(stores)
    resume.set()
    return await asyncio.gather(first_task, second_task)


async def test_a_claim_and_an_interrupting_admit_on_its_thread_both_commit(
    stores: AdmissionStores, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim is paused as it is about to write the run and its thread (busy);
    an admit with the `interrupt` strategy locks the thread, then cancels the
    thread's active run. The claim used to have locked the run (only): each then
    waited on the other."""
    queued = await stores.runs.admit_run(a_pending_run(), "create")
    paused, resume = asyncio.Event(), asyncio.Event()
    monkeypatch.setattr(
        stores.leases, "_claim", paused_at_first_call(stores.leases._claim, paused, resume)
    )
    interrupting = a_pending_run()
    interrupting.thread_id = queued.thread_id
    interrupting.multitask_strategy = MultitaskStrategy.INTERRUPT

    claimed, admitted = await while_paused(
        stores.leases.claim_next("runner-a", LEASE, MAX_ATTEMPTS),
        paused,
        resume,
        lambda: stores.runs.admit_run(interrupting, "create"),
        stores,
    )
    assert claimed is not None and claimed[0].run_id == queued.run_id
    assert admitted.displaced == [(queued.run_id, MultitaskStrategy.INTERRUPT)]
    first = await stores.runs.get_run(queued.thread_id, queued.run_id)
    assert (first.status, first.cancel_action) == (RunStatus.RUNNING, "interrupt")


async def test_a_cancel_of_many_and_a_lease_renewal_both_commit(
    stores: AdmissionStores, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancel of every running run writes them oldest first; a runner renews its
    leases in its own order (the newest first here). Each used to hold one run
    the other wanted next."""
    older = await stores.runs.admit_run(a_pending_run(), "create")
    newer = await stores.runs.admit_run(a_pending_run(), "create")
    leases: LeaseStore = stores.leases
    held = [await leases.claim_next("runner-a", LEASE, MAX_ATTEMPTS) for _ in range(2)]
    epochs = {run.run_id: run.epoch for run, _ in (claim for claim in held if claim)}
    assert set(epochs) == {older.run_id, newer.run_id}
    paused, resume = asyncio.Event(), asyncio.Event()
    monkeypatch.setattr(
        run_store,
        "_mark_cancelled",
        paused_at_first_call(run_store._mark_cancelled, paused, resume, after=True),
    )
    newest_first = [(newer.run_id, epochs[newer.run_id]), (older.run_id, epochs[older.run_id])]

    cancelled, (renewed, lost) = await while_paused(
        stores.runs.request_cancel_many("", [], "running", "interrupt"),
        paused,
        resume,
        lambda: leases.renew_leases("runner-a", newest_first, LEASE),
        stores,
    )
    assert [run.run_id for run in cancelled] == [older.run_id, newer.run_id]
    assert sorted(renewed) == sorted(newest_first) and lost == []
