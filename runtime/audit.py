"""The audit log's hash chains: what a hash covers, and the records a store or an export yields.
How the chains are checked is `audit_verify.py`'s, the export format `audit_export.py`'s. Pure: no
I/O, no SQL; the stores, `signoff audit` and the tests share this one definition.

Two chains, so that keeping them costs a write little and makes no writer wait for one it did not
wait for already (run creations excepted: they wait for each other, briefly):

- Each run's events form a chain. An event's hash covers its run, `seq`, type, time and payload
  (the text as stored) and the hash of the run's event before it (`GENESIS` before the first).
  The statement that numbers a write's events on the run's row, which every writer takes first
  anyway, also returns the hash they follow: appending reads nothing more.
- The runs form a chain of their own, ending in one head row: a link when a run is created (its
  first event's hash), and a seal each time a step leaves it waiting for a person or ended (the
  `seq` and hash of its last event then). A deleted run leaves its links behind, a run's events
  cut back leave its seal behind, and a deleted link breaks the chain, whatever counters say.
  Only those writes take the head row: a head moved by every write would make every transaction
  in the database wait for every other one.

A hash chain is not a signature: whoever can rewrite the database can rewrite the chains too. The
chains show a change made behind Signoff's back; a log rewritten hashes and all shows only against
something kept elsewhere: a head printed earlier (`audit_verify.verify(..., since_head=...)`) or an
export.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from signoff.runtime.digests import canonical_json
from signoff.runtime.schema import TERMINAL, WAITING_ON_HUMAN

GENESIS = "0" * 64
"""The `prev` of a run's first event, and of the first link in the chain of runs."""
SEALED_WHEN = WAITING_ON_HUMAN | TERMINAL
"""A step that leaves its run in one of these statuses seals the run's events into the chain of
runs: the run stops moving there (until a person acts, or for good), so a seal costs each run a
few takes of the head row, however many steps it makes."""


def stamp(at: datetime) -> str:
    """An event's time as hashed and exported: UTC, to the microsecond, as both databases keep it."""
    utc = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    return utc.isoformat(timespec="microseconds")


def event_hash(run_id: str, seq: int, type: str, at: datetime, payload: str, prev: str) -> str:
    """The hash of one event, chained to the hash of the run's event before it."""
    content = {"run_id": run_id, "seq": seq, "type": type, "at": stamp(at), "payload": payload, "prev": prev}
    return hashlib.sha256(canonical_json(content).encode()).hexdigest()


def link_hash(position: int, run_id: str, first: str, prev: str) -> str:
    """The hash of a run's link in the chain of runs, chained to the link before it."""
    content = {"position": position, "run_id": run_id, "first": first, "prev": prev}
    return hashlib.sha256(canonical_json(content).encode()).hexdigest()


def seal_hash(position: int, run_id: str, seq: int, last: str, prev: str) -> str:
    """The hash of a seal in the chain of runs: the run's events up to `seq`, the last hashing to `last`."""
    content = {"position": position, "run_id": run_id, "seq": seq, "last": last, "prev": prev}
    return hashlib.sha256(canonical_json(content).encode()).hexdigest()


def chain_hash(position: int, run_id: str, seq: int, event: str, prev: str) -> str:
    """The hash of a run's link at `position` in the chain of runs: its creation's (its event 1,
    hashing to `event`), or a seal's (its events up to `seq`, the last hashing to `event`)."""
    return link_hash(position, run_id, event, prev) if seq == 1 else seal_hash(position, run_id, seq, event, prev)


def chained(run_id: str, first_seq: int, prev: str | None, at: datetime,
            events: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """(prev, hash) of each (type, payload) numbered from `first_seq` after `prev` (None: the run's first)."""
    out = []
    before = prev or GENESIS
    for i, (kind, payload) in enumerate(events):
        digest = event_hash(run_id, first_seq + i, kind, at, payload, before)
        out.append((before, digest))
        before = digest
    return out


@dataclass(frozen=True)
class EventRow:
    """One event of the audit log, as stored."""

    run_id: str
    seq: int
    type: str
    at: datetime
    payload: str
    """The event's JSON as stored: the hash covers this text, not a re-encoding of it."""
    prev: str | None
    hash: str | None


@dataclass(frozen=True)
class Link:
    """A run's place in the chain of runs, made when the run was created."""

    position: int
    first: str
    """The hash of the run's first event (`run_created`)."""
    prev: str
    hash: str


@dataclass(frozen=True)
class Seal:
    """A later link of a run in the chain of runs: its events up to `seq` as they were then."""

    run_id: str
    position: int
    seq: int
    last: str
    """The hash of the run's event `seq`, its last when the seal was made."""
    prev: str
    hash: str


@dataclass(frozen=True)
class RunRow:
    """A run as the chains know it: its link (None: it has none), and the number of events its row
    records (None: the run's row is gone)."""

    run_id: str
    link: Link | None
    events: int | None


@dataclass(frozen=True)
class Head:
    """The end of the chain of runs: how many links (runs created, seals made), and the last one's hash."""

    links: int
    hash: str


@dataclass(frozen=True)
class Unreadable:
    """A line of an export that is no audit record."""

    line: int
    why: str


@dataclass(frozen=True)
class Selection:
    """What a check or an export covers: every run, or one; each run's events from its first at or
    after `since` to its last (the links of every run are kept whatever `since` says)."""

    run_id: str | None = None
    since: datetime | None = None


WHOLE_LOG = Selection()
"""Every run, each from its first event."""

Record = RunRow | Seal | Head | EventRow | Unreadable
"""What a store or an export yields, in this order: the runs (by position), the seals (by position),
the head, then the events grouped by run, in `seq` order."""
