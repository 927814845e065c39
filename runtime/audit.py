"""The audit log's hash chains: what a hash covers, how the chains are checked, and the export
format. Pure: no I/O, no SQL; the stores, `signoff audit` and the tests share this one definition.

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
something kept elsewhere: a head printed earlier (`verify(..., since_head=...)`) or an export.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from signoff.runtime.digests import canonical_json
from signoff.runtime.errors import IncompatibleState
from signoff.runtime.schema import TERMINAL, WAITING_ON_HUMAN

GENESIS = "0" * 64
"""The `prev` of a run's first event, and of the first link in the chain of runs."""
EXPORT_FORMAT = 2
"""2 added seals (and named the head's count `links`); format 1 is still read."""
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

ProblemKind = Literal["edited", "missing", "reordered", "added", "deleted run", "unchained", "rewritten"]


@dataclass(frozen=True)
class Problem:
    """The first place where the audit log does not match its hashes."""

    run_id: str | None
    seq: int | None
    kind: ProblemKind
    detail: str
    line: int | None = None
    """The export's line that is no record at all."""

    def __str__(self) -> str:
        where = ", ".join(filter(None, [f"run {self.run_id}" if self.run_id else "",
                                        f"event {self.seq}" if self.seq is not None else ""]))
        if self.line is not None:
            where = f"line {self.line}"
        return f"{where or 'the chain of runs'}: {self.kind}: {self.detail}"


def verify(records: Iterable[Record], selection: Selection = WHOLE_LOG, since_head: str | None = None) -> Problem | None:
    """The first problem of the audit log in `records` (by when its run was created, then `seq`),
    or None when every hash matches. Each run's events are held only while that run is checked.

    Args:
        since_head: the hash of a head printed earlier (`Head.hash`): the chain of runs must still
            pass through it, or what came before it was rewritten (hashes and all) or cut back.
    """
    check = _Check(selection, since_head)
    for record in records:
        check.take(record)
    return check.first()


class _Check:
    def __init__(self, selection: Selection, since_head: str | None) -> None:
        self.selection = selection
        self.since_head = since_head
        self.runs: dict[str, RunRow] = {}
        self.seals: dict[str, list[Seal]] = {}
        self.head: Head | None = None
        self.group: list[EventRow] = []
        self.done: set[str] = set()
        self.firsts: dict[str, str | None] = {}
        self.problems: list[tuple[tuple[float, str, int], Problem]] = []

    def take(self, record: Record) -> None:
        match record:
            case RunRow():
                self.runs[record.run_id] = record
            case Seal():
                self.seals.setdefault(record.run_id, []).append(record)
            case Head():
                self.head = record
            case EventRow():
                if self.group and self.group[0].run_id != record.run_id:
                    self._check_group()
                if not self.group and record.run_id in self.done:
                    self._add(Problem(record.run_id, record.seq, "reordered", "its events are not together"))
                self.group.append(record)
            case Unreadable():
                self.problems.append(((-1, "", record.line), Problem(
                    None, None, "edited", f"it is no audit record ({record.why})", line=record.line)))

    def first(self) -> Problem | None:
        if self.group:
            self._check_group()
        for run in self.runs.values():
            # Its link holds its first event's hash: a run with a link has events, whatever its row counts.
            if (run.run_id not in self.done and self.selection.since is None and run.events is not None
                    and (run.events or run.link is not None)):
                counted = f" (its row counts {run.events})" if run.events else ""
                self._add(Problem(run.run_id, 1, "missing", f"all of its events are gone{counted}"))
        self._check_links()
        return min(self.problems, key=lambda found: found[0])[1] if self.problems else None

    def _add(self, problem: Problem) -> None:
        run = self.runs.get(problem.run_id or "")
        position = run.link.position if run is not None and run.link is not None else float("inf")
        self.problems.append(((position, problem.run_id or "", problem.seq or 0), problem))

    def _check_group(self) -> None:
        rows, self.group = self.group, []
        run_id = rows[0].run_id
        self.done.add(run_id)
        self.firsts[run_id] = rows[0].hash if rows[0].seq == 1 else None
        end = _end_problem(rows[-1], self.runs.get(run_id))
        # The row's count names the whole of a cut it was not lowered for; the seals, one it was.
        problem = (_rows_problem(rows, from_start=self.selection.since is None)
                   or (end if end is not None and end.kind == "missing" else None)
                   or _sealed_problem(rows, self.seals.get(run_id, [])) or end)
        if problem is not None:
            self._add(problem)

    def _check_links(self) -> None:
        for run in self.runs.values():
            if run.link is None and run.events is not None:
                self._add(Problem(run.run_id, None, "unchained", "it is not in the chain of runs (added by hand)"))
        links: list[RunRow | Seal] = [run for run in self.runs.values() if run.link is not None]
        links += [seal for seals in self.seals.values() for seal in seals]
        links.sort(key=_position)
        whole = self.selection.run_id is None
        position, prev = 0, GENESIS
        passed = {GENESIS}
        for link in links:
            expected = (position + 1, prev) if whole else None
            problem = (_link_problem(link, self.firsts.get(link.run_id), expected) if isinstance(link, RunRow)
                       else _seal_problem(link, self.runs.get(link.run_id), expected))
            if problem is not None:
                self._add(problem)
            position, prev = _position(link), _hash(link)
            passed.add(prev)
        if whole:
            self._check_head(position, prev)
            if self.since_head is not None and self.since_head not in passed:
                self.problems.append(((float("inf"), "", 0), Problem(
                    None, None, "rewritten", f"it does not pass through the head {self.since_head} kept earlier: "
                                             "what came before that head was rewritten, or cut back")))

    def _check_head(self, position: int, last: str) -> None:
        if self.head is None:
            problem = Problem(None, None, "missing", "its head is gone")
        elif self.head.links > position:
            problem = Problem(None, None, "deleted run", f"{_gone('link', position + 1, self.head.links)} from its end")
        elif (self.head.links, self.head.hash) != (position, last):
            problem = Problem(None, None, "edited", f"its head does not match link #{position}")
        else:
            return
        self.problems.append(((position + 1, "", 0), problem))


