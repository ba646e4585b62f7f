"""Receipts: one per (run, epoch), never overwritten."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    delete,
    func,
    insert,
    or_,
    select,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from common.errors import busy, conflict, not_found
from common.sql import migrate

MIGRATIONS = Path(__file__).parent / "migrations"

metadata = MetaData()
receipts = Table(
    "receipts",
    metadata,
    Column("run_id", String(36), primary_key=True),
    Column("epoch", BigInteger, primary_key=True),
    Column("thread_id", String(36), nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("verdict", String(32), nullable=False),
    Column("final_output", LargeBinary, nullable=False),
    Column("error_type", Text, nullable=False),
    Column("error_message", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)


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


class ReceiptStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def migrate(self) -> None:
        await migrate(self.engine, MIGRATIONS, "delivery")

    async def write(self, receipt: ReceiptRecord) -> None:
        try:
            async with self.engine.begin() as conn:
                newest = (
                    await conn.execute(
                        select(func.max(receipts.c.epoch)).where(
                            receipts.c.run_id == receipt.run_id
                        )
                    )
                ).scalar()
                if newest is not None and newest > receipt.epoch:
                    raise busy(
                        f"run {receipt.run_id}: epoch {receipt.epoch} is stale "
                        f"(a receipt exists for epoch {newest})"
                    )
                await conn.execute(insert(receipts).values(**receipt.__dict__))
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
        return ReceiptRecord(**row._mapping)

    async def forget(self, thread_id: str, run_ids: list[str]) -> int:
        """Delete the receipts of a thread's runs and of the listed runs."""
        matches = []
        if thread_id:
            matches.append(receipts.c.thread_id == thread_id)
        if run_ids:
            matches.append(receipts.c.run_id.in_(run_ids))
        if not matches:
            return 0
        async with self.engine.begin() as conn:
            result = await conn.execute(delete(receipts).where(or_(*matches)))
        return int(result.rowcount or 0)
