"""a thread's time-to-live: its strategy, its minutes, when it expires

LangGraph Platform's `ttl` of threads.create / threads.update, and the project's
`checkpointer.ttl.default_ttl` taken at a thread's creation or at a run. Rows from
before have none: they expire once a run gives them the project's default.

Revision ID: 0013
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


# Plain ALTER TABLE (nullable columns), never a batch copy, as 0010 and 0011.


def upgrade() -> None:
    op.add_column("threads", sa.Column("ttl_strategy", sa.String(16)))
    op.add_column("threads", sa.Column("ttl_minutes", sa.Float))
    op.add_column("threads", sa.Column("ttl_expires_at", sa.DateTime(timezone=True)))
    op.create_index("ix_threads_ttl_expires_at", "threads", ["ttl_expires_at"])


def downgrade() -> None:
    op.drop_index("ix_threads_ttl_expires_at", "threads")
    op.drop_column("threads", "ttl_expires_at")
    op.drop_column("threads", "ttl_minutes")
    op.drop_column("threads", "ttl_strategy")
