"""The audit log as hash chains (`signoff.runtime.audit`): each event's hash and the one before it,
the chain of runs (`run_chain`) and its head (`audit_head`).

The events already stored are chained as they are, in batches, read back through the same column
type the store reads them with, so that their hashes cover what a check will read. The chains
vouch for the log from this upgrade on: what was changed before it cannot be told apart.

The downgrade drops the hashes; upgrading again chains the log anew.

Revision ID: 0007
Revises: 0006
"""

from collections.abc import Iterator, Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from signoff.runtime.adapters.tables import UTCDateTime
from signoff.runtime.audit import GENESIS, chained, link_hash

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

BATCH = 1000
"""Rows read and written per round trip: memory stays flat however long the audit log is."""

events = sa.table("events", sa.column("id", sa.Integer), sa.column("run_id", sa.String),
                  sa.column("seq", sa.Integer), sa.column("type", sa.String), sa.column("payload", sa.Text),
                  sa.column("at", UTCDateTime), sa.column("prev_hash", sa.String), sa.column("hash", sa.String))
runs = sa.table("runs", sa.column("run_id", sa.String), sa.column("created_at", UTCDateTime))
run_chain = sa.table("run_chain", sa.column("position", sa.Integer), sa.column("run_id", sa.String),
                     sa.column("first_hash", sa.String), sa.column("prev_hash", sa.String),
                     sa.column("hash", sa.String))
audit_head = sa.table("audit_head", sa.column("id", sa.Integer), sa.column("runs", sa.Integer),
                      sa.column("hash", sa.String))


def upgrade() -> None:
    with op.batch_alter_table("events") as batch:
        batch.add_column(sa.Column("prev_hash", sa.String(64), nullable=True))
        batch.add_column(sa.Column("hash", sa.String(64), nullable=True))
    op.create_table(
        "run_chain",
        sa.Column("position", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("first_hash", sa.String(64), nullable=False),
        sa.Column("prev_hash", sa.String(64), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("position", name="pk_run_chain"),
        sa.UniqueConstraint("run_id", name="uq_run_chain_run_id"),
    )
    op.create_table(
        "audit_head",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("runs", sa.Integer, nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_audit_head"),
    )
    conn = op.get_bind()
    _chain_events(conn)
    _chain_runs(conn)


def downgrade() -> None:
    op.drop_table("audit_head")
    op.drop_table("run_chain")
    with op.batch_alter_table("events") as batch:
        batch.drop_column("hash")
        batch.drop_column("prev_hash")


def _chain_events(conn: sa.Connection) -> None:
    """Hash every event after the one before it in its run."""
    set_hashes = (sa.update(events).where(events.c.id == sa.bindparam("b_id"))
                  .values(prev_hash=sa.bindparam("b_prev"), hash=sa.bindparam("b_hash")))
    run_id, last = "", GENESIS
    for batch in _event_batches(conn):
        hashed = []
        for row in batch:
            if row.run_id != run_id:
                run_id, last = row.run_id, GENESIS
            [(prev, last)] = chained(row.run_id, row.seq, last, row.at, [(row.type, row.payload)])
            hashed.append({"b_id": row.id, "b_prev": prev, "b_hash": last})
        conn.execute(set_hashes, hashed)


def _event_batches(conn: sa.Connection) -> Iterator[Sequence[Any]]:
    """The events by run and `seq`, a batch at a time (keyset paging: each batch starts after the last)."""
    after: tuple[str, int] = ("", 0)
    while True:
        rows = conn.execute(
            sa.select(events.c.id, events.c.run_id, events.c.seq, events.c.type, events.c.payload, events.c.at)
            .where(sa.or_(events.c.run_id > after[0], sa.and_(events.c.run_id == after[0], events.c.seq > after[1])))
            .order_by(events.c.run_id, events.c.seq).limit(BATCH)).all()
        if not rows:
            return
        after = (rows[-1].run_id, rows[-1].seq)
        yield rows


def _chain_runs(conn: sa.Connection) -> None:
    """Link every run, in the order they were created, and write the head."""
    position, last = 0, GENESIS
    after: tuple[Any, str] | None = None
    while True:
        query = sa.select(runs.c.run_id, runs.c.created_at).order_by(runs.c.created_at, runs.c.run_id).limit(BATCH)
        if after is not None:
            query = query.where(sa.or_(runs.c.created_at > after[0],
                                       sa.and_(runs.c.created_at == after[0], runs.c.run_id > after[1])))
        batch = conn.execute(query).all()
        if not batch:
            break
        after = (batch[-1].created_at, batch[-1].run_id)
        firsts = dict(conn.execute(sa.select(events.c.run_id, events.c.hash).where(
            events.c.seq == 1, events.c.run_id.in_([row.run_id for row in batch]))).all())
        links = []
        for row in batch:
            position, prev, first = position + 1, last, firsts.get(row.run_id, GENESIS)
            last = link_hash(position, row.run_id, first, prev)
            links.append({"position": position, "run_id": row.run_id, "first_hash": first, "prev_hash": prev,
                          "hash": last})
        conn.execute(sa.insert(run_chain), links)
    conn.execute(sa.insert(audit_head).values(id=1, runs=position, hash=last))
