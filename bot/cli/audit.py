"""`signoff audit ...`: check the audit log's hash chains, and export the log to check it later.

The chains show a change made behind Signoff's back; a log rewritten whole, chains and all, shows
only against something kept where the database's writers cannot reach it: the head `verify`
printed (`--since-head`), or an export (see `runtime/audit.py`).

`signoff audit --help` imports this module: the store and the hash chains are imported inside the
functions that read them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import re
from collections.abc import Generator, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from signoff.bot.cli.options import DATABASE_URL, DEMO, load_settings, options
from signoff.bot.cli.outcomes import EXIT_ERROR, EXIT_OK

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from signoff.runtime.audit import Head, Record, Selection
    from signoff.runtime.audit_verify import Problem
    from signoff.runtime.ports import Store
    from signoff.runtime.receipt_check import Proof, StartedEvent

RUN = click.option("--run", "run_id", metavar="RUN", help="Only this run.")


def _head(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not re.fullmatch(r"[0-9a-f]{64}", value):
        raise click.BadParameter(f"{value!r} is not a head: `signoff audit verify` prints one, 64 hex digits",
                                 ctx, param)
    return value


def _public_keys(ctx: click.Context, param: click.Parameter, value: tuple[Path, ...]) -> list[Ed25519PublicKey]:
    from signoff.receipts import read_public_key

    keys = []
    for path in value:
        try:
            keys.append(read_public_key(path.read_bytes()))
        except ValueError:
            raise click.BadParameter(f"{path} holds no Ed25519 public key in PEM "
                                     "(`signoff receipts public-key` prints one)", ctx, param) from None
    return keys


class Tally:
    """The records passing through, counted; the head of the chain of runs, once it has passed; and
    the receipts and ledger calls among them, set aside (`proofs`) for the receipts' check."""

    def __init__(self, records: Iterable[Record | Proof]) -> None:
        self.records = records
        self.runs = self.events = 0
        self.head: Head | None = None
        self.proofs: list[Proof] = []
        self.started: list[StartedEvent] = []
        """The call starts the audit log records (`execution_started`), checked against the receipts."""

    def __iter__(self) -> Iterator[Record]:
        from signoff.runtime.audit import EventRow, Head, RunRow
        from signoff.runtime.receipt_check import ExecutionRow, ReceiptRow, started_event

        for record in self.records:
            match record:
                case ReceiptRow() | ExecutionRow():
                    self.proofs.append(record)
                    continue
                case RunRow():
                    self.runs += 1
                case EventRow():
                    self.events += 1
                    start = started_event(record.run_id, record.type, record.payload)
                    if start is not None:
                        self.started.append(start)
                case Head():
                    self.head = record
            yield record


@click.command("verify")
@RUN
@click.option("--file", "path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Check this export (from `signoff audit export`) instead of the database.")
@click.option("--since-head", "since_head", callback=_head, metavar="HASH",
              help="A head printed earlier: fail unless the chain of runs still passes through it.")
@click.option("--public-key", "public_keys", multiple=True, callback=_public_keys,
              type=click.Path(exists=True, dir_okay=False, path_type=Path), metavar="PEM",
              help="Check every receipt too, trusting only this public key (repeat for several; "
                   "`signoff receipts public-key` prints them).")
@options(DATABASE_URL, DEMO)
def audit_verify(run_id: str | None, path: Path | None, since_head: str | None, public_keys: list[Ed25519PublicKey],
                 database_url: str | None, demo: bool) -> int:
    """Recompute every hash of the audit log.

    Each run's events, and the chain of runs (a link per run created, and a seal of its events each
    time it stopped for a person or ended). Exits 0 when all of them match, printing the chain's
    head to keep elsewhere; 1 naming the first event that does not (its run and seq) and what is
    wrong: edited, missing, reordered, added, deleted run, unchained, or rewritten (the chain no
    longer passes through the head given with `--since-head`).

    With `--public-key`, every receipt is checked as well, trusting only the keys given: signed by
    one of them and unchanged, and every call the ledger says started backed by a receipt for
    exactly that call; 1 naming each receipt that is not (its approval).
    """
    if since_head is not None and run_id is not None:
        raise click.UsageError("--since-head checks the whole chain of runs: drop --run")
    if path is None:
        return _verify_store(run_id, since_head, public_keys, database_url, demo)
    if database_url is not None or demo:
        raise click.UsageError("--file is checked without a database: drop --database-url and --demo")
    return _verify_file(path, run_id, since_head, public_keys)


