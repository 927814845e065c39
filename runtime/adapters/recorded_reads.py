"""The recorded calls a backtest decides again, read from a Signoff database without writing to it.

Three queries (the audit events of the window, the approvals opened in it, the runs they belong
to) on one read-only connection; a database that is missing, empty or not migrated is refused
before anything is read, and none is ever created (SQLite opens the file read-only).
"""

from __future__ import annotations

import gc
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from pydantic_core import from_json
from sqlalchemy import Connection, Engine, String, create_engine, select, type_coerce
from sqlalchemy.exc import OperationalError

from signoff.runtime.adapters.db import (
    current_revision,
    database_error,
    head_revision,
    make_engine,
    masked,
    sqlite_file,
)
from signoff.runtime.adapters.tables import approvals, events, runs
from signoff.runtime.backtest import RecordedCall
from signoff.runtime.errors import ConfigError
from signoff.runtime.recorded_calls import (
    EVENT_TYPES,
    StoredApproval,
    StoredCaller,
    StoredEvent,
    recorded_calls,
)


def read_only_engine(url: str) -> Engine:
    """An engine that reads the Signoff database at `url` and cannot write to it; raises
    `ConfigError` when there is no such database, or it has no Signoff tables, or older ones."""
    path = sqlite_file(url)
    if path is not None:
        if not path.is_file():
            raise ConfigError(f"cannot read the database at {masked(url)}: {path} does not exist")
        # `mode=ro`: SQLite would otherwise create a file that is not there, or write to one that is.
        # The URI is made here, escaped: read from a URL, a `#` in the path would cut `?mode=ro` off.
        uri = f"{path.absolute().as_uri()}?mode=ro"
        engine = create_engine("sqlite://", creator=lambda: sqlite3.connect(uri, uri=True, check_same_thread=False))
    else:
        engine = make_engine(url).execution_options(postgresql_readonly=True)
    try:
        revision = current_revision(engine)
    except OperationalError as exc:
        engine.dispose()
        raise database_error(masked(url), exc) from None
    if revision != head_revision():
        engine.dispose()
        state = "has no Signoff tables" if revision is None else f"is at schema {revision}, not {head_revision()}"
        raise ConfigError(f"the database at {masked(url)} {state}; run `signoff db upgrade` (or point at the "
                          "database Signoff runs on)")
    return engine


def read_recorded_calls(engine: Engine, since: datetime) -> list[RecordedCall]:
    """The calls proposed since `since` that the policy then ruled on, in each run's order."""
    # A week of calls is a million small objects, none in a cycle: the collector, run every few
    # hundred of them, would find nothing and take a third of the time.
    collecting = gc.isenabled()
    gc.disable()
    try:
        with engine.connect() as conn:
            approved = _approvals(conn, since)
            callers = _callers(conn, since)
            return recorded_calls(_events(conn, since), approved, callers)
    finally:
        if collecting:
            gc.enable()


def _events(conn: Connection, since: datetime) -> Iterator[StoredEvent]:
    # `at` as the driver gives it: SQLAlchemy's own parsing of SQLite's text took half the query's time.
    query = (select(events.c.run_id, events.c.type, events.c.payload, type_coerce(events.c.at, String))
             .where(events.c.type.in_(EVENT_TYPES), events.c.at >= since)
             .order_by(events.c.run_id, events.c.seq))
    for run_id, kind, payload, at in conn.execute(query):
        yield StoredEvent(run_id, kind, from_json(payload), _utc(at))


def _utc(at: datetime | str) -> datetime:
    """A stored moment in UTC, as `tables.UTCDateTime` reads it: SQLite keeps it as text without a
    zone (written in UTC), PostgreSQL's text has the server's."""
    moment = datetime.fromisoformat(at) if isinstance(at, str) else at
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _approvals(conn: Connection, since: datetime) -> dict[str, StoredApproval]:
    """The first approval opened for each key in the window (a superseded one stays for the record)."""
    query = (select(approvals.c.key, approvals.c.args, approvals.c.asked, approvals.c.asked_with)
             .where(approvals.c.requested_at >= since).order_by(approvals.c.requested_at))
    found: dict[str, StoredApproval] = {}
    for key, args, asked, asked_with in conn.execute(query):
        if key not in found:
            usage = _json(asked_with).get("usage")
            found[key] = StoredApproval(_json(args), _json(asked) or None,
                                        usage if isinstance(usage, dict) else None)
    return found


def _callers(conn: Connection, since: datetime) -> dict[str, StoredCaller]:
    in_window = select(events.c.run_id).where(events.c.at >= since).distinct()
    query = select(runs.c.run_id, runs.c.requester, runs.c.origin).where(runs.c.run_id.in_(in_window))
    callers = {}
    for run_id, requester, origin in conn.execute(query):
        channel = _json(origin).get("channel")
        callers[run_id] = StoredCaller(requester, str(channel or ""))  # as the runner reads it for its rules
    return callers


def _json(text: str | None) -> dict[str, Any]:
    # pydantic's parser: a backtest decodes several JSON documents per call, and it is twice as fast.
    value = from_json(text) if text else {}
    return value if isinstance(value, dict) else {}
