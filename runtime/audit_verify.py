"""Checking the audit log's hash chains: the first place where the records a store or an export
yields do not match their hashes (`verify`), and what is wrong there (`Problem`).

Pure: no I/O, no SQL; the stores, `signoff audit` and the tests share this one definition. What
each hash covers is `audit.py`'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from signoff.runtime.audit import (
    GENESIS,
    WHOLE_LOG,
    EventRow,
    Head,
    Record,
    RunRow,
    Seal,
    Selection,
    Unreadable,
    event_hash,
    link_hash,
    seal_hash,
)
from signoff.runtime.receipt_check import ExecutionRow, Proof, ReceiptRow

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


def verify(records: Iterable[Record | Proof], selection: Selection = WHOLE_LOG,
           since_head: str | None = None) -> Problem | None:
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

    def take(self, record: Record | Proof) -> None:
        match record:
            case ReceiptRow() | ExecutionRow():
                pass  # an export's receipts: `receipt_check` checks them, against the keys given
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
