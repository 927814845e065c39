"""The outbox's rows (`notices`): a notice as the outbox keeps it, written by the transaction of the
change or step that owes it."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, delete, insert, select

from signoff.runtime.adapters.tables import notices
from signoff.runtime.notices import KINDS, HeldNotice, Notice, notice_from
from signoff.runtime.state import canonical_json


def notice_row(run_id: str, notice: Notice, now: datetime) -> dict[str, Any]:
    """`notice` as the outbox keeps it: owed from `now`, due at once."""
    return {"run_id": run_id, "approval_id": notice.about, "kind": notice.kind,
            "body": canonical_json(notice.body()), "made_at": now, "next_at": now}


def owe(conn: Connection, owed: Iterable[tuple[str, Notice]], now: datetime) -> None:
    """Keep each (run id, notice) of `owed` in the outbox, in one statement."""
    rows = [notice_row(run_id, notice, now) for run_id, notice in owed]
    if rows:
        conn.execute(insert(notices), rows)


def drop_told(conn: Connection, told: tuple[int, ...]) -> None:
    """Drop the notices `told` (by their place in the outbox): they were sent."""
    if told:
        conn.execute(delete(notices).where(notices.c.seq.in_(told)))


KNOWN = notices.c.kind.in_(sorted(KINDS))
"""A notice this version knows how to send (one a newer replica owed waits for a replica that does)."""
OF_RUN = notices.c.approval_id.is_(None)
"""A run's own notice (`notices.RunNotice`), not an approval's."""


def due_of_run(conn: Connection, run_id: str, now: datetime, limit: int) -> list[HeldNotice]:
    """The run's own notices due at `now`, oldest first, up to the first that waits for its
    backoff or its fence (those after it wait for it)."""
    rows = conn.execute(select(notices).where(notices.c.run_id == run_id, OF_RUN, KNOWN)
                        .order_by(notices.c.seq).limit(limit)).all()
    due = []
    for row in rows:
        if row.next_at > now:
            break
        due.append(HeldNotice(row.seq, row.run_id, notice_from(row.kind, None, json.loads(row.body)),
                              row.made_at, row.tries + 1))
    return due