def _verify_file(path: Path, run_id: str | None, since_head: str | None,
                 public_keys: list[Ed25519PublicKey]) -> int:
    """`audit verify --file`: an export's chains and receipts, checked without a database."""
    from signoff.runtime.audit import Head
    from signoff.runtime.audit_export import read_export
    from signoff.runtime.audit_verify import verify

    with path.open(encoding="utf-8") as lines:
        selection, records = read_export(lines)
        if run_id is not None:
            selection = dataclasses.replace(selection, run_id=run_id)
            records = (r for r in records if not isinstance(r, Head) and getattr(r, "run_id", run_id) == run_id)
        tally = Tally(records)
        problem = verify(tally, selection, since_head)
    if run_id is not None and not tally.runs and not tally.events:
        raise click.ClickException(f"no run {run_id!r} in {path}")
    chains = _verdict(problem, tally, selection, str(path))
    return max(chains, _receipts_verdict(tally.proofs, tally.started, public_keys))


def _verify_store(run_id: str | None, since_head: str | None, public_keys: list[Ed25519PublicKey],
                  database_url: str | None, demo: bool) -> int:
    """`audit verify` of the database's log: its chains, and its receipts with `--public-key`."""
    from signoff.runtime.audit import Selection
    from signoff.runtime.audit_verify import verify

    selection = Selection(run_id=run_id)
    with _store(database_url, demo) as (store, where):
        if store is None:
            click.echo(f"no runs yet in {where}: nothing to verify")
            return EXIT_OK
        with _records(store, selection, where) as records:
            tally = Tally(records)
            problem = verify(tally, selection, since_head)
        proofs = store.proofs(run_id) if public_keys else []
    chains = _verdict(problem, tally, selection, where, since_head)
    return max(chains, _receipts_verdict(proofs, tally.started, public_keys))


def _receipts_verdict(proofs: list[Proof], started: list[StartedEvent], public_keys: list[Ed25519PublicKey]) -> int:
    """Each receipt problem, named; or how many receipts checked out (nothing without `--public-key`)."""
    from signoff.runtime.receipt_check import ReceiptRow, receipt_problems

    receipts = sum(isinstance(proof, ReceiptRow) for proof in proofs)
    if not public_keys:
        if receipts:
            click.echo(f"{receipts} {'receipt' if receipts == 1 else 'receipts'} not checked: "
                       "give the public key with --public-key")
        return EXIT_OK
    problems = receipt_problems(proofs, public_keys, started)
    for problem in problems:
        click.echo(f"does not match: {problem}")
    if problems:
        return EXIT_ERROR
    calls = len(proofs) - receipts
    click.echo(f"receipts intact: {receipts} {'receipt' if receipts == 1 else 'receipts'} signed by a key given, "
               f"{calls} {'call' if calls == 1 else 'calls'} started, each with its receipt")
    return EXIT_OK


def _verdict(problem: Problem | None, tally: Tally, selection: Selection, where: str,
             since_head: str | None = None) -> int:
    if problem is not None:
        click.echo(f"does not match: {problem}")
        return EXIT_ERROR
    words = f"intact: {tally.runs} {'run' if tally.runs == 1 else 'runs'}, {tally.events} events in {where}"
    if selection.since is not None:
        words += f" (each run's events from {selection.since.isoformat()})"
    if tally.head is not None and selection.run_id is None:
        # Worth keeping elsewhere: a log rewritten, hashes and all, no longer passes through it.
        words += f"; the chain of runs ends at #{tally.head.links} {tally.head.hash}"
    if since_head is not None:
        words += f", through {since_head}"
    click.echo(words)
    return EXIT_OK


