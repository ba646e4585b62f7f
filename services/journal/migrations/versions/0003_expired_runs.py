"""expired_runs: runs whose events the retention sweep deleted; run_logs.closed_at index

Revision ID: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "expired_runs",
        sa.Column("run_id", sa.String(36), primary_key=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expired_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("run_logs_closed_at", "run_logs", ["closed_at"])


def downgrade() -> None:
    op.drop_index("run_logs_closed_at", "run_logs")
    op.drop_table("expired_runs")
