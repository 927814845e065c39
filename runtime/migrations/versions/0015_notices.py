"""The outbox of messages owed to people (`notices`): a card's redraws, a sweep's reminders and
escalations, and a break-glass's follow-ups and review, kept in the transaction that owes them
until they are sent.

A card's redraw used to be found by comparing `approvals.shown_status` with `status`; that column
goes, and each posted card it shows out of line with its approval, within recovery's window,
becomes a redraw owed, so that an upgrade in the middle of an outage still brings it in line.

Revision ID: 0015
Revises: 0014
"""

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

RESYNC_WINDOW = timedelta(days=2)
"""How far back recovery looked for cards out of line (`rules.RESYNC_WINDOW` when written)."""


def upgrade() -> None:
    notices = op.create_table(
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
    assert notices is not None
    approvals = sa.table("approvals", sa.column("approval_id", sa.String), sa.column("run_id", sa.String),
                         sa.column("status", sa.String), sa.column("shown_status", sa.String),
                         sa.column("message", sa.Text), sa.column("requested_at", sa.DateTime(timezone=True)))
    now = datetime.now(UTC)
    out_of_line = sa.select(approvals.c.run_id, approvals.c.approval_id, sa.literal("redraw"), sa.literal("{}"),
                            sa.literal(now, sa.DateTime(timezone=True)), sa.literal(now, sa.DateTime(timezone=True)),
                            sa.literal(0)).where(
        approvals.c.message.is_not(None), approvals.c.requested_at >= now - RESYNC_WINDOW,
        sa.or_(approvals.c.shown_status.is_(None), approvals.c.shown_status != approvals.c.status),
        ~sa.and_(approvals.c.shown_status == "approved", approvals.c.status == "consumed"))
    op.execute(sa.insert(notices).from_select(
        ["run_id", "approval_id", "kind", "body", "made_at", "next_at", "tries"], out_of_line))
    with op.batch_alter_table("approvals") as table:
        table.drop_column("shown_status")


def downgrade() -> None:
    with op.batch_alter_table("approvals") as table:
        table.add_column(sa.Column("shown_status", sa.String(16), nullable=True))
    op.drop_index("ix_notices_next_at", table_name="notices")
    op.drop_index("ix_notices_approval_id_seq", table_name="notices")
    op.drop_table("notices")
