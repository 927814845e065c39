"""The audit log's export format: JSON lines, a header saying what was selected, then each record
(`audit.Record`), then each receipt and each call the ledger says started (`receipt_check.Proof`),
written by `export_lines` and read back by `read_export`.

Pure: no I/O; `signoff audit export` writes the lines, `signoff audit verify --file` reads them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from signoff.runtime.audit import EventRow, Head, Link, Record, RunRow, Seal, Selection, Unreadable, stamp
from signoff.runtime.digests import canonical_json
from signoff.runtime.errors import IncompatibleState
from signoff.runtime.receipt_check import ExecutionRow, Proof, ReceiptRow

EXPORT_FORMAT = 3
"""3 added receipts and the ledger's calls; 2 added seals (and named the head's count `links`);
formats 1 and 2 are still read."""


def export_lines(records: Iterable[Record], selection: Selection, exported_at: datetime,
                 proofs: Iterable[Proof] = ()) -> Iterator[str]:
    """JSON lines: a header saying what was selected, then each record (see `Record`), then each
    receipt and each call the ledger says started (`proofs`)."""
    yield canonical_json({"record": "export", "format": EXPORT_FORMAT, "exported_at": stamp(exported_at),
                          "run_id": selection.run_id,
                          "since": stamp(selection.since) if selection.since is not None else None})
    for record in records:
        yield canonical_json(_exported(record))
    for proof in proofs:
        match proof:
            case ReceiptRow():
                yield canonical_json({"record": "receipt", "receipt": proof.receipt})
            case ExecutionRow():
                yield canonical_json({"record": "execution", "run_id": proof.run_id, "key": proof.key,
                                      "tool": proof.tool, "digest": proof.digest, "status": proof.status,
                                      "approval_id": proof.approval_id})


def exported_event(event: EventRow) -> dict[str, Any]:
    """An event as an export writes it: its fields, its time stamped, and its chain hashes."""
    return {"record": "event", "run_id": event.run_id, "seq": event.seq, "type": event.type,
            "at": stamp(event.at), "payload": event.payload, "prev": event.prev, "hash": event.hash}


def _exported(record: Record) -> dict[str, Any]:
    match record:
        case EventRow():
            return exported_event(record)
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


def read_export(lines: Iterable[str]) -> tuple[Selection, Iterator[Record | Proof]]:
    """What an export selected, and its records (a line that is none reads as `Unreadable`).

    Raises `IncompatibleState` when the first line is no header of a format this Signoff reads."""
    numbered = enumerate(lines, start=1)
    header = _parsed(next(numbered, (1, ""))[1])
    if not isinstance(header, dict) or header.get("record") != "export":
        raise IncompatibleState("not a Signoff audit export (`signoff audit export` writes one)")
    form = header.get("format")
    if not isinstance(form, int) or form not in range(1, EXPORT_FORMAT + 1):
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
    "receipt": {"receipt": dict},
    "execution": {"run_id": str, "key": str, "tool": str, "digest": str, "status": str, "approval_id": str | None},
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


def _record(number: int, line: str, form: int) -> Record | Proof:
    data = _parsed(line)
    kinds = ("event", "run", "seal", "head") + (("receipt", "execution") if form >= 3 else ())
    if not isinstance(data, dict) or data.get("record") not in kinds:
        return Unreadable(number, "not JSON" if data is None else "no record of a known kind")
    kind = data["record"]
    if form == 1 and kind == "head":  # format 1 counted the links as runs: it had no seals
        data["links"] = data.pop("runs", None)
    wrong = _misshapen(data, kind) or (_misshapen(data["link"], "link") if kind == "run" and data["link"] else None)
    if wrong is not None:
        return Unreadable(number, f"its {wrong!r} is missing or not a {kind}'s")
    if kind == "receipt":
        return ReceiptRow(data["receipt"])
    if kind == "execution":
        return ExecutionRow(**{k: data[k] for k in _FIELDS["execution"]})
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
