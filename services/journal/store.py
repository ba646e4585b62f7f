"""Durable storage of run events (SQL).

A run's events are stored as batches: each row of `run_event_batches` holds
consecutive events `first_seq`..`last_seq` of one run, packed as a `StoredBatch`
and zlib-compressed. A streaming run's frames repeat most of their bytes (every
token carries the same metadata), so a 2,000-token run is 4-6 rows and about
23 KB instead of 2,000 rows and 1.8 MB: SQLite writes, and checkpoints its WAL
into the database, a seventieth of the bytes, which was most of the journal's
SQL time. Rows may overlap (events copied from Redis after a replica died, at
other boundaries than its own writes), so readers keep the first copy of each
number.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

from sqlalchemy import (
    Select,
    String,
    bindparam,
    delete,
    exists,
    func,
    insert,
    select,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.elements import BindParameter

from waybill.common import codec
from waybill.common.sql import migrate
from waybill.services.journal.tables import (
    expired_runs,
    forgotten_runs,
    journal_replicas,
    run_event_batches,
    run_logs,
)
from waybill.v1 import journal_pb2

MIGRATIONS = Path(__file__).parent / "migrations"

# The hot insert, in the drivers' own parameter styles (a few rows per write).
# A row already there is a retried write that committed: left alone.
POSTGRES_BATCH_INSERT = (
    "INSERT INTO run_event_batches (run_id, first_seq, last_seq, frames, created_at) "
    "VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING"
)
SQLITE_BATCH_INSERT = (
    "INSERT INTO run_event_batches (run_id, first_seq, last_seq, frames, created_at) "
    "VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
)
SQLITE_TIME = "%Y-%m-%d %H:%M:%S.%f"  # how SQLAlchemy stores a DateTime on SQLite
# zlib's fastest level: a write's token frames still shrink ~75x, at ~1.5 µs a frame.
COMPRESSION_LEVEL = 1
# Rows a replay reads at once (only as many are unpacked as its page needs): a
# trickle of one event per row still pages well, a burst of 512 per row costs no more.
ROWS_PER_READ = 64

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


class Fenced(Exception):
    """This replica was declared dead by another (see replicas.py): it may store nothing
    it numbered before, since the run's numbering may have gone on without it."""


class BatchRow(NamedTuple):
    """One row of `run_event_batches`: events `first_seq`..`last_seq` of a run."""

    run_id: str
    first_seq: int
    last_seq: int
    frames: bytes


def pack(events: Sequence[StoredEvent]) -> bytes:
    """Consecutive events of one run -> a row's `frames`."""
    batch = journal_pb2.StoredBatch()
    add = batch.events.add
    for event in events:
        add(seq=event.seq, event=event.event, data=event.data)
    return zlib.compress(batch.SerializeToString(), COMPRESSION_LEVEL)


def unpack(run_id: str, frames: bytes) -> list[StoredEvent]:
    batch = journal_pb2.StoredBatch.FromString(zlib.decompress(frames))
    return [StoredEvent(run_id, e.seq, e.event, e.data) for e in batch.events]


def batch_rows(events: Iterable[StoredEvent]) -> list[BatchRow]:
    """Events (of any runs, each run's in order) -> one row per unbroken stretch of
    a run's numbers."""
    stretches: dict[str, list[list[StoredEvent]]] = {}
    for event in events:
        runs = stretches.setdefault(event.run_id, [])
        if runs and runs[-1][-1].seq + 1 == event.seq:
            runs[-1].append(event)
        else:
            runs.append([event])
    return [
        BatchRow(run_id, stretch[0].seq, stretch[-1].seq, pack(stretch))
        for run_id, runs in stretches.items()
        for stretch in runs
    ]


def events_of(
    run_id: str, rows: Iterable[Any], from_seq: int = 0, limit: int | None = None
) -> tuple[list[StoredEvent], bool]:
    """Up to `limit` unbroken events from `from_seq`, in rows read in (`first_seq`,
    `last_seq`) order, a number stored twice (overlapping rows) kept once; and
    whether they reach the rows' end (False: they stopped at a hole, numbers not
    stored yet, or at `limit`). Rows past what is needed are not unpacked."""
    events: list[StoredEvent] = []
    next_seq = from_seq
    complete = True
    for row in rows:
        if row.last_seq < next_seq:
            continue  # all of it given already
        if row.first_seq > next_seq or (limit is not None and len(events) >= limit):
            complete = False
            break
        for event in unpack(run_id, bytes(row.frames)):
            if event.seq >= next_seq:
                events.append(event)
                next_seq = event.seq + 1
    if limit is not None and len(events) > limit:
        return events[:limit], False
    return events, complete


def covered(stretches: Iterable[tuple[int, int]], upto: int) -> int:
    """How many numbers 0..`upto` the (first, last) stretches cover, overlaps counted once."""
    count = 0
    next_seq = 0  # the lowest number not yet counted
    for first, last in sorted(stretches):
        first, last = max(first, next_seq), min(last, upto)
        if last >= first:
            count += last - first + 1
            next_seq = last + 1
    return count


async def insert_rows(
    conn: AsyncConnection, rows: list[BatchRow], now: datetime, postgres: bool
) -> None:
    if postgres:
        await conn.exec_driver_sql(POSTGRES_BATCH_INSERT, [(*row, now) for row in rows])
    else:
        stamp = now.strftime(SQLITE_TIME)
        await conn.exec_driver_sql(SQLITE_BATCH_INSERT, [(*row, stamp) for row in rows])


class JournalStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.is_postgres = engine.dialect.name == "postgresql"
        self.dialect_insert: Any = postgresql.insert if self.is_postgres else sqlite.insert
        # Built once (a run's every write opens its log; its end closes it), their
        # values given at execution.
        self.open_logs = self.dialect_insert(run_logs).on_conflict_do_nothing()
        self.close_log = (
            self.dialect_insert(run_logs)
            .values(
                run_id=bindparam("closed_run_id"),
                epoch=bindparam("closed_epoch"),
                closed_at=bindparam("closed_at_now"),
            )
            .on_conflict_do_update(
                index_elements=[run_logs.c.run_id],
                set_={"closed_at": bindparam("closed_at_now"), "epoch": bindparam("closed_epoch")},
                where=run_logs.c.closed_at.is_(None),
            )
        )

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
            rows = (await conn.execute(ROWS.where(run_event_batches.c.run_id == run_id))).all()
        events, _complete = events_of(run_id, rows)
        return StoredLog(epoch=state.epoch, closed=state.closed_at is not None, events=events)

    async def write(
        self, events: list[StoredEvent], opened: dict[str, int], fence: str | None = None
    ) -> None:
        """Insert events (each run's in order) as batch rows; `opened` holds runs
        (with epoch) seen for the first time.

        Rows already there are left alone: another journal replica may have opened
        the same run's log (a takeover), and a retried batch may have committed.
        With `fence` (this replica's id), the write is refused (`Fenced`) once the
        replica is no longer a member: the row is read under a share lock, so an
        eviction waits for a write under way, or the write sees the eviction."""
        now = codec.now_utc()
        rows = batch_rows(events)  # packed before the transaction: it holds SQLite's lock
        async with self.engine.begin() as conn:
            if fence is not None:
                member = (
                    select(journal_replicas.c.replica_id)
                    .where(journal_replicas.c.replica_id == fence)
                    .with_for_update(read=True)
                )
                if (await conn.execute(member)).first() is None:
                    raise Fenced(fence)
            if opened:
                await conn.execute(
                    self.open_logs,
                    [{"run_id": r, "epoch": e, "closed_at": None} for r, e in opened.items()],
                )
            if rows:
                await insert_rows(conn, rows, now, self.is_postgres)

    async def mark_closed(self, run_id: str, epoch: int) -> bool:
        """Close the run's log (opening it first if no event was ever stored).
        False when it was closed already: its end time stays the first close's."""
        close = {"closed_run_id": run_id, "closed_epoch": epoch, "closed_at_now": codec.now_utc()}
        async with self.engine.begin() as conn:
            closed = await conn.execute(self.close_log, close)  # opened and closed, or closed
        return bool(closed.rowcount)

    async def forget(self, run_ids: list[str]) -> int:
        """Delete the runs' events and logs and remember them as forgotten.
        Returns how many of them had a log."""
        now = codec.now_utc()
        async with self.engine.begin() as conn:
            await conn.execute(
                delete(run_event_batches).where(run_event_batches.c.run_id.in_(run_ids))
            )
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
            top = select(func.max(run_event_batches.c.last_seq)).where(
                run_event_batches.c.run_id == run_id
            )
            highest = (await conn.execute(top)).scalar()
        next_seq = -1 if highest is None else int(highest)
        return LogHead(epoch=row.epoch, closed=row.closed_at is not None, next_seq=next_seq + 1)

    async def is_closed(self, run_id: str) -> bool:
        async with self.engine.connect() as conn:
            query = select(run_logs.c.closed_at).where(run_logs.c.run_id == run_id)
            return (await conn.execute(query)).scalar() is not None

    async def page(self, run_id: str, from_seq: int, limit: int) -> SqlPage:
        """Up to `limit` unbroken events from `from_seq`, and whether they end a
        closed log."""
        async with self.engine.connect() as conn:
            rows = (
                await conn.execute(
                    ROWS.where(
                        run_event_batches.c.run_id == run_id,
                        run_event_batches.c.last_seq >= from_seq,
                    ).limit(ROWS_PER_READ)
                )
            ).all()
            query = select(run_logs.c.closed_at).where(run_logs.c.run_id == run_id)
            head = (await conn.execute(query)).first()
            gone = await _gone(conn, run_id) if head is None else None
        events, complete = events_of(run_id, rows, from_seq, limit)
        at_end = complete and len(rows) < ROWS_PER_READ
        closed = head is not None and head.closed_at is not None and at_end
        return SqlPage(events, closed=closed or gone is not None, gone=gone)

    async def stored_through(self, run_id: str, upto: int) -> int:
        """How many of the run's events numbered `upto` or below are stored."""
        batches = run_event_batches.c
        async with self.engine.connect() as conn:
            query = select(batches.first_seq, batches.last_seq).where(
                batches.run_id == run_id, batches.first_seq <= upto
            )
            rows = (await conn.execute(query)).all()
        return covered(((row.first_seq, row.last_seq) for row in rows), upto)

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
            await conn.execute(
                delete(run_event_batches).where(run_event_batches.c.run_id.in_(list(ended)))
            )
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
# A run's batch rows in the order `events_of` reads them (narrowed per query).
ROWS = select(
    run_event_batches.c.first_seq, run_event_batches.c.last_seq, run_event_batches.c.frames
).order_by(run_event_batches.c.first_seq, run_event_batches.c.last_seq)


async def _gone(conn: AsyncConnection, run_id: str) -> str | None:
    """Both tombstones in one statement: a live run's every write asks."""
    forgotten = exists().where(forgotten_runs.c.run_id == run_id)
    expired = exists().where(expired_runs.c.run_id == run_id)
    row = (await conn.execute(select(forgotten, expired))).one()
    if row[0]:
        return FORGOTTEN
    if row[1]:
        return EXPIRED
    return None