def _position(link: RunRow | Seal) -> int:
    if isinstance(link, Seal):
        return link.position
    assert link.link is not None
    return link.link.position


def _hash(link: RunRow | Seal) -> str:
    if isinstance(link, Seal):
        return link.hash
    assert link.link is not None
    return link.link.hash


def _link_problem(run: RunRow, first: str | None, expected: tuple[int, str] | None) -> Problem | None:
    """What is wrong with a run's link; `expected`: the position and prev that follow the link before."""
    link = run.link
    assert link is not None
    if expected is not None and link.position != expected[0]:
        return Problem(run.run_id, None, "deleted run",
                       f"{_gone('link', expected[0], link.position - 1)} from the chain of runs before it")
    if link_hash(link.position, run.run_id, link.first, link.prev) != link.hash:
        return Problem(run.run_id, None, "edited", f"its link in the chain of runs (#{link.position}) was changed")
    if expected is not None and link.prev != expected[1]:
        return Problem(run.run_id, None, "reordered", f"its link (#{link.position}) does not follow the one before")
    if run.events is None:
        return Problem(run.run_id, None, "deleted run", f"run #{link.position} of the chain of runs is gone")
    if first is not None and first != link.first:
        return Problem(run.run_id, 1, "edited", "its first event is not the one its link recorded")
    return None


def _seal_problem(seal: Seal, run: RunRow | None, expected: tuple[int, str] | None) -> Problem | None:
    """What is wrong with a seal as a link of the chain of runs (its events are checked with them)."""
    if expected is not None and seal.position != expected[0]:
        return Problem(seal.run_id, None, "deleted run",
                       f"{_gone('link', expected[0], seal.position - 1)} from the chain of runs before its seal")
    if seal_hash(seal.position, seal.run_id, seal.seq, seal.last, seal.prev) != seal.hash:
        return Problem(seal.run_id, None, "edited", f"its seal in the chain of runs (#{seal.position}) was changed")
    if expected is not None and seal.prev != expected[1]:
        return Problem(seal.run_id, None, "reordered", f"its seal (#{seal.position}) does not follow the link before")
    if run is None or run.events is None:
        return Problem(seal.run_id, None, "deleted run", f"the run sealed at #{seal.position} is gone")
    return None


