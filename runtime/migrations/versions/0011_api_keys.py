"""The approval API's keys: each a name, the hash of its secret (never the secret), the secret its
callbacks are signed with, the channel its cards go to, the tools it may ask about and whom it
speaks for; and the callbacks made when an approval asked for with one is decided.

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("secret_hash", sa.String(64), nullable=False),
        sa.Column("callback_secret", sa.String(80), nullable=False),
        sa.Column("channel", sa.String(32), nullable=False),
        sa.Column("other_channels", sa.Text, nullable=False, server_default=sa.text("'[]'")),
        sa.Column("tools", sa.Text, nullable=False),
        sa.Column("requester", sa.String(32), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("name", name="pk_api_keys"),
        sa.UniqueConstraint("secret_hash", name="uq_api_keys_secret_hash"),
    )
    op.create_table(
        "api_callbacks",
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("next_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.PrimaryKeyConstraint("run_id", name="pk_api_callbacks"),
    )


def downgrade() -> None:
    op.drop_table("api_callbacks")
    op.drop_table("api_keys")
