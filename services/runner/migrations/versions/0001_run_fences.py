"""run_fences: the epoch that may write a run's checkpoints

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
        "run_fences",
        sa.Column("run_id", sa.String(36), primary_key=True),
        sa.Column("epoch", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("run_fences")
