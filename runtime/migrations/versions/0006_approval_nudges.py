"""Reminders and escalation: when a pending approval's people are next reminded or its
escalation's people added (`nudge_at`), and how many of its nudges were made (`nudges`). The
schedule lives here, not in any one replica's memory, so a restart misses none.

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.add_column(sa.Column("nudge_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("nudges", sa.Integer, nullable=False, server_default=sa.text("0")))
    op.create_index("ix_approvals_status_nudge_at", "approvals", ["status", "nudge_at"])


def downgrade() -> None:
    op.drop_index("ix_approvals_status_nudge_at", table_name="approvals")
    with op.batch_alter_table("approvals") as batch:
        batch.drop_column("nudges")
        batch.drop_column("nudge_at")
