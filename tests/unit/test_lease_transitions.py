"""The run's lease state machine, driven on the lease store directly, on a SQLite
file and on Postgres: claim, begin, renew, release, takeover, finish, and every
write the transition table forbids (a stale epoch, another runner, an ended run)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import select

from tests.support.admission_stores import BACKENDS, a_pending_run, admission_stores
from tests.support.admission_stores import AdmissionStores as Stores
from waybill.common.statuses import (
    TERMINAL_RUN_STATUSES,
    RunStatus,
    ThreadStatus,
)
from waybill.services.admission.rows import RunEnd, RunRow
from waybill.services.admission.runs.run_transitions import (
    RUN_TRANSITIONS,
    allowed_sources,
)
from waybill.services.admission.tables import threads

LEASE = 30.0
MAX_ATTEMPTS = 3


@pytest.fixture(params=BACKENDS)
async def stores(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Stores]:
    async with admission_stores(tmp_path, request.param) as opened:
        yield opened


async def admitted(stores: Stores) -> RunRow:
    """A pending run on a fresh thread, as StartRun stores it (no runner here)."""
    return await stores.runs.admit_run(a_pending_run(), "create")


async def stored(stores: Stores, run: RunRow) -> RunRow:
    return await stores.runs.get_run(run.thread_id, run.run_id)


async def thread_status(stores: Stores, run: RunRow) -> str:
    """The status stored on the thread's row (not the live one a read derives)."""
    async with stores.threads.engine.connect() as conn:
        query = select(threads.c.status).where(threads.c.thread_id == run.thread_id)
        return str((await conn.execute(query)).scalar_one())


async def claim(stores: Stores, runner: str = "runner-a") -> tuple[RunRow, bool]:
    claimed = await stores.leases.claim_next(runner, LEASE, MAX_ATTEMPTS)
    assert claimed is not None, "nothing was claimable"
    return claimed


def end(run: RunRow, status: str, epoch: int | None = None) -> RunEnd:
    return RunEnd(run.run_id, run.epoch if epoch is None else epoch, status, "done")


def test_the_table_names_each_move_once() -> None:
    assert allowed_sources(RunStatus.RUNNING) == [RunStatus.PENDING, RunStatus.RUNNING]
    assert allowed_sources(RunStatus.SUCCESS) == [RunStatus.RUNNING]
    assert allowed_sources(RunStatus.TIMEOUT) == [RunStatus.RUNNING]
    for status in TERMINAL_RUN_STATUSES:  # an ended run moves no more
        assert status not in RUN_TRANSITIONS
    assert allowed_sources(RunStatus.PENDING) == [RunStatus.PENDING]  # only a claim's lease


async def test_claim_begin_renew_finish(stores: Stores) -> None:
    run = await admitted(stores)
    claimed, starts_now = await claim(stores)
    assert (claimed.run_id, claimed.status, starts_now) == (run.run_id, RunStatus.RUNNING, True)
    assert (claimed.epoch, claimed.attempt, claimed.lease_owner) == (1, 1, "runner-a")
    assert await thread_status(stores, run) == ThreadStatus.BUSY
    assert await stores.leases.claim_next("runner-b", LEASE, MAX_ATTEMPTS) is None  # held

    assert await stores.leases.begin_run(run.run_id, 1, MAX_ATTEMPTS) == (True, "")
    renewed, lost = await stores.leases.renew_leases("runner-a", [(run.run_id, 1)], LEASE)
    assert (renewed, lost) == ([(run.run_id, 1)], [])

    assert await stores.leases.finish_run(end(claimed, RunStatus.SUCCESS))
    ended = await stored(stores, run)
    assert (ended.status, ended.lease_owner, ended.stop_reason) == (RunStatus.SUCCESS, None, "done")
    assert await thread_status(stores, run) == ThreadStatus.IDLE


async def test_a_stale_epoch_and_another_runner_are_fenced_off(stores: Stores) -> None:
    run = await admitted(stores)
    first, _ = await claim(stores, "runner-a")
    # Runner a hands it back (draining): runner b takes it over with a new epoch.
    await stores.leases.release_run(run.run_id, first.epoch)
    second, starts_now = await claim(stores, "runner-b")
    assert (second.status, starts_now, second.epoch, second.attempt) == ("running", True, 2, 2)

    assert await stores.leases.renew_leases("runner-a", [(run.run_id, 1)], LEASE) == (
        [],
        [(run.run_id, 1)],
    )
    # Runner a names the current epoch, but it is not its lease.
    assert await stores.leases.renew_leases("runner-a", [(run.run_id, 2)], LEASE) == (
        [],
        [(run.run_id, 2)],
    )
    assert await stores.leases.begin_run(run.run_id, 1, MAX_ATTEMPTS) == (False, "stale")
    assert not await stores.leases.finish_run(end(run, RunStatus.SUCCESS, epoch=1))
    await stores.leases.release_run(run.run_id, 1)  # a stale hand-back changes nothing
    assert await stores.leases.claim_next("runner-c", LEASE, MAX_ATTEMPTS) is None
    still = await stored(stores, run)
    assert (still.status, still.epoch, still.lease_owner) == (RunStatus.RUNNING, 2, "runner-b")

    assert await stores.leases.finish_run(end(second, RunStatus.ERROR))
    assert (await stored(stores, run)).status == RunStatus.ERROR
    assert await thread_status(stores, run) == ThreadStatus.ERROR


