"""What an approval's card showed when it was asked: the preview the approval is bound to and the
run's budget figures then (`asked_with`, JSON). A card redrawn after the run moved on, by any
replica, after any restart, keeps what the decision was made on instead of the run's newer state.

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.add_column(sa.Column("asked_with", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.drop_column("asked_with")
