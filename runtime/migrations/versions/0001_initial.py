"""Runs, their history, approvals, the audit log and the execution ledger.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

from signoff.runtime.adapters.tables import UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("run_id", sa.String(64), primary_key=True),
        sa.Column("goal", sa.Text, nullable=False),
        sa.Column("requester", sa.String(64), nullable=False),
        sa.Column("origin", sa.Text, nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("history_len", sa.Integer, nullable=False),
        sa.Column("pending_key", sa.String(160), nullable=True),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("event_count", sa.Integer, nullable=False),
        sa.Column("command", sa.Text, nullable=True),
        sa.Column("lease_owner", sa.String(128), nullable=True),
        sa.Column("lease_expires_at", UTCDateTime, nullable=True),
        sa.Column("request_id", sa.String(200), nullable=True),
        sa.Column("shown_status", sa.String(32), nullable=True),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("run_id", name="pk_runs"),
        sa.UniqueConstraint("request_id", name="uq_runs_request_id"),
    )
    op.create_index("ix_runs_status_lease_expires_at", "runs", ["status", "lease_expires_at"])
    op.create_index("ix_runs_requester_created_at", "runs", ["requester", "created_at"])
    op.create_index("ix_runs_updated_at", "runs", ["updated_at"])
    op.create_table(
        "run_history",
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("entry", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("run_id", "seq", name="pk_run_history"),
    )
    op.create_table(
        "approvals",
        sa.Column("approval_id", sa.String(64), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("step", sa.Integer, nullable=False),
        sa.Column("tool", sa.String(64), nullable=False),
        sa.Column("args", sa.Text, nullable=False),
        sa.Column("key", sa.String(160), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("requester", sa.String(64), nullable=False),
        sa.Column("requested_at", UTCDateTime, nullable=False),
        sa.Column("expires_at", UTCDateTime, nullable=False),
        sa.Column("decided_at", UTCDateTime, nullable=True),
        sa.Column("decided_by", sa.String(64), nullable=True),
        sa.Column("note", sa.Text, nullable=True),
        sa.Column("message", sa.Text, nullable=True),
        sa.Column("shown_status", sa.String(16), nullable=True),
        sa.Column("consumed_at", UTCDateTime, nullable=True),
        sa.PrimaryKeyConstraint("approval_id", name="pk_approvals"),
        sa.UniqueConstraint("key", name="uq_approvals_key"),
    )
    op.create_index("ix_approvals_run_id", "approvals", ["run_id"])
    op.create_index("ix_approvals_status_expires_at", "approvals", ["status", "expires_at"])
    op.create_index("ix_approvals_status_requested_at", "approvals", ["status", "requested_at"])
    op.create_index("ix_approvals_requested_at", "approvals", ["requested_at"])
    op.create_table(
        "events",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("type", sa.String(64), nullable=False),
        sa.Column("payload", sa.Text, nullable=False),
        sa.Column("at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_events"),
        sa.UniqueConstraint("run_id", "seq", name="uq_events_run_id_seq"),
    )
    op.create_table(
        "tool_executions",
        sa.Column("key", sa.String(160), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("tool", sa.String(64), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("result", sa.Text, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("started_at", UTCDateTime, nullable=False),
        sa.Column("finished_at", UTCDateTime, nullable=True),
        sa.Column("seconds", sa.Float, nullable=True),
        sa.PrimaryKeyConstraint("key", name="pk_tool_executions"),
    )
    op.create_index("ix_tool_executions_run_id", "tool_executions", ["run_id"])


def downgrade() -> None:
    for table in ("tool_executions", "events", "approvals", "run_history", "runs"):
        op.drop_table(table)
