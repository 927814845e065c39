"""The audit webhook's cursor: one row saying how far the audit events have been delivered to
`SIGNOFF_AUDIT_WEBHOOK_URL` and which replica delivers them (a lease). Made by the first `signoff
serve` with a webhook, at the log's end then.

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit_webhook",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("target", sa.String(64), nullable=False),
        sa.Column("source", sa.String(64), nullable=False),
        sa.Column("through", sa.BigInteger, nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("lease_owner", sa.String(128), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("failures", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("failing_since", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_audit_webhook"),
    )


def downgrade() -> None:
    op.drop_table("audit_webhook")
