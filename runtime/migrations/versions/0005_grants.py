"""Grants: "Approve + allow similar" lets later calls of the same tool and rule, with the same
arguments where the rule says so, run unasked for a while, in one run or in a requester's runs.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "grants",
        sa.Column("grant_id", sa.String(64), nullable=False),
        sa.Column("approval_id", sa.String(64), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("requester", sa.String(64), nullable=False),
        sa.Column("tool", sa.String(64), nullable=False),
        sa.Column("rule", sa.String(200), nullable=True),
        sa.Column("same", sa.Text, nullable=False),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("created_by", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_by", sa.String(64), nullable=True),
        sa.Column("uses", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.PrimaryKeyConstraint("grant_id", name="pk_grants"),
    )
    op.create_index("ix_grants_run_id", "grants", ["run_id"])
    op.create_index("ix_grants_requester_expires_at", "grants", ["requester", "expires_at"])


def downgrade() -> None:
    op.drop_index("ix_grants_requester_expires_at", table_name="grants")
    op.drop_index("ix_grants_run_id", table_name="grants")
    op.drop_table("grants")
