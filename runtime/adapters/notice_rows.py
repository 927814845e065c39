"""The outbox's rows (`notices`): a notice as the outbox keeps it, written by the transaction of the
change or step that owes it."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, delete, insert

from signoff.runtime.adapters.tables import notices
from signoff.runtime.notices import Notice
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
