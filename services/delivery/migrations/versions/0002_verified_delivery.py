"""workspace snapshots, verified receipts, the webhook outbox and subscriptions

Revision ID: 0002
"""

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

RECEIPT_COLUMNS: list[tuple[str, Any, str]] = [
    ("assistant_id", sa.String(64), ""),
    ("verdict_reason", sa.Text, ""),
    ("presented", sa.Text, "[]"),
    ("produced", sa.Text, "[]"),
    ("matched", sa.Text, "[]"),
    ("changes", sa.Text, "[]"),
    ("usage", sa.Text, "{}"),
]


def upgrade() -> None:
    with op.batch_alter_table("receipts") as batch:
        for name, kind, default in RECEIPT_COLUMNS:
            batch.add_column(sa.Column(name, kind, nullable=False, server_default=default))
    op.create_index("receipts_by_thread", "receipts", ["thread_id"])
    op.create_table(
        "workspace_snapshots",
        sa.Column("run_id", sa.String(36), primary_key=True),
        sa.Column("thread_id", sa.String(36), nullable=False),
        sa.Column("epoch", sa.BigInteger, nullable=False),
        sa.Column("files", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "webhook_deliveries",
        sa.Column("delivery_id", sa.String(36), primary_key=True),
        sa.Column("run_id", sa.String(36), nullable=False),
        sa.Column("thread_id", sa.String(36), nullable=False),
        sa.Column("epoch", sa.BigInteger, nullable=False),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("payload", sa.LargeBinary, nullable=False),
        sa.Column("values_json", sa.LargeBinary, nullable=False),
        sa.Column("receipt_json", sa.LargeBinary, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("claimed_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.UniqueConstraint("run_id", "epoch", "url", name="one_delivery_per_target"),
    )
    op.create_index("webhook_deliveries_by_run", "webhook_deliveries", ["run_id"])
    op.create_index("webhook_deliveries_due", "webhook_deliveries", ["state", "next_attempt_at"])
    op.create_table(
        "webhook_attempts",
        sa.Column("attempt_id", sa.String(36), primary_key=True),
        sa.Column("delivery_id", sa.String(36), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("sent_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status_code", sa.Integer, nullable=False),
        sa.Column("error", sa.Text, nullable=False),
    )
    op.create_index("webhook_attempts_by_delivery", "webhook_attempts", ["delivery_id"])
    op.create_table(
        "webhook_subscriptions",
        sa.Column("subscription_id", sa.String(36), primary_key=True),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("scope_id", sa.String(64), nullable=False),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("owner_id", sa.String(128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index(
        "webhook_subscriptions_by_scope", "webhook_subscriptions", ["scope", "scope_id"]
    )


def downgrade() -> None:
    op.drop_table("webhook_subscriptions")
    op.drop_table("webhook_attempts")
    op.drop_table("webhook_deliveries")
    op.drop_table("workspace_snapshots")
    op.drop_index("receipts_by_thread", "receipts")
    with op.batch_alter_table("receipts") as batch:
        for name, _, _ in RECEIPT_COLUMNS:
            batch.drop_column(name)
