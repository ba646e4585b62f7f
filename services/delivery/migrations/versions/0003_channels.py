"""channels: inbound dedupe, thread generations, leader leases

Revision ID: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # One row per platform event ever taken: the primary key is the dedupe,
    # shared by every delivery replica.
    op.create_table(
        "channel_events",
        sa.Column("channel", sa.String(64), primary_key=True),
        sa.Column("event_id", sa.String(255), primary_key=True),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("run_id", sa.String(36), nullable=True),
    )
    # A conversation's current thread generation (absent: 0); `/new` raises it.
    op.create_table(
        "channel_threads",
        sa.Column("channel", sa.String(64), primary_key=True),
        sa.Column("conversation", sa.String(255), primary_key=True),
        sa.Column("generation", sa.Integer, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    # Once-per-cluster work (Telegram long polling): who holds it, until when,
    # and how far it got (the next getUpdates offset).
    op.create_table(
        "channel_leases",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("holder", sa.String(128), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("cursor", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("channel_leases")
    op.drop_table("channel_threads")
    op.drop_table("channel_events")
