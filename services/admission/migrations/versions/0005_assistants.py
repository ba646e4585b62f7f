"""assistants and their versions

Revision ID: 0005
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

JsonDocument = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "assistants",
        sa.Column("assistant_id", sa.String(36), primary_key=True),
        sa.Column("graph_id", sa.String(255), nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("description", sa.Text),
        sa.Column("config", JsonDocument, nullable=False),
        sa.Column("context", JsonDocument, nullable=False),
        sa.Column("metadata", JsonDocument, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_assistants_graph_id", "assistants", ["graph_id"])
    op.create_index("ix_assistants_created_at", "assistants", ["created_at"])
    op.create_table(
        "assistant_versions",
        sa.Column(
            "assistant_id",
            sa.String(36),
            sa.ForeignKey("assistants.assistant_id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("version", sa.Integer, primary_key=True),
        sa.Column("graph_id", sa.String(255), nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("description", sa.Text),
        sa.Column("config", JsonDocument, nullable=False),
        sa.Column("context", JsonDocument, nullable=False),
        sa.Column("metadata", JsonDocument, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("assistant_versions")
    op.drop_index("ix_assistants_created_at", "assistants")
    op.drop_index("ix_assistants_graph_id", "assistants")
    op.drop_table("assistants")
