"""The scheduler: every admission replica runs one; each due firing happens once.

It sleeps until the earliest `next_run_at` (never longer than
`cron_max_sleep_seconds`), and is woken early when a cron is created or changed,
here or, through LISTEN/NOTIFY, on another replica. Awake, it claims each due
cron with a conditional update of `next_run_at` (see cron_store.py): among any
number of replicas exactly one wins a due time, records the firing, and starts
the run through StartRun's own path, as the cron's owner: a user of the
project's own auth is that user again (`langgraph_auth_user`), under the filters
its `@auth.on` handlers returned when it made the cron.

Firings missed while no replica ran (downtime), i.e. found later than
`cron_misfire_grace_seconds`, follow `cron_missed_firings`:

| policy     | what fires after downtime                                   |
|------------|-------------------------------------------------------------|
| `skip`     | nothing that was missed; the schedule resumes at its next due time |
| `catch_up` | every missed due time, oldest first, each its own run        |

A firing's outcome: `started` (with its run), `skipped` (the thread, or the
previous firing's run, is still busy and the cron's multitask strategy is
`reject`), or `error` (the run was refused, e.g. its thread was deleted).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import grpc

from waybill.common import codec
from waybill.common.background import BackgroundLoop
from waybill.common.errors import ServiceError
from waybill.common.identity import Principal
from waybill.common.statuses import MultitaskStrategy
from waybill.services.admission.crons.cron_store import CronStore
from waybill.services.admission.crons.crons import CronRecord, FiringOutcome, ThreadCleanup
from waybill.services.admission.crons.schedule_clock import SystemClock
from waybill.services.admission.rows import RunRow
from waybill.v1 import admission_pb2

log = logging.getLogger("waybill.admission.scheduler")

MISSED_POLICIES = ("skip", "catch_up")

# A firing StartRun refused: busy (reject) is skipped, over a quota is refused
# (never lost silently: recorded, and the next due time fires anew), else error.
FIRING_REFUSALS = {
    grpc.StatusCode.ABORTED: FiringOutcome.SKIPPED,
    grpc.StatusCode.RESOURCE_EXHAUSTED: FiringOutcome.REFUSED,
}

# StartRun's path: the request, who it acts for, the project's auth filters it holds to.
StartRun = Callable[
    [admission_pb2.StartRunRequest, Principal, dict[str, dict[str, Any]]], Awaitable[RunRow]
]
RemoveThread = Callable[[str], Awaitable[None]]


@dataclass
class Step:
    """What one claim of a due cron does: fire at `fire_at` (or nothing), and
    move the cron to `next_at` (None: it will not fire again)."""

    fire_at: datetime | None
    next_at: datetime | None
    missed: int = 0


def next_step(cron: CronRecord, now: datetime, grace: timedelta, policy: str) -> Step:
    due = cron.next_run_at
    assert due is not None
    timing = cron.timing
    if policy == "catch_up" or now - due <= grace:
        return Step(fire_at=due, next_at=timing.next_after(due))
    # Late past the grace: skip to the newest due time, which fires if still in grace.
    latest, following, missed = due, timing.next_after(due), 0
    while following is not None and following <= now:
        latest, following, missed = following, timing.next_after(following), missed + 1
    if now - latest <= grace:
        return Step(fire_at=latest, next_at=following, missed=missed)
    return Step(fire_at=None, next_at=following, missed=missed + 1)


class Scheduler:
    def __init__(
        self,
        store: CronStore,
        start_run: StartRun,
        remove_thread: RemoveThread,
        clock: SystemClock,
        *,
        max_sleep: float,
        grace_seconds: float,
        missed_policy: str,
        reclaim_seconds: float,
    ) -> None:
        if missed_policy not in MISSED_POLICIES:
            raise ValueError(
                f"WAYBILL_CRON_MISSED_FIRINGS must be one of {', '.join(MISSED_POLICIES)}"
            )
        self.store = store
        self.start_run = start_run
        self.remove_thread = remove_thread
        self.clock = clock
        self.max_sleep = max_sleep
        self.grace = timedelta(seconds=grace_seconds)
        self.policy = missed_policy
        self.reclaim = timedelta(seconds=reclaim_seconds)
        # A failed tick is tried again after the longest sleep.
        self.loop = BackgroundLoop(
            "cron-scheduler", self.tick_pass, log=log, retry_seconds=max_sleep, max_sleep=max_sleep
        )

    def start(self) -> None:
        self.loop.start()

    async def stop(self) -> None:
        await self.loop.stop()

    def wake(self) -> None:
        self.loop.wake()

    async def tick_pass(self) -> float | None:
        """One tick; then the seconds until the next cron is due."""
        await self.tick()
        return self.clock.seconds_until(await self.store.next_due())

    async def tick(self) -> None:
        now = self.clock.now()
        for cron in await self.store.due(now):
            await self._advance(cron, now)
        await self._fire_abandoned()
        await self._remove_ended_threads()

    async def _fire_abandoned(self) -> None:
        """Firings claimed but never recorded (their replica died between the
        two) are fired again; their idempotency key makes that start one run."""
        before = codec.now_utc() - self.reclaim
        for cron, due_at in await self.store.abandoned_firings(before):
            log.warning("cron %s: firing due %s was abandoned; firing it", cron.cron_id, due_at)
            await self._fire(cron, due_at)

    async def _advance(self, cron: CronRecord, now: datetime) -> None:
        """Claim and fire each due time of `cron` up to `now`, as the policy says."""
        while cron.next_run_at is not None and cron.next_run_at <= now:
            step = next_step(cron, now, self.grace, self.policy)
            claimed = await self.store.claim(cron, cron.next_run_at, step.fire_at, step.next_at)
            if claimed is False:
                return  # another replica claimed this due time
            if step.missed:
                log.info("cron %s: skipped %d missed firing(s)", cron.cron_id, step.missed)
            if claimed and step.fire_at is not None:
                await self._fire(cron, step.fire_at)
            cron.next_run_at = step.next_at

    async def _fire(self, cron: CronRecord, due_at: datetime) -> None:
        fresh = cron.thread_id is None
        overlapping = fresh and cron.multitask_strategy == MultitaskStrategy.REJECT
        if overlapping and await self.store.run_is_active(cron.last_run_id):
            await self.store.record_outcome(
                cron.cron_id,
                due_at,
                FiringOutcome.SKIPPED,
                f"the previous firing's run {cron.last_run_id} is still active "
                "(multitask_strategy=reject)",
            )
            return
        due = codec.iso(due_at)
        request = admission_pb2.StartRunRequest(
            # A firing's request is the same each time it is made (a fresh thread's
            # id too), and keyed: a firing started again after its replica died
            # mid-way gets the run it may have started already, never a second one.
            thread_id=cron.thread_id or str(uuid.uuid5(uuid.UUID(cron.cron_id), due)),
            idempotency_key=f"cron:{cron.cron_id}:{due}",
            assistant_id=cron.assistant_id,
            kwargs_json=codec.dumps(cron.kwargs),
            metadata_json=codec.dumps(
                {**cron.metadata, "cron_id": cron.cron_id, "cron_due_at": due}
            ),
            multitask_strategy=codec.MULTITASK_VALUES[cron.multitask_strategy],
            if_not_exists="create" if fresh else "reject",
        )
        try:
            # As its creator: a project's user with the filters its handlers gave it.
            run = await self.start_run(request, cron.acting_principal(), cron.auth_filters)
        except ServiceError as error:
            outcome = FIRING_REFUSALS.get(error.code, FiringOutcome.ERROR)
            await self.store.record_outcome(cron.cron_id, due_at, outcome, error.message)
            return
        except Exception as error:
            log.exception("cron %s: firing due %s failed", cron.cron_id, due_at)
            await self.store.record_outcome(cron.cron_id, due_at, FiringOutcome.ERROR, repr(error))
            return
        log.info("cron %s: fired its %s firing as run %s", cron.cron_id, due_at, run.run_id)
        cleanup = ThreadCleanup.PENDING if fresh and cron.on_run_completed == "delete" else None
        await self.store.record_outcome(
            cron.cron_id, due_at, FiringOutcome.STARTED, "", run.run_id, run.thread_id, cleanup
        )
        cron.last_run_id = run.run_id

    async def _remove_ended_threads(self) -> None:
        """on_run_completed=delete: a fresh thread goes once its run has ended."""
        for cron_id, thread_id, due_at in await self.store.ended_threads_to_delete():
            try:
                await self.remove_thread(thread_id)
            except Exception:
                log.exception("cron %s: could not delete thread %s", cron_id, thread_id)
                continue
            await self.store.thread_cleaned(cron_id, due_at)
