"""owners of threads and runs; at most one running run per thread

Every thread and run belongs to a user (`owner_id`); rows from before auth
belong to the embedded default's one user, `local`. The partial unique index
makes the database itself refuse a second running run on a thread.

Revision ID: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("threads") as threads:
        threads.add_column(
            sa.Column("owner_id", sa.String(255), nullable=False, server_default="local")
        )
    with op.batch_alter_table("runs") as runs:
        runs.add_column(
            sa.Column("owner_id", sa.String(255), nullable=False, server_default="local")
        )
    op.create_index("ix_threads_owner", "threads", ["owner_id", "created_at"])
    op.create_index("ix_runs_owner", "runs", ["owner_id", "created_at"])
    op.create_index(
        "ux_runs_one_running_per_thread",
        "runs",
        ["thread_id"],
        unique=True,
        postgresql_where=sa.text("status = 'running'"),
        sqlite_where=sa.text("status = 'running'"),
    )


def downgrade() -> None:
    op.drop_index("ux_runs_one_running_per_thread", "runs")
    op.drop_index("ix_runs_owner", "runs")
    op.drop_index("ix_threads_owner", "threads")
    with op.batch_alter_table("runs") as runs:
        runs.drop_column("owner_id")
    with op.batch_alter_table("threads") as threads:
        threads.drop_column("owner_id")
