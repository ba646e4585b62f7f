"""When the dispatcher wakes by itself, against a real admission store on SQLite:
the timer it sets after a pass is the earliest lease expiry or delayed start
(`after_seconds`), and the loop acts on it with nobody waking it: a delayed run
reaches a runner at its start time, a run whose lease ran out is taken over on
time, and a run claimed as it was admitted sets an alarm instead of a pass."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.admission_stores import AdmissionStores as Stores
from tests.support.admission_stores import a_pending_run, admission_stores
from waybill.common.background import DUE_MARGIN_SECONDS
from waybill.services.admission.rows import RunRow
from waybill.services.admission.runs.dispatch import RunnerConnection, RunnerPool
from waybill.services.admission.runs.leases import Lease
from waybill.v1 import admission_pb2

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Stores]:
    async with admission_stores(tmp_path) as opened:
        yield opened


@pytest.fixture
async def pools() -> AsyncIterator[list[RunnerPool]]:
    """Pools a test started; stopped after it."""
    started: list[RunnerPool] = []
    yield started
    for pool in started:
        await pool.stop()


def started_pool(pools: list[RunnerPool], store: Stores, lease: float) -> RunnerPool:
    pool = RunnerPool(store.leases, lease_seconds=lease, max_attempts=3)
    pool.start()
    pools.append(pool)
    return pool


async def admitted(store: Stores, after_seconds: float = 0.0, lease: Lease | None = None) -> RunRow:
    return await store.runs.admit_run(a_pending_run(after_seconds), "create", lease=lease)


async def next_run_for(runner: RunnerConnection, seconds: float) -> admission_pb2.WorkAssignment:
    while True:
        assignment = await asyncio.wait_for(runner.outbox.get(), seconds)
        assert assignment is not None
        if assignment.HasField("run"):
            return assignment


async def until_asleep(pool: RunnerPool) -> None:
    """Until the loop finished its pass and chose its timer."""
    deadline = time.monotonic() + 5.0
    while pool.loop.in_pass:
        assert time.monotonic() < deadline, "the dispatch loop never went to sleep"
        await asyncio.sleep(0.01)


# ---- the timer a pass chooses ---------------------------------------------------------


async def test_with_nothing_leased_or_delayed_there_is_no_timer(store: Stores) -> None:
    pool = RunnerPool(store.leases, lease_seconds=30.0, max_attempts=3)
    assert await pool.seconds_to_next_timer() is None
    await admitted(store)  # due now: a claim's business, not a timer's
    assert await pool.seconds_to_next_timer() is None


async def test_the_timer_is_the_earliest_delayed_start(store: Stores) -> None:
    pool = RunnerPool(store.leases, lease_seconds=30.0, max_attempts=3)
    await admitted(store, after_seconds=20.0)
    await admitted(store, after_seconds=8.0)
    seconds = await pool.seconds_to_next_timer()
    assert seconds is not None
    assert 7.5 < seconds <= 8.0 + DUE_MARGIN_SECONDS


async def test_the_timer_is_the_earliest_lease_expiry(store: Stores) -> None:
    pool = RunnerPool(store.leases, lease_seconds=30.0, max_attempts=3)
    await admitted(store, after_seconds=20.0)
    await admitted(store, lease=Lease("runner-a", 6.0))
    seconds = await pool.seconds_to_next_timer()
    assert seconds is not None
    assert 5.5 < seconds <= 6.0 + DUE_MARGIN_SECONDS


async def test_a_lease_already_expired_makes_the_timer_the_margin(store: Stores) -> None:
    pool = RunnerPool(store.leases, lease_seconds=30.0, max_attempts=3)
    await admitted(store, lease=Lease("runner-a", 0.01))
    await asyncio.sleep(0.05)
    assert await pool.seconds_to_next_timer() == DUE_MARGIN_SECONDS


# ---- the loop acting on its timers ----------------------------------------------------


async def test_a_delayed_run_reaches_a_runner_at_its_start_time(
    store: Stores, pools: list[RunnerPool]
) -> None:
    pool = started_pool(pools, store, lease=30.0)
    runner = pool.connect("runner-a", 2)
    run = await admitted(store, after_seconds=0.8)
    admitted_at = time.monotonic()
    pool.wake()  # as admission does after an admit: the pass finds it not yet due
    assignment = await next_run_for(runner, seconds=5.0)
    waited = time.monotonic() - admitted_at
    assert assignment.run.run_id == run.run_id
    assert assignment.start_now
    assert 0.7 <= waited < 2.5, f"started after {waited:.2f}s, due after 0.8s"


async def test_an_expired_lease_is_taken_over_on_time_by_another_runner(
    store: Stores, pools: list[RunnerPool]
) -> None:
    pool = started_pool(pools, store, lease=0.8)
    first = pool.connect("runner-a", 1)
    run = await admitted(store)
    pool.wake()
    claimed = await next_run_for(first, seconds=5.0)
    claimed_at = time.monotonic()
    assert (claimed.run.run_id, claimed.run.attempt) == (run.run_id, 1)
    # runner-a never renews. runner-b connects (a pass: nothing to claim yet).
    second = pool.connect("runner-b", 1)
    taken = await next_run_for(second, seconds=5.0)
    waited = time.monotonic() - claimed_at
    assert (taken.run.run_id, taken.run.attempt) == (run.run_id, 2)
    assert 0.7 <= waited < 2.5, f"taken over after {waited:.2f}s, lease 0.8s"


async def test_a_renewed_lease_moves_the_timer_on(store: Stores, pools: list[RunnerPool]) -> None:
    pool = started_pool(pools, store, lease=0.8)
    first = pool.connect("runner-a", 1)
    await admitted(store)
    pool.wake()
    claimed = await next_run_for(first, seconds=5.0)
    second = pool.connect("runner-b", 1)
    for _ in range(4):  # 1.6s of renewals: no takeover meanwhile
        await asyncio.sleep(0.4)
        await pool.renew(first, [(claimed.run.run_id, claimed.run.epoch)])
    assert second.outbox.empty()
    taken = await next_run_for(second, seconds=5.0)  # renewals stop: it expires
    assert taken.run.attempt == 2


async def test_a_run_leased_at_admit_sets_an_alarm_and_no_pass(
    store: Stores, pools: list[RunnerPool]
) -> None:
    pool = started_pool(pools, store, lease=0.8)
    runner = pool.connect("runner-a", 2)
    await until_asleep(pool)
    assert pool.loop.wakes_at is None  # nothing leased or delayed: it sleeps until woken
    run = a_pending_run()
    assert pool.reserve_slot(run.run_id) is runner
    await store.runs.admit_run(run, "create", lease=Lease(runner.runner_id, pool.lease_seconds))
    leased_at = time.monotonic()
    pool.leased_at_admit()
    assert not pool.loop.in_pass, "a run claimed at admit cost a dispatch pass"
    alarm = pool.loop.wakes_at
    assert alarm is not None
    in_seconds = alarm - asyncio.get_running_loop().time()
    assert 0.6 < in_seconds <= 0.8 + DUE_MARGIN_SECONDS
    # The runner never renews: the alarm alone starts the pass that takes it over.
    taken = await next_run_for(runner, seconds=5.0)
    waited = time.monotonic() - leased_at
    assert (taken.run.run_id, taken.run.attempt) == (run.run_id, 2)
    assert 0.7 <= waited < 2.5


async def test_a_run_leased_at_admit_during_a_pass_makes_another_pass(
    store: Stores, pools: list[RunnerPool]
) -> None:
    """A pass may have read the timers before the admit committed: it must not
    sleep past the new lease's expiry."""
    pool = started_pool(pools, store, lease=0.8)
    runner = pool.connect("runner-a", 2)
    await until_asleep(pool)
    passes = 0
    in_pass = asyncio.Event()
    finish_pass = asyncio.Event()
    real_pass = pool.loop.run_pass

    async def held_pass() -> float | None:
        nonlocal passes
        passes += 1
        if passes == 1:
            timer = await real_pass()  # the timers read before the admit below
            in_pass.set()
            await finish_pass.wait()
            return timer
        return await real_pass()

    pool.loop.run_pass = held_pass
    pool.wake()
    await in_pass.wait()
    run = a_pending_run()
    pool.reserve_slot(run.run_id)
    await store.runs.admit_run(run, "create", lease=Lease(runner.runner_id, pool.lease_seconds))
    pool.leased_at_admit()
    finish_pass.set()
    taken = await next_run_for(runner, seconds=5.0)
    assert (taken.run.run_id, taken.run.attempt) == (run.run_id, 2)
    assert passes >= 2
