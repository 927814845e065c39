"""The outbox of messages owed to people (`notices`): a sweep's reminders and escalations and a
break-glass's follow-ups and review, kept in the transaction that owes them until they are sent.

Revision ID: 0015
Revises: 0014
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "notices",
        sa.Column("seq", sa.BigInteger().with_variant(sa.Integer, "sqlite"), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("approval_id", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("made_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("next_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("tries", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("seq", name="pk_notices"),
    )
    op.create_index("ix_notices_approval_id_seq", "notices", ["approval_id", "seq"])
    op.create_index("ix_notices_next_at", "notices", ["next_at"])


def downgrade() -> None:
    op.drop_index("ix_notices_next_at", table_name="notices")
    op.drop_index("ix_notices_approval_id_seq", table_name="notices")
    op.drop_table("notices")
