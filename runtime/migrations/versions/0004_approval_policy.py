"""Approvals under a policy: a quorum of distinct people, what the policy required, and each vote.

`approvals.quorum` is how many distinct allowed people must approve (1 for every approval made
before), `approvals.asked` what the policy's rule required (JSON), and `approval_votes` holds one
decision per person per approval.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.add_column(sa.Column("quorum", sa.Integer, nullable=False, server_default=sa.text("1")))
        batch.add_column(sa.Column("asked", sa.Text, nullable=True))
    op.create_table(
        "approval_votes",
        sa.Column("approval_id", sa.String(64), nullable=False),
        sa.Column("user_id", sa.String(64), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("approved", sa.Boolean, nullable=False),
        sa.Column("note", sa.Text, nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("approval_id", "user_id", name="pk_approval_votes"),
    )


def downgrade() -> None:
    op.drop_table("approval_votes")
    with op.batch_alter_table("approvals") as batch:
        batch.drop_column("asked")
        batch.drop_column("quorum")
