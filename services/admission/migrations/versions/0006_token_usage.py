"""token usage: each run's on its record, and a ledger to sum by thread and user

The ledger outlives runs and threads: tokens spent stay spent when a run is
deleted or rolled back.

Revision ID: 0006
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

JsonDocument = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    op.add_column("runs", sa.Column("usage", JsonDocument))
    op.create_table(
        "token_usage",
        sa.Column("run_id", sa.String(36), primary_key=True),
        sa.Column("model", sa.String(255), primary_key=True),
        sa.Column("source", sa.String(32), primary_key=True),
        sa.Column("thread_id", sa.String(36), nullable=False),
        sa.Column("owner_id", sa.String(255), nullable=False),
        sa.Column("input_tokens", sa.BigInteger, nullable=False),
        sa.Column("output_tokens", sa.BigInteger, nullable=False),
        sa.Column("total_tokens", sa.BigInteger, nullable=False),
        sa.Column("cache_read_tokens", sa.BigInteger, nullable=False),
        sa.Column("llm_calls", sa.BigInteger, nullable=False),
        sa.Column("cost", sa.Float),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_token_usage_thread", "token_usage", ["thread_id", "recorded_at"])
    op.create_index("ix_token_usage_owner", "token_usage", ["owner_id", "recorded_at"])


def downgrade() -> None:
    op.drop_index("ix_token_usage_owner", "token_usage")
    op.drop_index("ix_token_usage_thread", "token_usage")
    op.drop_table("token_usage")
    with op.batch_alter_table("runs") as runs:
        runs.drop_column("usage")
