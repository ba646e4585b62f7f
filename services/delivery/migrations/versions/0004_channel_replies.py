"""channel_replies: answers being streamed back, adoptable after a crash

Revision ID: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # One row per answer still owed to a chat; a replica holds it under a lease
    # while it streams, and deletes it once the answer is complete. A row whose
    # lease expired (its replica died) is adopted by another replica.
    op.create_table(
        "channel_replies",
        sa.Column("run_id", sa.String(36), primary_key=True),
        sa.Column("thread_id", sa.String(36), nullable=False),
        sa.Column("channel", sa.String(64), nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("handle", sa.String(128), nullable=True),
        sa.Column("holder", sa.String(128), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("channel_replies_expiry", "channel_replies", ["expires_at"])


def downgrade() -> None:
    op.drop_index("channel_replies_expiry", "channel_replies")
    op.drop_table("channel_replies")
