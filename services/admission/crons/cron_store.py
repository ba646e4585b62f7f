"""Persistence of crons and their firings.

A due firing is claimed with a conditional update of the cron's `next_run_at`
(`WHERE next_run_at = <the due time>`), and the firing's record is inserted in
the same transaction under the key (cron_id, due_at): whatever the number of
admission replicas, one of them wins each due time and the others match no row.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_, delete, func, insert, select, update
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from waybill.common import codec
from waybill.common.errors import not_found
from waybill.common.statuses import ACTIVE_RUN_STATUSES
from waybill.services.admission.auth_filters import matches
from waybill.services.admission.crons.crons import CronRecord, FiringOutcome, ThreadCleanup
from waybill.services.admission.json_filters import contains
from waybill.services.admission.tables import cron_firings, crons, runs
from waybill.services.admission.wakeups import crons_payload, notify

SORT_COLUMNS = {
    "cron_id": crons.c.cron_id,
    "assistant_id": crons.c.assistant_id,
    "thread_id": crons.c.thread_id,
    "created_at": crons.c.created_at,
    "updated_at": crons.c.updated_at,
    "next_run_date": crons.c.next_run_at,
    "end_time": crons.c.end_time,
}


@dataclass
class CronQuery:
    assistant_id: str = ""
    thread_id: str = ""
    enabled: bool | None = None
    metadata: dict[str, Any] | None = None
    sort_by: str = "created_at"
    sort_order: str = "desc"


def _utc(moment: datetime | None) -> datetime | None:
    """SQLite gives times back without their zone; every stored time is UTC."""
    return None if moment is None else codec.aware_utc(moment)


def _cron(row: Row[Any]) -> CronRecord:
    return CronRecord(
        cron_id=row.cron_id,
        assistant_id=row.assistant_id,
        thread_id=row.thread_id,
        owner_id=row.owner_id,
        schedule=row.schedule,
        time_zone=row.timezone,
        end_time=_utc(row.end_time),
        enabled=row.enabled,
        on_run_completed=row.on_run_completed,
        kwargs=row.kwargs or {},
        metadata=row.metadata or {},
        multitask_strategy=row.multitask_strategy,
        next_run_at=_utc(row.next_run_at),
        created_at=_utc(row.created_at) or row.created_at,
        updated_at=_utc(row.updated_at) or row.updated_at,
        owner_role=row.owner_role,
        owner_scopes=[s for s in row.owner_scopes.split(",") if s],
        owner_user=row.owner_user,  # NULL: a Waybill principal's, or a cron from before 0012
        auth_filters=row.auth_filters or {},
        last_run_id=row.last_run_id,
    )


def _values(record: CronRecord) -> dict[str, Any]:
    return {
        "cron_id": record.cron_id,
        "assistant_id": record.assistant_id,
        "thread_id": record.thread_id,
        "owner_id": record.owner_id,
        "owner_role": record.owner_role,
        "owner_scopes": ",".join(sorted(record.owner_scopes)),
        "owner_user": record.owner_user,
        "auth_filters": record.auth_filters or None,
        "schedule": record.schedule,
        "timezone": record.time_zone,
        "end_time": record.end_time,
        "enabled": record.enabled,
        "on_run_completed": record.on_run_completed,
        "kwargs": record.kwargs,
        "metadata": record.metadata,
        "multitask_strategy": record.multitask_strategy,
        "next_run_at": record.next_run_at,
        "last_run_id": record.last_run_id,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
    }


# The project's auth filter on crons' metadata; None: no filter.
Filter = dict[str, Any] | None


def _owned_by(owner: str | None) -> list[Any]:
    return [] if owner is None else [crons.c.owner_id == owner]


class CronStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.is_postgres = engine.dialect.name == "postgresql"

    async def insert(self, record: CronRecord) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(insert(crons).values(**_values(record)))
            await notify(conn, crons_payload())  # every replica's scheduler re-reads its next due

    def _visible(self, owner: str | None, auth: Filter) -> list[Any]:
        """Confined to `owner`'s crons, and to those the project's auth filter passes."""
        return [*_owned_by(owner), matches(crons.c.metadata, auth, self.is_postgres)]

    async def get(self, cron_id: str, owner: str | None = None, auth: Filter = None) -> CronRecord:
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(crons).where(crons.c.cron_id == cron_id, *self._visible(owner, auth))
                )
            ).first()
        if row is None:
            raise not_found(f"Cron {cron_id} not found.")
        return _cron(row)

    async def replace(
        self,
        record: CronRecord,
        owner: str | None = None,
        rescheduled: bool = False,
        auth: Filter = None,
    ) -> None:
        """Write a changed cron. Its next firing is written only when the change
        moved it: the scheduler may have moved it on meanwhile, and putting an
        older due time back would owe a firing twice."""
        values = _values(record)
        del values["last_run_id"]  # the scheduler's to write
        if not rescheduled:
            del values["next_run_at"]
        async with self.engine.begin() as conn:
            result = await conn.execute(
                update(crons)
                .where(crons.c.cron_id == record.cron_id, *self._visible(owner, auth))
                .values(**values)
            )
            if not result.rowcount:
                raise not_found(f"Cron {record.cron_id} not found.")
            await notify(conn, crons_payload())

    async def delete(self, cron_id: str, owner: str | None = None, auth: Filter = None) -> None:
        async with self.engine.begin() as conn:
            result = await conn.execute(
                delete(crons).where(crons.c.cron_id == cron_id, *self._visible(owner, auth))
            )
            if not result.rowcount:
                raise not_found(f"Cron {cron_id} not found.")

    def _filters(self, query: CronQuery, owner: str | None, auth: Filter) -> list[Any]:
        clauses: list[Any] = self._visible(owner, auth)
        if query.assistant_id:
            clauses.append(crons.c.assistant_id == query.assistant_id)
        if query.thread_id:
            clauses.append(crons.c.thread_id == query.thread_id)
        if query.enabled is not None:
            clauses.append(crons.c.enabled.is_(query.enabled))
        if query.metadata:
            clauses.append(contains(crons.c.metadata, query.metadata, self.is_postgres))
        return clauses

    async def search(
        self,
        query: CronQuery,
        limit: int,
        offset: int,
        owner: str | None = None,
        auth: Filter = None,
    ) -> list[CronRecord]:
        column = SORT_COLUMNS[query.sort_by]
        order = column.asc() if query.sort_order == "asc" else column.desc()
        statement = (
            select(crons)
            .where(*self._filters(query, owner, auth))
            .order_by(order, crons.c.cron_id)
            .limit(limit)
            .offset(offset)
        )
        async with self.engine.connect() as conn:
            return [_cron(row) for row in (await conn.execute(statement)).all()]

    async def count(self, query: CronQuery, owner: str | None = None, auth: Filter = None) -> int:
        statement = (
            select(func.count()).select_from(crons).where(*self._filters(query, owner, auth))
        )
        async with self.engine.connect() as conn:
            return int((await conn.execute(statement)).scalar_one())

    # ---- the scheduler's side ---------------------------------------------------

    async def next_due(self) -> datetime | None:
        """The earliest due time of any enabled cron, if one will fire."""
        statement = select(func.min(crons.c.next_run_at)).where(
            crons.c.enabled.is_(True), crons.c.next_run_at.is_not(None)
        )
        async with self.engine.connect() as conn:
            return _utc((await conn.execute(statement)).scalar())

    async def due(self, now: datetime, limit: int = 100) -> list[CronRecord]:
        statement = (
            select(crons)
            .where(crons.c.enabled.is_(True), crons.c.next_run_at <= now)
            .order_by(crons.c.next_run_at)
            .limit(limit)
        )
        async with self.engine.connect() as conn:
            return [_cron(row) for row in (await conn.execute(statement)).all()]

    async def claim(
        self, cron: CronRecord, seen_due: datetime, fire_at: datetime | None, next_at: Any
    ) -> bool | None:
        """Move the cron from the due time it was read with to `next_at` and,
        when `fire_at` is given, record that firing as claimed, in one
        transaction. True: fire it. None: moved on, nothing to fire (or that
        due time was fired already). False: another replica moved it first."""
        async with self.engine.begin() as conn:
            moved = await conn.execute(
                update(crons)
                .where(crons.c.cron_id == cron.cron_id, crons.c.next_run_at == seen_due)
                .values(next_run_at=next_at)
            )
            if not moved.rowcount:
                return False
            # The update holds the cron's row: no other replica is between these lines.
            if fire_at is None or await self._fired(conn, cron.cron_id, fire_at):
                return None
            await conn.execute(
                insert(cron_firings).values(
                    cron_id=cron.cron_id,
                    due_at=fire_at,
                    fired_at=codec.now_utc(),
                    outcome=FiringOutcome.CLAIMED,
                    run_id=None,
                    thread_id=cron.thread_id,
                    detail="",
                    thread_cleanup=None,
                )
            )
        return True

    async def _fired(self, conn: AsyncConnection, cron_id: str, due_at: datetime) -> bool:
        found = await conn.execute(
            select(cron_firings.c.cron_id).where(
                cron_firings.c.cron_id == cron_id, cron_firings.c.due_at == due_at
            )
        )
        return found.first() is not None

    async def abandoned_firings(
        self, claimed_before: datetime, limit: int = 50
    ) -> list[tuple[CronRecord, datetime]]:
        """Firings still `claimed` since before `claimed_before`, with their cron."""
        statement = (
            select(crons, cron_firings.c.due_at.label("firing_due_at"))
            .join(cron_firings, cron_firings.c.cron_id == crons.c.cron_id)
            .where(
                cron_firings.c.outcome == FiringOutcome.CLAIMED,
                cron_firings.c.fired_at < claimed_before,
            )
            .order_by(cron_firings.c.due_at)
            .limit(limit)
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(statement)).all()
        return [(_cron(row), _utc(row.firing_due_at) or row.firing_due_at) for row in rows]

    async def record_outcome(
        self,
        cron_id: str,
        due_at: datetime,
        outcome: FiringOutcome,
        detail: str = "",
        run_id: str | None = None,
        thread_id: str | None = None,
        cleanup: ThreadCleanup | None = None,
    ) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                update(cron_firings)
                .where(cron_firings.c.cron_id == cron_id, cron_firings.c.due_at == due_at)
                .values(
                    outcome=outcome,
                    detail=detail,
                    run_id=run_id,
                    thread_id=thread_id,
                    thread_cleanup=cleanup,
                )
            )
            if run_id is not None:
                await conn.execute(
                    update(crons).where(crons.c.cron_id == cron_id).values(last_run_id=run_id)
                )

    async def run_is_active(self, run_id: str | None) -> bool:
        if run_id is None:
            return False
        async with self.engine.connect() as conn:
            status = (
                await conn.execute(select(runs.c.status).where(runs.c.run_id == run_id))
            ).scalar()
        return status in ACTIVE_RUN_STATUSES

    async def ended_threads_to_delete(self, limit: int = 50) -> list[tuple[str, str, datetime]]:
        """(cron_id, thread_id, due_at) of fresh threads whose run has ended and
        whose cron said on_run_completed=delete."""
        statement = (
            select(cron_firings.c.cron_id, cron_firings.c.thread_id, cron_firings.c.due_at)
            .join(runs, runs.c.run_id == cron_firings.c.run_id, isouter=True)
            .where(
                cron_firings.c.thread_cleanup == ThreadCleanup.PENDING,
                and_(runs.c.status.is_(None) | runs.c.status.not_in(ACTIVE_RUN_STATUSES)),
            )
            .limit(limit)
        )
        async with self.engine.connect() as conn:
            return [(r.cron_id, r.thread_id, r.due_at) for r in (await conn.execute(statement))]

    async def thread_cleaned(self, cron_id: str, due_at: datetime) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                update(cron_firings)
                .where(cron_firings.c.cron_id == cron_id, cron_firings.c.due_at == due_at)
                .values(thread_cleanup=ThreadCleanup.DONE)
            )
