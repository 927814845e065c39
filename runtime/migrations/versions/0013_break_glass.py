"""Break-glass: an approval approved by one person alone, with the reason they gave, the review
the rule's approvers owe it, where its review card is, and its follow-ups (telling, reminding,
escalating once overdue), due from `glass_due_at` whichever replica's sweep gets there first.

Revision ID: 0013
Revises: 0012
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.add_column(sa.Column("glass", sa.Text, nullable=True))
        batch.add_column(sa.Column("glass_review", sa.Text, nullable=True))
        batch.add_column(sa.Column("glass_message", sa.Text, nullable=True))
        batch.add_column(sa.Column("glass_due_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("glass_nudges", sa.Integer, nullable=False, server_default=sa.text("0")))
    op.create_index("ix_approvals_glass_due_at", "approvals", ["glass_due_at"])


def downgrade() -> None:
    op.drop_index("ix_approvals_glass_due_at", table_name="approvals")
    with op.batch_alter_table("approvals") as batch:
        for column in ("glass_nudges", "glass_due_at", "glass_message", "glass_review", "glass"):
            batch.drop_column(column)
