"""A run's typed records (see common/run_records.py), stored beside its events.

They take a path of their own, apart from `Append`/`Subscribe`: numbered per
run from 0 in their own sequence, written straight to SQL (the runner sends
them in batches, a few per model or tool call), and never fanned out to a
run's stream.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Select,
    String,
    bindparam,
    delete,
    func,
    insert,
    select,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from waybill.common.errors import busy
from waybill.services.journal.tables import forgotten_runs, run_logs, run_records

INSERT_ATTEMPTS = 3  # two journal replicas numbering the same run at once: retry


def _writable_facts() -> Select[Any]:
    """One row, by `writable_run_id`: whether the run is forgotten, its log's epoch
    and close, and its last record's number and epoch."""
    run_id = bindparam("writable_run_id", type_=String)
    of_run = (
        (forgotten_runs, forgotten_runs.c.run_id),
        (run_logs, run_logs.c.run_id),
        (run_records, run_records.c.run_id),
    )
    gone, logs, mine = (select(column).where(key == run_id) for column, key in of_run)
    return select(
        gone.exists().label("gone"),
        logs.with_only_columns(run_logs.c.epoch).scalar_subquery().label("log_epoch"),
        logs.with_only_columns(run_logs.c.closed_at).scalar_subquery().label("closed_at"),
        mine.with_only_columns(func.max(run_records.c.seq)).scalar_subquery().label("last"),
        mine.with_only_columns(func.max(run_records.c.epoch)).scalar_subquery().label("newest"),
    )


# Built once: every batch of records runs them, and building one cost more than
# running it.
WRITABLE_FACTS = _writable_facts()
RECORD_INSERT = insert(run_records)


@dataclass(frozen=True)
class Record:
    type: str
    data: bytes
    created_at: datetime
    seq: int = -1


@dataclass(frozen=True)
class RecordPage:
    """What to list: `after` is a cursor in the order asked for (None: from the start)."""

    types: tuple[str, ...]
    limit: int
    offset: int
    after: int | None
    newest_first: bool


class RecordStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        # One appender per run at a time in this process (SQLite has no row locks);
        # the primary key and a retry cover appenders in other processes.
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    async def append(self, run_id: str, epoch: int, records: list[Record]) -> int:
        """Number and store records after the run's last one. Returns the last number."""
        lock = self._locks[run_id]
        try:
            async with lock:
                for _ in range(INSERT_ATTEMPTS - 1):
                    try:
                        return await self._append_once(run_id, epoch, records)
                    except IntegrityError:
                        continue
                return await self._append_once(run_id, epoch, records)
        finally:
            if not lock.locked():  # keep no lock per run ever seen
                self._locks.pop(run_id, None)

    async def _append_once(self, run_id: str, epoch: int, records: list[Record]) -> int:
        async with self.engine.begin() as conn:
            last = await self._check_writable(conn, run_id, epoch)
            rows = [
                {
                    "run_id": run_id,
                    "seq": last + 1 + offset,
                    "type": record.type,
                    "epoch": epoch,
                    "data": record.data,
                    "created_at": record.created_at,
                }
                for offset, record in enumerate(records)
            ]
            if rows:
                await conn.execute(RECORD_INSERT, rows)
            return last + len(rows)

    async def _check_writable(self, conn: AsyncConnection, run_id: str, epoch: int) -> int:
        """Refuse a forgotten run, a closed log or a stale epoch. Returns the last seq (-1)."""
        found = (await conn.execute(WRITABLE_FACTS, {"writable_run_id": run_id})).one()
        if found.gone:
            raise busy(f"run {run_id} was deleted with its thread")
        if found.closed_at is not None:
            raise busy(f"run {run_id}: the log is closed")
        current = max(int(found.log_epoch or 0), int(found.newest or 0))
        if epoch < current:
            raise busy(f"run {run_id}: epoch {epoch} is stale (current {current})")
        return -1 if found.last is None else int(found.last)

    async def page(self, run_id: str, page: RecordPage) -> list[Record]:
        query = select(run_records).where(run_records.c.run_id == run_id)
        if page.types:
            query = query.where(run_records.c.type.in_(page.types))
        if page.newest_first:
            if page.after is not None:
                query = query.where(run_records.c.seq < page.after)
            query = query.order_by(run_records.c.seq.desc())
        else:
            if page.after is not None:
                query = query.where(run_records.c.seq > page.after)
            query = query.order_by(run_records.c.seq)
        query = query.limit(page.limit).offset(page.offset)
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [Record(row.type, bytes(row.data), row.created_at, row.seq) for row in rows]

    async def forget(self, run_ids: list[str]) -> None:
        """The runs' records go with their events (their thread was deleted)."""
        async with self.engine.begin() as conn:
            await conn.execute(delete(run_records).where(run_records.c.run_id.in_(run_ids)))
        for run_id in run_ids:
            self._locks.pop(run_id, None)
