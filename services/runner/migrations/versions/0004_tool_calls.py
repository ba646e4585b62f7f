"""tool_calls: each tool call (and model call) of a run, started and finished

A run's takeover resumes from its last checkpoint; this record lets the calls
made after that checkpoint answer from what they recorded instead of running
again (services/runner/effects/tool_calls.py). Rows are written under the run's fence
(run_fences), and removed when the run ends, with its thread, or by a rollback.

Revision ID: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tool_calls",
        sa.Column("run_id", sa.String(36), primary_key=True),
        # The tool call's id, or `model:<digest>:<n>` for a model call.
        sa.Column("call_id", sa.String(255), primary_key=True),
        sa.Column("thread_id", sa.String(36), nullable=False, index=True),
        sa.Column("kind", sa.String(8), nullable=False),  # tool | model
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),  # started | finished
        sa.Column("epoch", sa.BigInteger, nullable=False),  # the epoch that last wrote it
        sa.Column("attempts", sa.Integer, nullable=False, server_default="1"),
        sa.Column("result_type", sa.String(32)),
        sa.Column("result", sa.LargeBinary),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("finished_at", sa.Float),
    )


def downgrade() -> None:
    op.drop_table("tool_calls")
