"""The token usage ledger: written with a run's end, summed per thread and per owner."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from waybill.common.usage import COUNTS, TokenCount, summarize
from waybill.services.admission.tables import token_usage


async def record_usage(
    conn: AsyncConnection, run: Row[Any], counts: list[TokenCount], now: datetime
) -> None:
    """Add a finished run's counts to the ledger (in the transaction that ends it)."""
    if not counts:
        return
    rows = [
        {
            "run_id": run.run_id,
            "thread_id": run.thread_id,
            "owner_id": run.owner_id,
            "model": count.model,
            "source": count.source,
            **{name: getattr(count, name) for name in COUNTS},
            "cost": count.cost,
            "recorded_at": now,
        }
        for count in counts
    ]
    await conn.execute(insert(token_usage), rows)


async def add_usage(
    conn: AsyncConnection, run: Row[Any], counts: list[TokenCount], now: datetime
) -> None:
    """Add counts spent after a run's end to its rows (one per model and source),
    making the rows it has none of yet."""
    for count in counts:
        key = (
            token_usage.c.run_id == run.run_id,
            token_usage.c.model == count.model,
            token_usage.c.source == count.source,
        )
        added = {name: getattr(token_usage.c, name) + getattr(count, name) for name in COUNTS}
        if count.cost is not None:
            added["cost"] = func.coalesce(token_usage.c.cost, 0.0) + count.cost
        updated = await conn.execute(update(token_usage).where(*key).values(**added))
        if not updated.rowcount:
            await record_usage(conn, run, [count], now)


async def summed_usage(
    engine: AsyncEngine, owner_id: str, thread_id: str | None, since: datetime | None
) -> tuple[dict[str, Any], int]:
    """(usage summary, runs counted) of an owner's runs, or of one of their threads.

    `since` leaves out the rows of an earlier thread that had the same id."""
    where = [token_usage.c.owner_id == owner_id]
    if thread_id is not None:
        where.append(token_usage.c.thread_id == thread_id)
    if since is not None:
        where.append(token_usage.c.recorded_at >= since)
    sums = [func.sum(getattr(token_usage.c, name)).label(name) for name in COUNTS]
    grouped = (
        select(
            token_usage.c.model,
            token_usage.c.source,
            *sums,
            func.sum(token_usage.c.cost).label("cost"),
        )
        .where(*where)
        .group_by(token_usage.c.model, token_usage.c.source)
    )
    runs = select(func.count(func.distinct(token_usage.c.run_id))).where(*where)
    async with engine.connect() as conn:
        rows = (await conn.execute(grouped)).all()
        run_count = int(await conn.scalar(runs) or 0)
    return summarize(_count(row) for row in rows), run_count


def _count(row: Any) -> TokenCount:
    return TokenCount(
        model=row.model,
        source=row.source,
        **{name: int(getattr(row, name) or 0) for name in COUNTS},
        cost=float(row.cost) if row.cost is not None else None,
    )
