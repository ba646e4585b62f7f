"""run_events and run_logs

Revision ID: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "run_events",
        sa.Column("run_id", sa.String(36), primary_key=True),
        sa.Column("seq", sa.BigInteger, primary_key=True),
        sa.Column("event", sa.String(255), nullable=False),
        sa.Column("data", sa.LargeBinary, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "run_logs",
        sa.Column("run_id", sa.String(36), primary_key=True),
        sa.Column("epoch", sa.BigInteger, nullable=False),
        sa.Column("closed_at", sa.DateTime(timezone=True)),
    )


def downgrade() -> None:
    op.drop_table("run_logs")
    op.drop_table("run_events")
