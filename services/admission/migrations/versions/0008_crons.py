"""crons and their firings

Revision ID: 0008
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

JsonDocument = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "crons",
        sa.Column("cron_id", sa.String(36), primary_key=True),
        sa.Column("assistant_id", sa.String(36), nullable=False),
        sa.Column("thread_id", sa.String(36)),
        sa.Column("owner_id", sa.String(255), nullable=False),
        sa.Column("owner_role", sa.String(64), nullable=False),
        sa.Column("owner_scopes", sa.Text, nullable=False),
        sa.Column("schedule", sa.String(255), nullable=False),
        sa.Column("timezone", sa.String(64), nullable=False),
        sa.Column("end_time", sa.DateTime(timezone=True)),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("on_run_completed", sa.String(8)),
        sa.Column("kwargs", JsonDocument, nullable=False),
        sa.Column("metadata", JsonDocument, nullable=False),
        sa.Column("multitask_strategy", sa.String(16), nullable=False),
        sa.Column("next_run_at", sa.DateTime(timezone=True)),
        sa.Column("last_run_id", sa.String(36)),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_crons_thread_id", "crons", ["thread_id"])
    op.create_index("ix_crons_owner_id", "crons", ["owner_id"])
    op.create_index("ix_crons_next_run_at", "crons", ["next_run_at"])
    op.create_table(
        "cron_firings",
        sa.Column("cron_id", sa.String(36), primary_key=True),
        sa.Column("due_at", sa.DateTime(timezone=True), primary_key=True),
        sa.Column("fired_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("run_id", sa.String(36)),
        sa.Column("thread_id", sa.String(36)),
        sa.Column("detail", sa.Text, nullable=False),
        sa.Column("thread_cleanup", sa.String(8)),
    )


def downgrade() -> None:
    op.drop_table("cron_firings")
    op.drop_index("ix_crons_next_run_at", "crons")
    op.drop_index("ix_crons_owner_id", "crons")
    op.drop_index("ix_crons_thread_id", "crons")
    op.drop_table("crons")
