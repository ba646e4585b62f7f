"""channel_leases: a text position (sync tokens, gateway sessions), not an offset

Revision ID: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Where a channel's listener resumes: Telegram's next offset, Matrix's
    # `since` token, Discord's session and sequence (JSON). Telegram's polling
    # leases are renamed to the listeners' names, their offsets kept.
    with op.batch_alter_table("channel_leases") as batch:
        batch.add_column(sa.Column("position", sa.Text, nullable=False, server_default=""))
    op.execute("UPDATE channel_leases SET position = CAST(cursor AS VARCHAR(32))")
    op.execute(
        "UPDATE channel_leases SET name = 'listen:' || substr(name, 15)"
        " WHERE name LIKE 'telegram-poll:%'"
    )
    with op.batch_alter_table("channel_leases") as batch:
        batch.drop_column("cursor")


def downgrade() -> None:
    with op.batch_alter_table("channel_leases") as batch:
        batch.add_column(sa.Column("cursor", sa.BigInteger, nullable=False, server_default="0"))
    op.execute(
        "UPDATE channel_leases SET name = 'telegram-poll:' || substr(name, 8)"
        " WHERE name LIKE 'listen:%'"
    )
    with op.batch_alter_table("channel_leases") as batch:
        batch.drop_column("position")