@pytest.mark.parametrize("ending", TERMINAL_RUN_STATUSES)
async def test_an_ended_run_moves_no_more(stores: Stores, ending: RunStatus) -> None:
    run = await admitted(stores)
    claimed, _ = await claim(stores)
    assert await stores.leases.finish_run(end(claimed, ending))
    for status in TERMINAL_RUN_STATUSES:
        assert not await stores.leases.finish_run(end(claimed, status))
    assert await stores.leases.begin_run(run.run_id, claimed.epoch, MAX_ATTEMPTS) == (
        False,
        "stale",
    )
    assert await stores.leases.renew_leases("runner-a", [(run.run_id, claimed.epoch)], LEASE) == (
        [],
        [(run.run_id, claimed.epoch)],
    )
    await stores.leases.release_run(run.run_id, claimed.epoch)
    assert await stores.leases.claim_next("runner-b", LEASE, MAX_ATTEMPTS) is None
    after = await stored(stores, run)
    assert (after.status, after.epoch) == (ending, claimed.epoch)


async def test_a_pending_run_cannot_end_as_if_it_ran(stores: Stores) -> None:
    run = await admitted(stores)
    for status in (RunStatus.SUCCESS, RunStatus.TIMEOUT):
        assert not await stores.leases.finish_run(end(run, status, epoch=0))
    assert (await stored(stores, run)).status == RunStatus.PENDING
    # Nor begin before any claim: epoch 0 is no runner's.
    assert await stores.leases.begin_run(run.run_id, 0, MAX_ATTEMPTS) == (False, "stale")


async def test_a_run_cancelled_before_it_started_is_leased_only_to_be_ended(
    stores: Stores,
) -> None:
    run = await admitted(stores)
    await stores.runs.request_cancel(run.thread_id, run.run_id, "interrupt")
    claimed, starts_now = await claim(stores)
    assert (claimed.status, starts_now, claimed.epoch) == (RunStatus.PENDING, False, 1)
    assert await stores.leases.begin_run(run.run_id, 1, MAX_ATTEMPTS) == (False, "cancelled")
    ended = await stored(stores, run)
    assert (ended.status, ended.stop_reason) == (
        RunStatus.INTERRUPTED,
        "cancelled before it started",
    )
    assert await thread_status(stores, run) == ThreadStatus.IDLE  # it never ran


async def test_a_run_out_of_attempts_is_ended_by_its_runner(stores: Stores) -> None:
    run = await admitted(stores)
    for attempt in range(1, MAX_ATTEMPTS + 1):
        claimed, starts_now = await claim(stores)
        assert (claimed.attempt, starts_now) == (attempt, True)
        await stores.leases.release_run(run.run_id, claimed.epoch)  # its lease lost
    last, starts_now = await claim(stores)
    assert (last.attempt, starts_now) == (MAX_ATTEMPTS + 1, False)
    assert await stores.leases.begin_run(run.run_id, last.epoch, MAX_ATTEMPTS) == (
        False,
        "exhausted",
    )
    ended = await stored(stores, run)
    assert ended.status == RunStatus.ERROR
    assert f"gave up after {MAX_ATTEMPTS} attempts" in ended.stop_reason
    assert await thread_status(stores, run) == ThreadStatus.ERROR


async def test_a_run_whose_last_hand_off_never_arrives_is_ended_at_the_next_claim(
    stores: Stores,
) -> None:
    """Its runner never reaches `BeginRun` (the run never reached it): the claim after
    that ends the run here, instead of handing it out again and again."""
    run = await admitted(stores)
    ended_here: list[str] = []
    stores.leases.on_ended = ended_here.append
    for _ in range(MAX_ATTEMPTS + 1):  # its attempts, then the hand-off to be ended
        claimed, _ = await claim(stores)
        await stores.leases.release_run(run.run_id, claimed.epoch)  # lost on the way
    assert await stores.leases.claim_next("runner-a", LEASE, MAX_ATTEMPTS) is None
    ended = await stored(stores, run)
    assert (ended.status, ended.attempt, ended.lease_owner) == (
        RunStatus.ERROR,
        MAX_ATTEMPTS + 1,
        None,
    )
    assert "could not be handed to a runner" in ended.stop_reason
    assert await thread_status(stores, run) == ThreadStatus.ERROR
    assert ended_here == [run.run_id]
