"""the journal logs admission still owes a close

Every terminal write leaves a row here in its own transaction; admission closes
the run's log once `close_at` has passed (see services/admission/runs/log_closes.py).

Revision ID: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "log_closes",
        sa.Column("run_id", sa.String(36), primary_key=True),
        sa.Column("epoch", sa.BigInteger, nullable=False),
        sa.Column("close_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_log_closes_close_at", "log_closes", ["close_at"])


def downgrade() -> None:
    op.drop_index("ix_log_closes_close_at", "log_closes")
    op.drop_table("log_closes")
