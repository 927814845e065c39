"""Approvals record their tool's contract, and one call may be asked about again.

An approval whose tool changed before it was used is superseded by a fresh one for the same key
(`run_id:step`), so the key is unique only among the approvals still in force.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

LIVE = "status IN ('pending', 'approved', 'consumed')"


def upgrade() -> None:
    with op.batch_alter_table("approvals", recreate="always") as batch:
        batch.add_column(sa.Column("contract", sa.String(32), nullable=True))
        batch.drop_constraint("uq_approvals_key", type_="unique")
        batch.create_index("ix_approvals_key", ["key"])
    op.create_index("uq_approvals_live_key", "approvals", ["key"], unique=True,
                    sqlite_where=sa.text(LIVE), postgresql_where=sa.text(LIVE))


def downgrade() -> None:
    op.drop_index("uq_approvals_live_key", table_name="approvals")
    with op.batch_alter_table("approvals", recreate="always") as batch:
        batch.drop_index("ix_approvals_key")
        batch.drop_column("contract")
        batch.create_unique_constraint("uq_approvals_key", ["key"])
