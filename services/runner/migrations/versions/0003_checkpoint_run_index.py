"""checkpoints by run: an index on the run id the runner stamps in their metadata

A rollback deletes one run's checkpoints (`adelete_for_runs`, services/runner/
savers.py), which names runs, not threads: without this index that would read
every checkpoint of every thread.

Revision ID: 0003
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

# The very expressions savers.py filters on, so that each database uses the index.
POSTGRES_INDEX = (
    "CREATE INDEX IF NOT EXISTS waybill_checkpoints_run_id ON checkpoints ((metadata->>'run_id'))"
)
SQLITE_INDEX = (
    "CREATE INDEX IF NOT EXISTS waybill_checkpoints_run_id "
    "ON checkpoints (json_extract(CAST(metadata AS TEXT), '$.run_id'))"
)


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    op.execute(POSTGRES_INDEX if postgres else SQLITE_INDEX)


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS waybill_checkpoints_run_id")
