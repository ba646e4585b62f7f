"""forgotten_runs: runs whose events were deleted with their thread

Revision ID: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "forgotten_runs",
        sa.Column("run_id", sa.String(36), primary_key=True),
        sa.Column("forgotten_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("forgotten_runs")
