"""Signed receipts: one row per decision (a person's approve or deny, or a call a policy rule or a
grant let start), written in the decision's transaction, the receipt's signed JSON as signed.

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "receipts",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("approval_id", sa.String(64), nullable=True),
        sa.Column("key", sa.String(160), nullable=False),
        sa.Column("key_id", sa.String(32), nullable=False),
        sa.Column("receipt", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_receipts"),
    )
    op.create_index("ix_receipts_approval_id", "receipts", ["approval_id"])
    op.create_index("ix_receipts_key", "receipts", ["key"])
    op.create_index("ix_receipts_run_id", "receipts", ["run_id"])


def downgrade() -> None:
    op.drop_table("receipts")
