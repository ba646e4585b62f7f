"""a thread's config, its last run's error, when its state last changed

As LangGraph Platform's threads show them (`config`, `error`, `state_updated_at`).
Rows from before read `{}`, no error, and their `updated_at`.

Revision ID: 0011
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

JsonDocument = sa.JSON().with_variant(JSONB(), "postgresql")


# Plain ALTER TABLE (nullable columns), never a batch copy, as 0010.


def upgrade() -> None:
    op.add_column("threads", sa.Column("config", JsonDocument))
    op.add_column("threads", sa.Column("error", JsonDocument))
    op.add_column("threads", sa.Column("state_updated_at", sa.DateTime(timezone=True)))


def downgrade() -> None:
    op.drop_column("threads", "state_updated_at")
    op.drop_column("threads", "error")
    op.drop_column("threads", "config")
