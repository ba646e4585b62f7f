"""Durable storage of run events (SQL)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    LargeBinary,
    MetaData,
    String,
    Table,
    delete,
    insert,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncEngine

from common import codec
from common.sql import migrate

MIGRATIONS = Path(__file__).parent / "migrations"

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
)
# Runs deleted with their thread: their log must not come back (a late Close or
# Append), and a subscriber must hear NOT_FOUND rather than wait forever.
forgotten_runs = Table(
    "forgotten_runs",
    metadata,
    Column("run_id", String(36), primary_key=True),
    Column("forgotten_at", DateTime(timezone=True), nullable=False),
)


@dataclass(frozen=True)
class StoredEvent:
    run_id: str
    seq: int
    event: str
    data: bytes


@dataclass
class StoredLog:
    epoch: int
    closed: bool
    events: list[StoredEvent]
    forgotten: bool = False


class JournalStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def migrate(self) -> None:
        await migrate(self.engine, MIGRATIONS, "journal")

    async def load(self, run_id: str) -> StoredLog | None:
        """Everything stored for a run, or None when the journal never saw it."""
        async with self.engine.connect() as conn:
            gone = select(forgotten_runs.c.run_id).where(forgotten_runs.c.run_id == run_id)
            if (await conn.execute(gone)).first() is not None:
                return StoredLog(epoch=0, closed=True, events=[], forgotten=True)
            head = (await conn.execute(select(run_logs).where(run_logs.c.run_id == run_id))).first()
            if head is None:
                return None
            rows = (
                await conn.execute(
                    select(run_events.c.seq, run_events.c.event, run_events.c.data)
                    .where(run_events.c.run_id == run_id)
                    .order_by(run_events.c.seq)
                )
            ).all()
        events = [StoredEvent(run_id, row.seq, row.event, bytes(row.data)) for row in rows]
        return StoredLog(epoch=head.epoch, closed=head.closed_at is not None, events=events)

    async def write(self, events: list[StoredEvent], opened: dict[str, int]) -> None:
        """Insert a batch; `opened` holds runs (with epoch) seen for the first time."""
        now = codec.now_utc()
        async with self.engine.begin() as conn:
            if opened:
                await conn.execute(
                    insert(run_logs),
                    [{"run_id": r, "epoch": e, "closed_at": None} for r, e in opened.items()],
                )
            if events:
                await conn.execute(
                    insert(run_events),
                    [
                        {
                            "run_id": e.run_id,
                            "seq": e.seq,
                            "event": e.event,
                            "data": e.data,
                            "created_at": now,
                        }
                        for e in events
                    ],
                )

    async def mark_closed(self, run_id: str, epoch: int) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                update(run_logs)
                .where(run_logs.c.run_id == run_id)
                .values(closed_at=codec.now_utc(), epoch=epoch)
            )

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
