"""durable cancel requests; thread values and interrupts

Revision ID: 0002
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

JsonDocument = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("runs") as runs:
        runs.add_column(sa.Column("cancel_action", sa.String(16)))
    with op.batch_alter_table("threads") as threads:
        threads.add_column(sa.Column("values", JsonDocument))
        threads.add_column(sa.Column("interrupts", JsonDocument))
    op.create_index("ix_runs_status_lease", "runs", ["status", "lease_expires_at"])


def downgrade() -> None:
    op.drop_index("ix_runs_status_lease", "runs")
    with op.batch_alter_table("threads") as threads:
        threads.drop_column("interrupts")
        threads.drop_column("values")
    with op.batch_alter_table("runs") as runs:
        runs.drop_column("cancel_action")
