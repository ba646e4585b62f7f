"""refuse, inside the inserting transaction, a checkpoint from a stale epoch

The runner stamps every checkpoint's metadata with its run's `run_id` and
`run_epoch`; this trigger compares them with `run_fences` as part of the same
INSERT, so a runner that lost its run cannot slip a checkpoint in between a
check and a write. Checkpoints without a run epoch (update_state from the API)
are not fenced.

Revision ID: 0002
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

SQLITE_TRIGGER = """
CREATE TRIGGER IF NOT EXISTS waybill_checkpoint_fence
BEFORE INSERT ON checkpoints
WHEN json_extract(CAST(NEW.metadata AS TEXT), '$.run_epoch') IS NOT NULL
 AND (SELECT epoch FROM run_fences
      WHERE run_id = json_extract(CAST(NEW.metadata AS TEXT), '$.run_id'))
     != json_extract(CAST(NEW.metadata AS TEXT), '$.run_epoch')
BEGIN
  SELECT RAISE(ABORT, 'waybill: stale epoch');
END
"""

POSTGRES_FUNCTION = """
CREATE OR REPLACE FUNCTION waybill_checkpoint_fence() RETURNS trigger AS $$
DECLARE
  current_epoch BIGINT;
BEGIN
  IF NEW.metadata ? 'run_epoch' THEN
    SELECT epoch INTO current_epoch FROM run_fences
      WHERE run_id = NEW.metadata->>'run_id' FOR SHARE;
    IF current_epoch IS NOT NULL AND current_epoch <> (NEW.metadata->>'run_epoch')::BIGINT THEN
      RAISE EXCEPTION 'waybill: stale epoch';
    END IF;
  END IF;
  RETURN NEW;
END
$$ LANGUAGE plpgsql
"""

POSTGRES_TRIGGER = """
CREATE TRIGGER waybill_checkpoint_fence
BEFORE INSERT OR UPDATE ON checkpoints
FOR EACH ROW EXECUTE FUNCTION waybill_checkpoint_fence()
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(POSTGRES_FUNCTION)
        op.execute("DROP TRIGGER IF EXISTS waybill_checkpoint_fence ON checkpoints")
        op.execute(POSTGRES_TRIGGER)
    else:
        op.execute(SQLITE_TRIGGER)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS waybill_checkpoint_fence ON checkpoints")
        op.execute("DROP FUNCTION IF EXISTS waybill_checkpoint_fence()")
    else:
        op.execute("DROP TRIGGER IF EXISTS waybill_checkpoint_fence")
