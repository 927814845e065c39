"""Seals in the chain of runs (`signoff.runtime.audit`): besides a link when a run is created, a
link sealing the run's events each time a step leaves it waiting for a person or ended, so that a
run's events deleted, or cut back, show whatever the run's row counts.

`run_chain` gains `seq` (1: a run's creation; more: a seal of its events up to that one) and its
`first_hash` becomes `event_hash`; a run may have several links now. `audit_head.runs` becomes
`links`. Every run already stored is sealed as it is, in the chain's order, so the chain vouches
for its events from this upgrade on; the links already made keep their hashes, and a head printed
before the upgrade is still part of the chain after it.

The downgrade drops the seals and links the runs again, one link each, in their order.

Revision ID: 0008
Revises: 0007
"""

from collections.abc import Iterator, Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from signoff.runtime.audit import GENESIS, link_hash, seal_hash

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

BATCH = 1000
"""Links read and written per round trip: memory stays flat however many runs there are."""

events = sa.table("events", sa.column("run_id", sa.String), sa.column("seq", sa.Integer),
                  sa.column("hash", sa.String))
run_chain = sa.table("run_chain", sa.column("position", sa.Integer), sa.column("run_id", sa.String),
                     sa.column("seq", sa.Integer), sa.column("event_hash", sa.String),
                     sa.column("prev_hash", sa.String), sa.column("hash", sa.String))
audit_head = sa.table("audit_head", sa.column("id", sa.Integer), sa.column("links", sa.Integer),
                      sa.column("hash", sa.String))


def upgrade() -> None:
    with op.batch_alter_table("run_chain") as batch:
        batch.add_column(sa.Column("seq", sa.Integer, nullable=False, server_default=sa.text("1")))
        batch.alter_column("first_hash", new_column_name="event_hash", existing_type=sa.String(64),
                           existing_nullable=False)
        batch.drop_constraint("uq_run_chain_run_id", type_="unique")
        batch.create_index("ix_run_chain_run_id", ["run_id"])
    with op.batch_alter_table("audit_head") as batch:
        batch.alter_column("runs", new_column_name="links", existing_type=sa.Integer, existing_nullable=False)
    _seal_runs(op.get_bind())


def downgrade() -> None:
    conn = op.get_bind()
    conn.execute(sa.delete(run_chain).where(run_chain.c.seq != 1))
    _relink_runs(conn)
    with op.batch_alter_table("audit_head") as batch:
        batch.alter_column("links", new_column_name="runs", existing_type=sa.Integer, existing_nullable=False)
    with op.batch_alter_table("run_chain") as batch:
        batch.drop_index("ix_run_chain_run_id")
        batch.create_unique_constraint("uq_run_chain_run_id", ["run_id"])
        batch.alter_column("event_hash", new_column_name="first_hash", existing_type=sa.String(64),
                           existing_nullable=False)
        batch.drop_column("seq")


def _seal_runs(conn: sa.Connection) -> None:
    """Seal each linked run that has more than its first event, after the head, in the chain's order."""
    head = conn.execute(sa.select(audit_head.c.links, audit_head.c.hash).where(audit_head.c.id == 1)).first()
    if head is None:
        return  # `signoff audit verify` names a missing head; nothing here can vouch for what follows it
    position, last = head.links, head.hash
    for batch in _links(conn, position):
        ends = (sa.select(events.c.run_id, sa.func.max(events.c.seq).label("seq"))
                .where(events.c.run_id.in_([link.run_id for link in batch])).group_by(events.c.run_id).subquery())
        lasts = {row.run_id: (row.seq, row.hash) for row in conn.execute(
            sa.select(events.c.run_id, events.c.seq, events.c.hash)
            .join(ends, sa.and_(ends.c.run_id == events.c.run_id, ends.c.seq == events.c.seq))
            .where(events.c.seq > 1, events.c.hash.is_not(None)))}
        seals = []
        for link in batch:
            if link.run_id not in lasts:
                continue
            seq, event = lasts[link.run_id]
            position, prev = position + 1, last
            last = seal_hash(position, link.run_id, seq, event, prev)
            seals.append({"position": position, "run_id": link.run_id, "seq": seq, "event_hash": event,
                          "prev_hash": prev, "hash": last})
        if seals:
            conn.execute(sa.insert(run_chain), seals)
    conn.execute(sa.update(audit_head).where(audit_head.c.id == 1).values(links=position, hash=last))


def _links(conn: sa.Connection, through: int) -> Iterator[Sequence[Any]]:
    """The links at positions 1 to `through`, a batch at a time, in the chain's order."""
    after = 0
    while after < through:
        batch = conn.execute(sa.select(run_chain.c.position, run_chain.c.run_id, run_chain.c.event_hash)
                             .where(run_chain.c.position > after, run_chain.c.position <= through)
                             .order_by(run_chain.c.position).limit(BATCH)).all()
        if not batch:
            return
        after = batch[-1].position
        yield batch


def _relink_runs(conn: sa.Connection) -> None:
    """Number the links left (one per run) again from 1 and chain them, and write the head."""
    last_position = conn.execute(sa.select(sa.func.max(run_chain.c.position))).scalar() or 0
    position, last = 0, GENESIS
    for batch in _links(conn, last_position):
        for link in batch:
            position, prev = position + 1, last
            last = link_hash(position, link.run_id, link.event_hash, prev)
            conn.execute(sa.update(run_chain).where(run_chain.c.position == link.position)
                         .values(position=position, prev_hash=prev, hash=last))
    conn.execute(sa.update(audit_head).where(audit_head.c.id == 1).values(links=position, hash=last))
