"""The order admission's transactions take row locks in, on Postgres.

Three rules, so that no two transactions ever wait on each other in a cycle
(Postgres breaks such a cycle by failing one of them: `deadlock detected`):

- an admit of runs whose owner has quotas locks the owners' `quota_principals`
  rows first, in their ids' order, before any thread (services/admission/runs/quotas.py);
  nothing else locks those rows;
- a transaction that writes a thread and one of its runs locks the thread
  first (an admit, a claim, a run's start barrier and its end all do);
- a transaction that writes several runs locks them in `RUN_LOCK_ORDER`,
  in one statement, before it writes any (a cancel of many, a lease renewal,
  the cancel of a thread's active runs by a new run's multitask strategy).

SQLite has no row locks (its writers take turns), so nothing here applies to it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select, select
from sqlalchemy.ext.asyncio import AsyncConnection

from waybill.services.admission.tables import runs, threads

# Runs are locked oldest first; the id breaks ties between runs created together.
RUN_LOCK_ORDER = (runs.c.created_at, runs.c.run_id)


async def lock_thread_of_run(conn: AsyncConnection, run_id: str) -> None:
    """Lock the thread of `run_id` (Postgres), before anything of the run is locked."""
    if conn.dialect.name != "postgresql":
        return
    thread_of_run = select(runs.c.thread_id).where(runs.c.run_id == run_id).scalar_subquery()
    await conn.execute(
        select(threads.c.thread_id).where(threads.c.thread_id == thread_of_run).with_for_update()
    )


def locking_runs_in_order(query: Select[Any], is_postgres: bool) -> Select[Any]:
    """`query` (of runs) returning its rows in `RUN_LOCK_ORDER`, locked as they
    are returned on Postgres (the lock is taken after the sort)."""
    ordered = query.order_by(*RUN_LOCK_ORDER)
    return ordered.with_for_update(of=runs) if is_postgres else ordered
