"""The statements a run's lease is moved by, built once with bind parameters: the
dispatcher runs them after every run's end, and building one (and its cache key)
cost more than running it. `leases.py` runs them."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select, and_, bindparam, exists, func, or_, select, update

from waybill.common.statuses import ACTIVE_RUN_STATUSES, RunStatus
from waybill.services.admission.tables import runs, threads

PENDING, RUNNING = RunStatus.PENDING, RunStatus.RUNNING

# A run's end, built once (it is on the way to its stream's end): what the end
# reads of the run, and its conditional terminal write.
RUN_TO_END: Select[Any] = select(
    runs.c.run_id, runs.c.thread_id, runs.c.owner_id, runs.c.epoch, runs.c.status
).where(runs.c.run_id == bindparam("ending_run_id"))
RUN_END = update(runs).where(
    runs.c.run_id == bindparam("ending_run_id"),
    runs.c.epoch == bindparam("ending_epoch"),
    runs.c.status.in_(bindparam("ending_sources", expanding=True)),
)


def _claimable() -> Select[Any]:
    """Pending runs that are due and whose thread is free (or that are cancelled:
    they only need finalizing), and running runs whose lease expired (takeover),
    oldest first, as of `claim_now`. A delayed run (`after_seconds`) is due at its
    created_at."""
    now = bindparam("claim_now", type_=runs.c.created_at.type)
    other = runs.alias("other")
    # Busy: another active run of the thread is held by a runner (claimed,
    # running, or waiting for takeover).
    thread_busy = exists().where(
        and_(
            other.c.thread_id == runs.c.thread_id,
            other.c.run_id != runs.c.run_id,
            other.c.status.in_(ACTIVE_RUN_STATUSES),
            other.c.lease_owner.is_not(None),
        )
    )
    return (
        select(runs)
        .where(
            or_(
                and_(
                    runs.c.status == PENDING,
                    or_(
                        runs.c.cancel_action.is_not(None),
                        and_(~thread_busy, runs.c.created_at <= now),
                    ),
                    or_(runs.c.lease_expires_at.is_(None), runs.c.lease_expires_at < now),
                ),
                and_(runs.c.status == RUNNING, runs.c.lease_expires_at < now),
            )
        )
        .order_by(runs.c.created_at)
        .limit(1)
    )


def _timers() -> Select[Any]:
    """One row: the next lease expiry, and the next delayed run (`after_seconds`)
    becoming due after `timers_now`."""
    lease_expiry = select(func.min(runs.c.lease_expires_at)).where(
        runs.c.status.in_(ACTIVE_RUN_STATUSES), runs.c.lease_owner.is_not(None)
    )
    delayed_start = select(func.min(runs.c.created_at)).where(
        runs.c.status == PENDING,
        runs.c.cancel_action.is_(None),
        runs.c.created_at > bindparam("timers_now", type_=runs.c.created_at.type),
    )
    return select(lease_expiry.scalar_subquery(), delayed_start.scalar_subquery())


# The dispatcher's claim: the next claimable run, read unlocked.
CLAIMABLE = _claimable()
# The candidate again, by `claim_run_id`, if it still qualifies, locked (Postgres:
# its thread is locked first, see lock_order.py).
CLAIMABLE_LOCKED = CLAIMABLE.where(runs.c.run_id == bindparam("claim_run_id")).with_for_update(
    of=runs
)
# The claim's conditional write: a new epoch and attempt counted here; the status,
# the lease (`lease_owner`, `lease_expires_at`) and `updated_at` given at execution.
CLAIM = (
    update(runs)
    .where(
        runs.c.run_id == bindparam("claim_run_id"),
        runs.c.epoch == bindparam("claim_epoch"),
        runs.c.status.in_(bindparam("claim_sources", expanding=True)),
    )
    .values(epoch=runs.c.epoch + 1, attempt=runs.c.attempt + 1)
    .returning(*runs.c)
)
# The claimed run's thread marked busy (`status`, `updated_at` given at execution).
THREAD_BUSY = update(threads).where(threads.c.thread_id == bindparam("busy_thread_id"))
TIMERS = _timers()
