"""A notice's place in the outbox (`notices.seq`) is never given to another.

A notice is dropped by its place once sent, and a drop can come late (two replicas draw the same
redraw; the second finishes after the first). SQLite gave a new row the largest rowid plus one,
so a notice owed after the last one was dropped took its place, and the late drop took it too: a
card nobody posted, a run left waiting on it. The table is made again with AUTOINCREMENT, which
never gives a rowid twice. PostgreSQL's sequence never did.

Revision ID: 0017
Revises: 0016
"""

from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        with op.batch_alter_table("notices", recreate="always", table_kwargs={"sqlite_autoincrement": True}):
            pass


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        with op.batch_alter_table("notices", recreate="always", table_kwargs={"sqlite_autoincrement": False}):
            pass
