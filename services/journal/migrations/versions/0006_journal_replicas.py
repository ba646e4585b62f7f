"""journal_replicas: the live journal replicas, so that a re-seed of a run's numbering
(Redis lost its state) waits until every one of them stored what it numbered

Revision ID: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "journal_replicas",
        sa.Column("replica_id", sa.String(36), primary_key=True),
        sa.Column("incarnation", sa.String(64)),
        sa.Column("beats", sa.BigInteger, nullable=False),
        sa.Column("joined_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("journal_replicas")