def _sealed_problem(rows: list[EventRow], seals: list[Seal]) -> Problem | None:
    """Where one run's rows (each following the one before) fall short of what its seals recorded."""
    if not seals:
        return None
    run_id, last = rows[0].run_id, rows[-1].seq
    furthest = max(seals, key=lambda seal: seal.seq)
    if furthest.seq > last:
        return Problem(run_id, last + 1, "missing", f"{_gone('event', last + 1, furthest.seq)}: the run was "
                                                    f"sealed at event {furthest.seq} (#{furthest.position})")
    held = {row.seq: row.hash for row in rows}
    for seal in sorted(seals, key=lambda seal: seal.seq):
        if seal.seq in held and held[seal.seq] != seal.last:
            return Problem(run_id, seal.seq, "edited", f"the run's events were rewritten: event {seal.seq} is not "
                                                       f"the one sealed at #{seal.position}")
    return None


def _gone(noun: str, first: int, last: int) -> str:
    mark = "" if noun == "event" else "#"
    return f"{noun} {mark}{first} is gone" if first == last else f"{noun}s {mark}{first} to {mark}{last} are gone"


def _rows_problem(rows: list[EventRow], *, from_start: bool) -> Problem | None:
    """The first event of one run's rows that does not follow from the one before it."""
    seq = 1 if from_start else rows[0].seq
    prev = GENESIS if seq == 1 else rows[0].prev
    for row in rows:
        if row.seq > seq and any(r.seq == seq for r in rows):  # an export's lines moved
            return Problem(row.run_id, row.seq, "reordered", f"event {row.seq} comes before event {seq}")
        if row.seq > seq:
            return Problem(row.run_id, seq, "missing", f"event {seq} is gone (the next is {row.seq})")
        if row.seq < seq:
            return Problem(row.run_id, row.seq, "reordered", f"event {row.seq} comes after event {seq - 1}")
        if _rehashed(row, row.seq, row.prev) != row.hash:
            return _unsealed(row, rows)
        if row.prev != prev:
            return _unlinked(row, rows)
        seq, prev = row.seq + 1, row.hash
    return None


def _rehashed(row: EventRow, seq: int, prev: str | None) -> str:
    return event_hash(row.run_id, seq, row.type, row.at, row.payload, prev or "")


def _unsealed(row: EventRow, rows: list[EventRow]) -> Problem:
    """Why a row's content does not give its hash: it was moved, or it was edited."""
    hashes = {r.hash for r in rows}
    written_as = next((s for s in range(1, rows[0].seq + len(rows) + 1)
                       if s != row.seq and _rehashed(row, s, row.prev) == row.hash), None)
    if written_as is not None:
        if row.prev in hashes or row.prev == GENESIS:
            return Problem(row.run_id, row.seq, "reordered", f"event {row.seq} was written as event {written_as}")
        return Problem(row.run_id, row.seq, "missing", f"event {row.seq} was written as event {written_as}: "
                                                       "an event before it is gone and the rest renumbered")
    holder = next((r for r in rows if r is not row and _rehashed(row, r.seq, r.prev) == r.hash), None)
    if holder is not None:
        return Problem(row.run_id, row.seq, "reordered", f"event {row.seq} holds what was written as event "
                                                         f"{holder.seq}")
    return Problem(row.run_id, row.seq, "edited", "its type, time, payload or hash is not what was written")


def _unlinked(row: EventRow, rows: list[EventRow]) -> Problem:
    """Why a row that matches its own hash does not follow the row before it."""
    after = next((r for r in rows if r.hash == row.prev), None)
    if after is not None:
        return Problem(row.run_id, row.seq, "reordered", f"event {row.seq} was written after event {after.seq}")
    if row.seq == 1:
        return Problem(row.run_id, 1, "edited", "it does not start the run's chain")
    return Problem(row.run_id, row.seq - 1, "edited", f"it was rewritten: event {row.seq} follows another event")


def _end_problem(last: EventRow, run: RunRow | None) -> Problem | None:
    """What the run's row says about the end of its chain that its last row does not bear out."""
    if run is None or run.events is None:
        return Problem(last.run_id, None, "deleted run", "its events remain but the run is gone")
    if run.events > last.seq:
        return Problem(last.run_id, last.seq + 1, "missing", _gone("event", last.seq + 1, run.events))
    if run.events < last.seq:
        return Problem(last.run_id, run.events + 1, "added", f"the run records {run.events} events, not {last.seq}")
    return None


# -- the export format ---------------------------------------------------------------------------


