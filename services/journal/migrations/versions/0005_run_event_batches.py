"""run_event_batches: a run's events stored as compressed batches, not one row each

The events already stored move into batch rows of up to 512 events (the journal's
own write size), then `run_events` is dropped. Downgrading unpacks them again.

Revision ID: 0005
"""

import zlib
from collections.abc import Iterable, Iterator
from itertools import groupby
from typing import Any

import sqlalchemy as sa
from alembic import op

from waybill.v1 import journal_pb2

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

EVENTS_PER_ROW = 512
PAGE_ROWS = 2000  # rows read at a time

run_events = sa.table(
    "run_events",
    sa.column("run_id", sa.String),
    sa.column("seq", sa.BigInteger),
    sa.column("event", sa.String),
    sa.column("data", sa.LargeBinary),
    sa.column("created_at", sa.DateTime(timezone=True)),
)
run_event_batches = sa.table(
    "run_event_batches",
    sa.column("run_id", sa.String),
    sa.column("first_seq", sa.BigInteger),
    sa.column("last_seq", sa.BigInteger),
    sa.column("frames", sa.LargeBinary),
    sa.column("created_at", sa.DateTime(timezone=True)),
)


def upgrade() -> None:
    op.create_table(
        "run_event_batches",
        sa.Column("run_id", sa.String(36), primary_key=True),
        sa.Column("first_seq", sa.BigInteger, primary_key=True),
        sa.Column("last_seq", sa.BigInteger, primary_key=True),
        sa.Column("frames", sa.LargeBinary, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    bind = op.get_bind()
    rows = _pages(bind, run_events, (run_events.c.run_id, run_events.c.seq))
    for run_id, events in groupby(rows, key=lambda row: row.run_id):
        for batch in _stretches(events):
            packed = journal_pb2.StoredBatch()
            for row in batch:
                packed.events.add(seq=row.seq, event=row.event, data=bytes(row.data))
            bind.execute(
                run_event_batches.insert().values(
                    run_id=run_id,
                    first_seq=batch[0].seq,
                    last_seq=batch[-1].seq,
                    frames=zlib.compress(packed.SerializeToString(), 1),
                    created_at=batch[-1].created_at,
                )
            )
    op.drop_table("run_events")


def _pages(bind: Any, table: Any, key: tuple[Any, ...]) -> Iterator[Any]:
    """Every row of `table` in `key` order, read a page at a time: a journal may hold
    days of events, and no cursor stays open while the rows are written elsewhere
    (asyncpg allows one operation at a time on a connection)."""
    after: tuple[Any, ...] | None = None
    while True:
        query = sa.select(table).order_by(*key).limit(PAGE_ROWS)
        if after is not None:
            query = query.where(sa.tuple_(*key) > sa.tuple_(*after))
        page = bind.execute(query).all()
        yield from page
        if len(page) < PAGE_ROWS:
            return
        after = tuple(getattr(page[-1], column.name) for column in key)


def _stretches(rows: Iterable[Any]) -> Iterator[list[Any]]:
    """A run's rows in order -> unbroken stretches of at most EVENTS_PER_ROW."""
    stretch: list[Any] = []
    for row in rows:
        if stretch and (stretch[-1].seq + 1 != row.seq or len(stretch) == EVENTS_PER_ROW):
            yield stretch
            stretch = []
        stretch.append(row)
    if stretch:
        yield stretch


def downgrade() -> None:
    op.create_table(
        "run_events",
        sa.Column("run_id", sa.String(36), primary_key=True),
        sa.Column("seq", sa.BigInteger, primary_key=True),
        sa.Column("event", sa.String(255), nullable=False),
        sa.Column("data", sa.LargeBinary, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    bind = op.get_bind()
    batches = run_event_batches.c
    rows = _pages(bind, run_event_batches, (batches.run_id, batches.first_seq, batches.last_seq))
    next_seq: dict[str, int] = {}
    for row in rows:
        batch = journal_pb2.StoredBatch.FromString(zlib.decompress(bytes(row.frames)))
        first = next_seq.get(row.run_id, 0)  # below it: stored twice (overlapping rows)
        events = [
            {
                "run_id": row.run_id,
                "seq": event.seq,
                "event": event.event,
                "data": event.data,
                "created_at": row.created_at,
            }
            for event in batch.events
            if event.seq >= first
        ]
        if events:
            bind.execute(run_events.insert(), events)  # one statement per row's events
            next_seq[row.run_id] = events[-1]["seq"] + 1
    op.drop_table("run_event_batches")
