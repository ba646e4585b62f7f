"""a cron's creator as the project's auth saw it

A cron made by a user of the project's own auth (`auth.path` in langgraph.json)
keeps that user (`owner_user`: the JSON `@auth.authenticate` returned, its
permissions in it) and the filters its `@auth.on` handlers returned for the
cron's run (`auth_filters`: `{"threads": ..., "assistants": ...}`), so that each
firing runs as that user, under those filters. Rows from before, and crons of
Waybill's own principals, have neither (NULL): they fire as before.

Revision ID: 0012
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

JsonDocument = sa.JSON().with_variant(JSONB(), "postgresql")


# Plain ALTER TABLE (nullable columns), never a batch copy, as 0010.


def upgrade() -> None:
    op.add_column("crons", sa.Column("owner_user", JsonDocument))
    op.add_column("crons", sa.Column("auth_filters", JsonDocument))


def downgrade() -> None:
    op.drop_column("crons", "auth_filters")
    op.drop_column("crons", "owner_user")
