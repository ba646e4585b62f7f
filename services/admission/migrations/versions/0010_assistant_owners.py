"""owners of assistants

Every assistant belongs to a user (`owner_id`), as threads and runs do; rows from
before belong to the embedded default's one user, `local`. Graphs' system
assistants keep that owner and stay visible to all (admission decides by id).

Revision ID: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


# Plain ALTER TABLE, never a batch copy: on SQLite a copy drops the old table, and
# with foreign keys on that deletes every assistant's versions (ON DELETE CASCADE).


def upgrade() -> None:
    op.add_column(
        "assistants",
        sa.Column("owner_id", sa.String(255), nullable=False, server_default="local"),
    )
    op.create_index("ix_assistants_owner", "assistants", ["owner_id", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_assistants_owner", "assistants")
    op.drop_column("assistants", "owner_id")  # SQLite 3.35+ drops a column in place