def _moment(ctx: click.Context, param: click.Parameter, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not an ISO 8601 time (e.g. 2026-03-01 or 2026-03-01T12:00:00Z)",
                                 ctx, param) from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


@click.command("export")
@click.option("--since", callback=_moment, metavar="ISO",
              help="Each run's events from its first at or after this time (UTC unless it names a zone); "
                   "every run's link in the chain of runs is exported all the same.")
@RUN
@options(DATABASE_URL, DEMO)
def audit_export(since: datetime | None, run_id: str | None, database_url: str | None, demo: bool) -> int:
    """Write the audit log with its hashes, as JSON lines.

    `signoff audit verify --file` checks the file later without the database: keep it where the
    database's writers cannot change it.
    """
    from signoff.runtime.audit import Selection
    from signoff.runtime.audit_export import export_lines

    selection = Selection(run_id=run_id, since=since)
    with _store(database_url, demo) as (store, where):
        if store is None:
            click.echo(f"no runs yet in {where}: nothing to export", err=True)
            return EXIT_OK
        with _records(store, selection, where) as records:
            for line in export_lines(records, selection, store.now(), store.proofs(run_id)):
                click.echo(line)
    return EXIT_OK


@click.command("break-glass")
@options(DATABASE_URL, DEMO)
def audit_break_glass(database_url: str | None, demo: bool) -> int:
    """List the calls approved by breaking the glass that nobody has reviewed yet.

    Each with who broke it, when, why and by when its review is owed; OVERDUE past that. Exits 1
    when any is overdue (for a cron job or a check), 0 otherwise.
    """
    from signoff.bot.cli.rendering import one_line
    from signoff.runtime.break_glass import review_by

    with _store(database_url, demo) as (store, where):
        unreviewed = store.unreviewed_glass(limit=1000) if store is not None else []
        now = store.now() if store is not None else datetime.now(UTC)
    if not unreviewed:
        click.echo(f"no unreviewed break-glass in {where}")
        return EXIT_OK
    overdue = 0
    for approval in unreviewed:
        glass, due = approval.glass or {}, review_by(approval)
        late = due is not None and due < now
        overdue += late
        click.echo(f"{approval.approval_id}  {approval.tool} ({approval.key})  by {glass.get('by')} at "
                   f"{glass.get('at')}  review by {glass.get('review_by')}{'  OVERDUE' if late else ''}\n"
                   f"    reason: {one_line(glass.get('reason'), 500)}")
    click.echo(f"{len(unreviewed)} unreviewed break-glass, {overdue} overdue, in {where}")
    return EXIT_ERROR if overdue else EXIT_OK


@contextlib.contextmanager
def _store(database_url: str | None, demo: bool) -> Iterator[tuple[Store | None, str]]:
    """The store to read (None: the zero-configuration file does not exist yet), and where it is."""
    from signoff.bot.cli.stored import read_store
    from signoff.bot.wiring import masked

    settings = load_settings({"database_url": database_url}, demo=demo)
    store = read_store(settings.database_url, demo)
    try:
        yield store, masked(settings.database_url)
    finally:
        if store is not None:
            store.close()


@contextlib.contextmanager
def _records(store: Store, selection: Selection, where: str) -> Iterator[Iterator[Record]]:
    """The selected records; for one run, only if the database knows it (its row or its link)."""
    from signoff.runtime.audit import RunRow

    records: Generator[Record, None, None] = store.audit_records(selection)
    with contextlib.closing(records):
        first = next(records, None)
        if selection.run_id is not None and not isinstance(first, RunRow):
            raise click.ClickException(f"no run {selection.run_id!r} in {where}")
        yield itertools.chain([first] if first is not None else [], records)


@click.group(commands=[audit_verify, audit_export, audit_break_glass])
def audit() -> None:
    """Check the audit log's hash chains; export the log to check it later without the database; list
    unreviewed break-glass."""
