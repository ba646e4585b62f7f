"""Receipts (one per (run, epoch), never overwritten) and workspace snapshots.

A receipt and the webhooks it owes are written in one transaction (see
`write`), so a receipt never exists without its outbox rows, nor the reverse.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import bindparam, delete, func, insert, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from waybill.common import codec
from waybill.common.errors import ServiceError, busy, conflict, not_found
from waybill.common.sql import migrate
from waybill.services.delivery.tables import (
    receipts,
    webhook_deliveries,
    webhook_subscriptions,
    workspace_snapshots,
)
from waybill.services.delivery.workspace_files import Change, FileEntry

MIGRATIONS = Path(__file__).parent / "migrations"

# A receipt's statements, built once (every run's end runs them, and building one
# cost more than running it), their values given at execution.
FIRST_SNAPSHOT = select(workspace_snapshots.c.files).where(
    workspace_snapshots.c.run_id == bindparam("snapshot_run_id")
)
SNAPSHOT_INSERT = insert(workspace_snapshots)
NEWEST_RECEIPT_EPOCH = select(func.max(receipts.c.epoch)).where(
    receipts.c.run_id == bindparam("receipt_run_id")
)
RECEIPT_INSERT = insert(receipts)
HELD_WEBHOOK_INSERT = insert(webhook_deliveries)


@dataclass
class ReceiptRecord:
    run_id: str
    epoch: int
    thread_id: str
    outcome: str
    verdict: str
    final_output: bytes
    error_type: str
    error_message: str
    created_at: datetime
    assistant_id: str = ""
    verdict_reason: str = ""
    presented: list[str] = field(default_factory=list)
    produced: list[str] = field(default_factory=list)
    matched: list[str] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=dict)

    @property
    def run_status(self) -> str:
        """How the run ended, as its runner reports it (a failed verdict is an error)."""
        if self.outcome == "success" and self.verdict == "error":
            return "error"
        return self.outcome

    def summary(self) -> dict[str, Any]:
        """What a webhook tells of the receipt."""
        failed = self.run_status == "error"
        return {
            "epoch": self.epoch,
            "status": self.run_status,
            "assistant_id": self.assistant_id,
            "error": self.error_message or (self.verdict_reason if failed else "") or None,
            "verdict": self.verdict,
            "verdict_reason": self.verdict_reason,
            "presented": self.presented,
            "matched": self.matched,
        }

    def row(self) -> dict[str, Any]:
        values = asdict(self)
        for name in ("presented", "produced", "matched", "usage"):
            values[name] = json.dumps(values[name])
        values["changes"] = json.dumps([asdict(change) for change in self.changes])
        return values

    @classmethod
    def from_row(cls, row: Any) -> ReceiptRecord:
        values = dict(row._mapping)
        for name in ("presented", "produced", "matched", "usage"):
            values[name] = json.loads(values[name])
        values["changes"] = [Change(**change) for change in json.loads(values["changes"])]
        return cls(**values)


@dataclass
class OwedWebhook:
    """An outbox row as the receipt creates it: held until the status is final."""

    delivery_id: str
    url: str
    source: str  # run | thread | assistant


def files_json(files: list[FileEntry]) -> str:
    return json.dumps([asdict(entry) for entry in files])


def files_from_json(text: str) -> list[FileEntry]:
    return [FileEntry(**entry) for entry in json.loads(text)]


async def _insert_first_snapshot(
    conn: AsyncConnection,
    run_id: str,
    thread_id: str,
    epoch: int,
    files: list[FileEntry],
    at: datetime,
) -> None:
    snapshot = {
        "run_id": run_id,
        "thread_id": thread_id,
        "epoch": epoch,
        "files": files_json(files),
        "created_at": at,
    }
    await conn.execute(SNAPSHOT_INSERT, snapshot)


class ReceiptStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def migrate(self) -> None:
        await migrate(self.engine, MIGRATIONS, "delivery")

    # ---- snapshots ------------------------------------------------------------

    async def keep_first_snapshot(
        self, run_id: str, thread_id: str, epoch: int, files: list[FileEntry], now: datetime
    ) -> tuple[list[FileEntry], bool]:
        """Store `files` as the run's first snapshot unless one exists; returns
        the run's first snapshot and whether it existed already."""
        existing = await self.first_snapshot(run_id)
        if existing is not None:
            return existing, True
        try:
            async with self.engine.begin() as conn:
                await _insert_first_snapshot(conn, run_id, thread_id, epoch, files, now)
        except IntegrityError:  # a twin call stored it first
            raced = await self.first_snapshot(run_id)
            return (files if raced is None else raced), True
        return files, False

    async def continued_snapshot(self, previous_run_id: str) -> list[FileEntry] | None:
        """The first snapshot of the run a new one continues, if that run was paused
        (its files written before the pause count as the new run's)."""
        if not previous_run_id:
            return None
        try:
            previous = await self.latest(previous_run_id)
        except ServiceError:
            return None
        if previous.verdict != "paused":
            return None
        return await self.first_snapshot(previous_run_id)

    async def first_snapshot(self, run_id: str) -> list[FileEntry] | None:
        async with self.engine.connect() as conn:
            text = (await conn.execute(FIRST_SNAPSHOT, {"snapshot_run_id": run_id})).scalar()
        return None if text is None else files_from_json(text)

    # ---- receipts -------------------------------------------------------------

    async def write(
        self,
        receipt: ReceiptRecord,
        owed: list[OwedWebhook],
        values_json: bytes,
        first_snapshot: list[FileEntry] | None = None,
    ) -> None:
        """The receipt and its held webhooks, in one transaction; with
        `first_snapshot`, the run's first snapshot too (none was taken before)."""
        try:
            async with self.engine.begin() as conn:
                if first_snapshot is not None:
                    await _insert_first_snapshot(
                        conn,
                        receipt.run_id,
                        receipt.thread_id,
                        receipt.epoch,
                        first_snapshot,
                        receipt.created_at,
                    )
                of_run = {"receipt_run_id": receipt.run_id}
                newest = (await conn.execute(NEWEST_RECEIPT_EPOCH, of_run)).scalar()
                if newest is not None and newest > receipt.epoch:
                    raise busy(
                        f"run {receipt.run_id}: epoch {receipt.epoch} is stale "
                        f"(a receipt exists for epoch {newest})"
                    )
                await conn.execute(RECEIPT_INSERT, receipt.row())
                for one in owed:
                    held = {
                        "delivery_id": one.delivery_id,
                        "run_id": receipt.run_id,
                        "thread_id": receipt.thread_id,
                        "epoch": receipt.epoch,
                        "url": one.url,
                        "source": one.source,
                        "state": "held",
                        "payload": b"",
                        "values_json": values_json,
                        "receipt_json": codec.dumps(receipt.summary()),
                        "attempts": 0,
                        "created_at": receipt.created_at,
                    }
                    await conn.execute(HELD_WEBHOOK_INSERT, held)
        except IntegrityError as error:
            raise conflict(
                f"run {receipt.run_id} already has a receipt for epoch {receipt.epoch}"
            ) from error

    async def latest(self, run_id: str) -> ReceiptRecord:
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(receipts)
                    .where(receipts.c.run_id == run_id)
                    .order_by(receipts.c.epoch.desc())
                    .limit(1)
                )
            ).first()
        if row is None:
            raise not_found(f"Run {run_id} has no receipt.")
        return ReceiptRecord.from_row(row)

    async def thread_receipts(self, thread_id: str) -> list[ReceiptRecord]:
        """Each run's newest receipt, oldest run first."""
        async with self.engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(receipts)
                    .where(receipts.c.thread_id == thread_id)
                    .order_by(receipts.c.created_at, receipts.c.epoch)
                )
            ).all()
        newest: dict[str, ReceiptRecord] = {}
        for row in rows:
            record = ReceiptRecord.from_row(row)
            newest.pop(record.run_id, None)
            newest[record.run_id] = record
        return list(newest.values())

    async def forget(self, thread_id: str, run_ids: list[str]) -> int:
        """Delete the receipts (and snapshots) of a thread's runs and of the listed
        runs, and the thread's subscriptions. Webhooks already owed are still sent."""
        matches, snapshot_matches = [], []
        if thread_id:
            matches.append(receipts.c.thread_id == thread_id)
            snapshot_matches.append(workspace_snapshots.c.thread_id == thread_id)
        if run_ids:
            matches.append(receipts.c.run_id.in_(run_ids))
            snapshot_matches.append(workspace_snapshots.c.run_id.in_(run_ids))
        if not matches:
            return 0
        async with self.engine.begin() as conn:
            result = await conn.execute(delete(receipts).where(or_(*matches)))
            await conn.execute(delete(workspace_snapshots).where(or_(*snapshot_matches)))
            if thread_id:
                await conn.execute(
                    delete(webhook_subscriptions).where(
                        webhook_subscriptions.c.scope == "thread",
                        webhook_subscriptions.c.scope_id == thread_id,
                    )
                )
        return int(result.rowcount or 0)
