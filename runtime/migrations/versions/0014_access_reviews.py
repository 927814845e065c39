"""Reviews of standing access: one row per review period (the period's start, unique, so one
replica alone opens it), and one line per grant or API key it asks about, with its verdict; and
when each grant was last used, which a review shows.

Revision ID: 0014
Revises: 0013
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("grants") as grants:
        grants.add_column(sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "access_reviews",
        sa.Column("review_id", sa.String(64), nullable=False),
        sa.Column("period", sa.DateTime(timezone=True), nullable=False),
        sa.Column("opened_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("posting_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("channel", sa.String(32), nullable=True),
        sa.Column("ts", sa.String(32), nullable=True),
        sa.Column("posted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("reminded_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("escalated_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("review_id", name="pk_access_reviews"),
        sa.UniqueConstraint("period", name="uq_access_reviews_period"),
    )
    op.create_table(
        "access_review_lines",
        sa.Column("review_id", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("subject", sa.String(64), nullable=False),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("verdict", sa.String(8), nullable=True),
        sa.Column("decided_by", sa.String(64), nullable=True),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("review_id", "kind", "subject", name="pk_access_review_lines"),
    )


def downgrade() -> None:
    op.drop_table("access_review_lines")
    op.drop_table("access_reviews")
    with op.batch_alter_table("grants") as grants:
        grants.drop_column("last_used_at")
