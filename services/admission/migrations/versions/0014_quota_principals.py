"""quota_principals: the row each admit of a principal's runs locks, and its GCRA

The `quotas` section's limits are checked and reserved in the admit's own
transaction (services/admission/runs/quotas.py).

Revision ID: 0014
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "quota_principals",
        sa.Column("principal_id", sa.String(255), primary_key=True),
        sa.Column("rate_arrival", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("quota_principals")
