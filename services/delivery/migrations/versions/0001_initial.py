"""receipts

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
        "receipts",
        sa.Column("run_id", sa.String(36), primary_key=True),
        sa.Column("epoch", sa.BigInteger, primary_key=True),
        sa.Column("thread_id", sa.String(36), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("verdict", sa.String(32), nullable=False),
        sa.Column("final_output", sa.LargeBinary, nullable=False),
        sa.Column("error_type", sa.Text, nullable=False),
        sa.Column("error_message", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("receipts")
