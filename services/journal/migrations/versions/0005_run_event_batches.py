"""run_event_batches: a run's events stored as compressed batches, not one row each

The events already stored move into batch rows of up to 512 events (the journal's
own write size), then `run_events` is dropped. Downgrading unpacks them again.

Revision ID: 0005
"""

import zlib
from itertools import groupby

import sqlalchemy as sa
from alembic import op

from waybill.v1 import journal_pb2

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

EVENTS_PER_ROW = 512

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
    rows = bind.execute(sa.select(run_events).order_by(run_events.c.run_id, run_events.c.seq))
    for run_id, events in groupby(rows, key=lambda row: row.run_id):
        for batch in _stretches(list(events)):
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


def _stretches(rows: list) -> list[list]:  # type: ignore[type-arg]
    """A run's rows in order -> unbroken stretches of at most EVENTS_PER_ROW."""
    stretches: list[list] = []  # type: ignore[type-arg]
    for row in rows:
        last = stretches[-1] if stretches else None
        if last and last[-1].seq + 1 == row.seq and len(last) < EVENTS_PER_ROW:
            last.append(row)
        else:
            stretches.append([row])
    return stretches


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
    rows = bind.execute(sa.select(run_event_batches).order_by("run_id", "first_seq", "last_seq"))
    next_seq: dict[str, int] = {}
    for row in rows:
        batch = journal_pb2.StoredBatch.FromString(zlib.decompress(bytes(row.frames)))
        for event in batch.events:
            if event.seq < next_seq.get(row.run_id, 0):
                continue  # stored twice (overlapping rows)
            next_seq[row.run_id] = event.seq + 1
            bind.execute(
                run_events.insert().values(
                    run_id=row.run_id,
                    seq=event.seq,
                    event=event.event,
                    data=event.data,
                    created_at=row.created_at,
                )
            )
    op.drop_table("run_event_batches")