def export_lines(records: Iterable[Record], selection: Selection, exported_at: datetime) -> Iterator[str]:
    """JSON lines: a header saying what was selected, then each record (see `Record`)."""
    yield canonical_json({"record": "export", "format": EXPORT_FORMAT, "exported_at": stamp(exported_at),
                          "run_id": selection.run_id,
                          "since": stamp(selection.since) if selection.since is not None else None})
    for record in records:
        yield canonical_json(_exported(record))


def _exported(record: Record) -> dict[str, Any]:
    match record:
        case EventRow():
            return {"record": "event", "run_id": record.run_id, "seq": record.seq, "type": record.type,
                    "at": stamp(record.at), "payload": record.payload, "prev": record.prev, "hash": record.hash}
        case RunRow():
            link = record.link
            return {"record": "run", "run_id": record.run_id, "events": record.events,
                    "link": None if link is None else {"position": link.position, "first": link.first,
                                                       "prev": link.prev, "hash": link.hash}}
        case Seal():
            return {"record": "seal", "run_id": record.run_id, "position": record.position, "seq": record.seq,
                    "last": record.last, "prev": record.prev, "hash": record.hash}
        case Head():
            return {"record": "head", "links": record.links, "hash": record.hash}
        case Unreadable():
            raise AssertionError("an unreadable line is never exported")


def read_export(lines: Iterable[str]) -> tuple[Selection, Iterator[Record]]:
    """What an export selected, and its records (a line that is none reads as `Unreadable`).

    Raises `IncompatibleState` when the first line is no header of a format this Signoff reads."""
    numbered = enumerate(lines, start=1)
    header = _parsed(next(numbered, (1, ""))[1])
    if not isinstance(header, dict) or header.get("record") != "export":
        raise IncompatibleState("not a Signoff audit export (`signoff audit export` writes one)")
    form = header.get("format")
    if form not in (1, EXPORT_FORMAT):
        raise IncompatibleState(f"audit export format {form!r}; this Signoff reads 1 to {EXPORT_FORMAT}")
    try:
        since = datetime.fromisoformat(header["since"]) if header.get("since") else None
    except (TypeError, ValueError):
        raise IncompatibleState(f"the export's header has no time in `since`: {header.get('since')!r}") from None
    selection = Selection(run_id=header.get("run_id"), since=since)
    return selection, (_record(number, line, form) for number, line in numbered if line.strip())


_FIELDS: dict[str, dict[str, Any]] = {
    "event": {"run_id": str, "seq": int, "type": str, "at": str, "payload": str, "prev": str | None,
              "hash": str | None},
    "run": {"run_id": str, "events": int | None, "link": dict | None},
    "seal": {"run_id": str, "position": int, "seq": int, "last": str, "prev": str, "hash": str},
    "head": {"links": int, "hash": str},
    "link": {"position": int, "first": str, "prev": str, "hash": str},
}


def _parsed(line: str) -> Any:
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        return None


def _misshapen(data: dict[str, Any], kind: str) -> str | None:
    """The first field of `data` missing or of the wrong type for a record of `kind`."""
    return next((name for name, types in _FIELDS[kind].items() if not isinstance(data.get(name, ...), types)),
                None)


def _record(number: int, line: str, form: int) -> Record:
    data = _parsed(line)
    if not isinstance(data, dict) or data.get("record") not in ("event", "run", "seal", "head"):
        return Unreadable(number, "not JSON" if data is None else "no record of a known kind")
    kind = data["record"]
    if form == 1 and kind == "head":  # format 1 counted the links as runs: it had no seals
        data["links"] = data.pop("runs", None)
    wrong = _misshapen(data, kind) or (_misshapen(data["link"], "link") if kind == "run" and data["link"] else None)
    if wrong is not None:
        return Unreadable(number, f"its {wrong!r} is missing or not a {kind}'s")
    if kind == "head":
        return Head(links=data["links"], hash=data["hash"])
    if kind == "seal":
        return Seal(**{k: data[k] for k in _FIELDS["seal"]})
    if kind == "run":
        link = data["link"]
        return RunRow(run_id=data["run_id"], events=data["events"],
                      link=None if link is None else Link(**{k: link[k] for k in _FIELDS["link"]}))
    try:
        at = datetime.fromisoformat(data["at"])
    except ValueError:
        return Unreadable(number, f"its time {data['at']!r} is not ISO 8601")
    return EventRow(run_id=data["run_id"], seq=data["seq"], type=data["type"], at=at, payload=data["payload"],
                    prev=data["prev"], hash=data["hash"])
