"""Run states at schema version 2: every stored state rewritten from version 1, in batches.

Version 2 (`signoff.runtime.schema.RunState`) has every key of the state always present and is
validated whole; its history entries are version 1's, so only `runs.state` (the state without its
history) is rewritten, by the same pure step the code applies to a version 1 state it reads.
Rows that are not version 1 (already version 2, unreadable, or of a version this code does not
know) are left as they are: reading them says what is wrong, as before.

The downgrade writes version 1 back: version 1 reads every key version 2 writes, with the same
meaning, so nothing is lost.

Revision ID: 0003
Revises: 0002
"""

import json
from collections.abc import Callable, Iterator
from typing import Any

import sqlalchemy as sa
from alembic import op

from signoff.runtime.digests import canonical_json
from signoff.runtime.state_versions import downgrade_v2_to_v1, upgrade_v1_to_v2

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

BATCH = 500
"""Rows read and rewritten per round trip: memory stays flat however many runs the database holds."""

runs = sa.table("runs", sa.column("run_id", sa.String), sa.column("state", sa.Text))


def upgrade() -> None:
    _rewrite(1, upgrade_v1_to_v2)


def downgrade() -> None:
    _rewrite(2, downgrade_v2_to_v1)


def _rewrite(version: int, step: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """Rewrite each state at `version` with `step`, `BATCH` rows at a time, in run id order."""
    conn = op.get_bind()
    change = sa.update(runs).where(runs.c.run_id == sa.bindparam("b_run_id")).values(state=sa.bindparam("b_state"))
    for batch in _batches(conn, version):
        rewritten = [{"b_run_id": run_id, "b_state": canonical_json(step(state))} for run_id, state in batch]
        if rewritten:
            conn.execute(change, rewritten)


def _batches(conn: sa.Connection, version: int) -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """The states at `version`, a batch at a time (keyset paging: each batch starts after the last id).

    The text filter only narrows the scan (a state is canonical JSON, so its version reads exactly
    `"schema_version":1`); each candidate is parsed and checked, since an argument could hold that text.
    """
    after = ""
    while True:
        rows = conn.execute(
            sa.select(runs.c.run_id, runs.c.state)
            .where(runs.c.run_id > after, runs.c.state.like(f'%"schema_version":{version}%'))
            .order_by(runs.c.run_id).limit(BATCH)).all()
        if not rows:
            return
        after = rows[-1].run_id
        yield [(row.run_id, state) for row in rows if (state := _parsed(row.state)) is not None
               and type(state.get("schema_version")) is int and state["schema_version"] == version]


def _parsed(text: str) -> dict[str, Any] | None:
    try:
        state = json.loads(text)
    except json.JSONDecodeError:
        return None  # damaged: left for reading to report
    return state if isinstance(state, dict) else None
