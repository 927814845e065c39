"""A run's own notices in the outbox: its run message, its calls' results, its cards and its
ending, kept in the transaction of the step that owes them (`notices.approval_id` is empty for
them).

What a run owed people used to be found by comparing: a run without a message was announced by
its next worker, a pending approval without a message was a card to post, and a run whose
`shown_status` differed from its ending an ending to tell. That column goes, and each such
message (cards and endings within recovery's window) becomes a notice owed, so that an upgrade in
the middle of an outage still tells people.

Revision ID: 0016
Revises: 0015
"""

import json
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

RESYNC_WINDOW = timedelta(days=2)
"""How far back recovery looked for messages out of line (`rules.RESYNC_WINDOW` when written)."""
ENDINGS = ("budget_exhausted", "cancelled", "done", "expired", "failed", "needs_reconciliation", "stalled")
"""The statuses people were told about when a run reached them (`notices.ENDINGS` when written)."""
CALLER_MODEL = "caller"
"""A caller's run (`caller_runs.MODEL`), announced only once it asks a person."""


def upgrade() -> None:
    with op.batch_alter_table("notices") as table:
        table.alter_column("approval_id", existing_type=sa.String(64), nullable=True)
    op.create_index("ix_notices_run_id_seq", "notices", ["run_id", "seq"])
    now = datetime.now(UTC)
    since = now - RESYNC_WINDOW
    conn = op.get_bind()
    approvals = sa.table("approvals", sa.column("run_id", sa.String), sa.column("key", sa.String),
                         sa.column("status", sa.String), sa.column("message", sa.Text),
                         sa.column("requested_at", sa.DateTime(timezone=True)))
    runs = sa.table("runs", sa.column("run_id", sa.String), sa.column("status", sa.String),
                    sa.column("shown_status", sa.String), sa.column("updated_at", sa.DateTime(timezone=True)),
                    sa.column("model", sa.String), sa.column("origin", sa.Text))
    unannounced = conn.execute(sa.select(runs.c.run_id).where(
        runs.c.status.not_in(ENDINGS), runs.c.model != CALLER_MODEL, ~runs.c.origin.contains('"ts":'))
        .order_by(runs.c.run_id)).scalars().all()
    unposted = conn.execute(sa.select(approvals.c.run_id, approvals.c.key).where(
        approvals.c.status == "pending", approvals.c.message.is_(None), approvals.c.requested_at >= since)
        .order_by(approvals.c.requested_at)).all()
    untold = conn.execute(sa.select(runs.c.run_id, runs.c.status).where(
        runs.c.status.in_(ENDINGS), runs.c.updated_at >= since,
        sa.or_(runs.c.shown_status.is_(None), runs.c.shown_status != runs.c.status))).all()
    owed: list[tuple[str, str, dict[str, object]]] = [("run_started", run_id, {}) for run_id in unannounced]
    owed += [("cards_posted", run_id, {"keys": [key]}) for run_id, key in unposted]
    owed += [("run_ended", run_id, {"status": status}) for run_id, status in untold]
    if owed:
        notices = sa.table("notices", sa.column("run_id", sa.String), sa.column("kind", sa.String),
                           sa.column("body", sa.Text), sa.column("made_at", sa.DateTime(timezone=True)),
                           sa.column("next_at", sa.DateTime(timezone=True)), sa.column("tries", sa.Integer))
        op.execute(sa.insert(notices).values([
            {"run_id": run_id, "kind": kind, "body": json.dumps(body, separators=(",", ":"), sort_keys=True),
             "made_at": now, "next_at": now, "tries": 0} for kind, run_id, body in owed]))
    with op.batch_alter_table("runs") as table:
        table.drop_column("shown_status")


def downgrade() -> None:
    with op.batch_alter_table("runs") as table:
        table.add_column(sa.Column("shown_status", sa.String(32), nullable=True))
    op.execute("DELETE FROM notices WHERE approval_id IS NULL")
    op.drop_index("ix_notices_run_id_seq", table_name="notices")
    with op.batch_alter_table("notices") as table:
        table.alter_column("approval_id", existing_type=sa.String(64), nullable=False)
