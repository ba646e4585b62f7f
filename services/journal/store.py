"""Durable storage of run events (SQL)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Index,
    LargeBinary,
    MetaData,
    Select,
    String,
    Table,
    bindparam,
    delete,
    exists,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.elements import BindParameter

from common import codec
from common.sql import migrate

MIGRATIONS = Path(__file__).parent / "migrations"

# The hot inserts, in the drivers' own parameter styles. Postgres (asyncpg) takes
# the batch as one pipelined executemany; SQLite takes it as multi-row INSERTs,
# one statement step per chunk instead of one per row.
POSTGRES_EVENT_INSERT = (
    "INSERT INTO run_events (run_id, seq, event, data, created_at) "
    "VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING"
)
SQLITE_ROWS_PER_INSERT = 1000  # 5,000 parameters, well under SQLite's 32,766


SQLITE_TIME = "%Y-%m-%d %H:%M:%S.%f"  # how SQLAlchemy stores a DateTime on SQLite

metadata = MetaData()
run_events = Table(
    "run_events",
    metadata,
    Column("run_id", String(36), primary_key=True),
    Column("seq", BigInteger, primary_key=True),
    Column("event", String(255), nullable=False),
    Column("data", LargeBinary, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)
run_logs = Table(
    "run_logs",
    metadata,
    Column("run_id", String(36), primary_key=True),
    Column("epoch", BigInteger, nullable=False),
    Column("closed_at", DateTime(timezone=True)),
    Index("run_logs_closed_at", "closed_at"),
)
# Runs deleted with their thread: their log must not come back (a late Close or
# Append), and a subscriber must hear NOT_FOUND rather than wait forever.
forgotten_runs = Table(
    "forgotten_runs",
    metadata,
    Column("run_id", String(36), primary_key=True),
    Column("forgotten_at", DateTime(timezone=True), nullable=False),
)
# Runs whose events the retention sweep deleted: their stream answers that the
# events expired, rather than waiting for events that will never come.
expired_runs = Table(
    "expired_runs",
    metadata,
    Column("run_id", String(36), primary_key=True),
    Column("ended_at", DateTime(timezone=True), nullable=False),
    Column("expired_at", DateTime(timezone=True), nullable=False),
)

FORGOTTEN = "forgotten"  # deleted with its thread
EXPIRED = "expired"  # swept after the retention period


class StoredEvent(NamedTuple):
    """One numbered event of a run (a tuple: thousands are made per second)."""

    run_id: str
    seq: int
    event: str
    data: bytes


@dataclass
class StoredLog:
    epoch: int
    closed: bool
    events: list[StoredEvent]
    gone: str | None = None  # FORGOTTEN or EXPIRED: nothing is left but the tombstone

    @property
    def forgotten(self) -> bool:
        return self.gone is not None


@dataclass(frozen=True)
class LogHead:
    """What SQL knows of a run's log, without its events."""

    epoch: int
    closed: bool
    next_seq: int  # one past the highest stored sequence number


@dataclass(frozen=True)
class SqlPage:
    events: list[StoredEvent]
    closed: bool  # the log is complete and `events` reach its end
    gone: str | None = None


@functools.lru_cache(maxsize=64)
def sqlite_event_insert(rows: int) -> str:
    values = ", ".join(["(?, ?, ?, ?, ?)"] * rows)
    return (
        "INSERT INTO run_events (run_id, seq, event, data, created_at) "
        f"VALUES {values} ON CONFLICT DO NOTHING"
    )


async def insert_events_postgres(
    conn: AsyncConnection, events: list[StoredEvent], now: datetime
) -> None:
    if events:
        rows = [(e.run_id, e.seq, e.event, e.data, now) for e in events]
        await conn.exec_driver_sql(POSTGRES_EVENT_INSERT, rows)


async def insert_events_sqlite(
    conn: AsyncConnection, events: list[StoredEvent], now: datetime
) -> None:
    stamp = now.strftime(SQLITE_TIME)
    for start in range(0, len(events), SQLITE_ROWS_PER_INSERT):
        chunk = events[start : start + SQLITE_ROWS_PER_INSERT]
        values = tuple(v for e in chunk for v in (e.run_id, e.seq, e.event, e.data, stamp))
        await conn.exec_driver_sql(sqlite_event_insert(len(chunk)), values)


class JournalStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.is_postgres = engine.dialect.name == "postgresql"
        self.dialect_insert: Any = postgresql.insert if self.is_postgres else sqlite.insert

    async def migrate(self) -> None:
        await migrate(self.engine, MIGRATIONS, "journal")

    async def load(self, run_id: str) -> StoredLog | None:
        """Everything stored for a run, or None when the journal never saw it."""
        async with self.engine.connect() as conn:
            # Tombstones and head in one statement: a new run's log costs one read.
            state = (await conn.execute(LOG_STATE, {"run_id": run_id})).one()
            if state.forgotten or state.expired:
                gone = FORGOTTEN if state.forgotten else EXPIRED
                return StoredLog(epoch=0, closed=True, events=[], gone=gone)
            if state.epoch is None:
                return None
            rows = (
                await conn.execute(
                    select(run_events.c.seq, run_events.c.event, run_events.c.data)
                    .where(run_events.c.run_id == run_id)
                    .order_by(run_events.c.seq)
                )
            ).all()
        events = [StoredEvent(run_id, row.seq, row.event, bytes(row.data)) for row in rows]
        return StoredLog(epoch=state.epoch, closed=state.closed_at is not None, events=events)

    async def write(self, events: list[StoredEvent], opened: dict[str, int]) -> None:
        """Insert a batch; `opened` holds runs (with epoch) seen for the first time.

        Rows already there are left alone: another journal replica may have opened
        the same run's log (a takeover), and a retried batch may have committed."""
        now = codec.now_utc()
        async with self.engine.begin() as conn:
            if opened:
                await conn.execute(
                    self.dialect_insert(run_logs).on_conflict_do_nothing(),
                    [{"run_id": r, "epoch": e, "closed_at": None} for r, e in opened.items()],
                )
            # The hot insert goes to the driver as plain rows: SQLAlchemy's
            # per-row parameter processing cost more than the insert itself.
            if self.is_postgres:
                await insert_events_postgres(conn, events, now)
            else:
                await insert_events_sqlite(conn, events, now)

    async def mark_closed(self, run_id: str, epoch: int) -> bool:
        """Close the run's log (opening it first if no event was ever stored).
        False when it was closed already: its end time stays the first close's."""
        async with self.engine.begin() as conn:
            await conn.execute(
                self.dialect_insert(run_logs)
                .values(run_id=run_id, epoch=epoch, closed_at=None)
                .on_conflict_do_nothing()
            )
            closed = await conn.execute(
                update(run_logs)
                .where(run_logs.c.run_id == run_id, run_logs.c.closed_at.is_(None))
                .values(closed_at=codec.now_utc(), epoch=epoch)
            )
        return bool(closed.rowcount)

    async def forget(self, run_ids: list[str]) -> int:
        """Delete the runs' events and logs and remember them as forgotten.
        Returns how many of them had a log."""
        now = codec.now_utc()
        async with self.engine.begin() as conn:
            await conn.execute(delete(run_events).where(run_events.c.run_id.in_(run_ids)))
            logs = await conn.execute(
                delete(run_logs).where(run_logs.c.run_id.in_(run_ids)).returning(run_logs.c.run_id)
            )
            had_log = len(logs.all())
            known = select(forgotten_runs.c.run_id).where(forgotten_runs.c.run_id.in_(run_ids))
            already = set((await conn.execute(known)).scalars())
            fresh = [run_id for run_id in dict.fromkeys(run_ids) if run_id not in already]
            if fresh:
                await conn.execute(
                    insert(forgotten_runs),
                    [{"run_id": run_id, "forgotten_at": now} for run_id in fresh],
                )
        return had_log

    # ---- reads that do not load a whole log ----------------------------------------

    async def gone(self, run_id: str) -> str | None:
        """FORGOTTEN or EXPIRED when only the run's tombstone is left, else None."""
        async with self.engine.connect() as conn:
            return await _gone(conn, run_id)

    async def head(self, run_id: str) -> LogHead | None:
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(run_logs).where(run_logs.c.run_id == run_id))).first()
            if row is None:
                return None
            top = select(func.max(run_events.c.seq)).where(run_events.c.run_id == run_id)
            highest = (await conn.execute(top)).scalar()
        next_seq = -1 if highest is None else int(highest)
        return LogHead(epoch=row.epoch, closed=row.closed_at is not None, next_seq=next_seq + 1)

    async def is_closed(self, run_id: str) -> bool:
        async with self.engine.connect() as conn:
            query = select(run_logs.c.closed_at).where(run_logs.c.run_id == run_id)
            return (await conn.execute(query)).scalar() is not None

    async def page(self, run_id: str, from_seq: int, limit: int) -> SqlPage:
        """Up to `limit` events from `from_seq`, and whether they end a closed log."""
        async with self.engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(run_events.c.seq, run_events.c.event, run_events.c.data)
                    .where(run_events.c.run_id == run_id, run_events.c.seq >= from_seq)
                    .order_by(run_events.c.seq)
                    .limit(limit)
                )
            ).all()
            query = select(run_logs.c.closed_at).where(run_logs.c.run_id == run_id)
            head = (await conn.execute(query)).first()
            gone = await _gone(conn, run_id) if head is None else None
        events = [StoredEvent(run_id, row.seq, row.event, bytes(row.data)) for row in rows]
        closed = head is not None and head.closed_at is not None and len(events) < limit
        return SqlPage(events, closed=closed or gone is not None, gone=gone)

    async def stored_through(self, run_id: str, upto: int) -> int:
        """How many of the run's events numbered `upto` or below are stored."""
        async with self.engine.connect() as conn:
            query = select(func.count()).where(
                run_events.c.run_id == run_id, run_events.c.seq <= upto
            )
            return int((await conn.execute(query)).scalar() or 0)

    # ---- retention -------------------------------------------------------------------

    async def expire(self, ended_before: datetime, limit: int) -> list[str]:
        """Delete the events and logs of up to `limit` runs that ended before
        `ended_before`, leaving an EXPIRED tombstone; returns their ids. Replicas may
        sweep at once: a log deleted by another is simply not returned here."""
        now = codec.now_utc()
        async with self.engine.begin() as conn:
            due = (
                select(run_logs.c.run_id)
                .where(run_logs.c.closed_at.is_not(None), run_logs.c.closed_at < ended_before)
                .order_by(run_logs.c.closed_at)
                .limit(limit)
            )
            run_ids = list((await conn.execute(due)).scalars())
            if not run_ids:
                return []
            deleted = await conn.execute(
                delete(run_logs)
                .where(run_logs.c.run_id.in_(run_ids))
                .returning(run_logs.c.run_id, run_logs.c.closed_at)
            )
            ended = {row.run_id: row.closed_at for row in deleted.all()}
            if not ended:
                return []
            await conn.execute(delete(run_events).where(run_events.c.run_id.in_(list(ended))))
            await conn.execute(
                self.dialect_insert(expired_runs).on_conflict_do_nothing(),
                [{"run_id": r, "ended_at": at, "expired_at": now} for r, at in ended.items()],
            )
        return list(ended)


def _log_state() -> Select[Any]:
    """One row: whether the run has a tombstone of either kind, and its log's head
    (epoch None: no head stored)."""
    run_id: BindParameter[str] = bindparam("run_id", type_=String)
    head = run_logs.c.run_id == run_id
    return select(
        exists().where(forgotten_runs.c.run_id == run_id).label("forgotten"),
        exists().where(expired_runs.c.run_id == run_id).label("expired"),
        select(run_logs.c.epoch).where(head).scalar_subquery().label("epoch"),
        select(run_logs.c.closed_at).where(head).scalar_subquery().label("closed_at"),
    )


# Built once, by `run_id`: building it cost as much as running it.
LOG_STATE = _log_state()


async def _gone(conn: AsyncConnection, run_id: str) -> str | None:
    forgotten = select(forgotten_runs.c.run_id).where(forgotten_runs.c.run_id == run_id)
    if (await conn.execute(forgotten)).first() is not None:
        return FORGOTTEN
    expired = select(expired_runs.c.run_id).where(expired_runs.c.run_id == run_id)
    if (await conn.execute(expired)).first() is not None:
        return EXPIRED
    return None
