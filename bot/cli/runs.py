"""`signoff runs ...`: list, show, export, resume and replay stored runs."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import click

from signoff.bot.cli.deciding import drive
from signoff.bot.cli.options import (
    DATABASE_URL,
    DEMO,
    DEMO_DATABASE_URL,
    MCP_CONFIG,
    OUTBOX,
    POLICY,
    QUIET,
    TOOLS,
    USER,
    deciding_command,
    is_zero_config,
    load_settings,
    make_console,
    options,
)
from signoff.bot.cli.outcomes import EXIT_ERROR, EXIT_OK, Interrupted, finish
from signoff.bot.cli.rendering import one_line
from signoff.bot.cli.replays import summary_line, verdict_lines
from signoff.bot.cli.running import IN_TERMINAL, TERMINAL_SOURCE, resume_hint, terminal_runner
from signoff.bot.cli.story import dumps, run_records, story_lines
from signoff.bot.settings import Settings
from signoff.bot.wiring import load_approval_policy, load_tools, open_store
from signoff.bot.words import model_label
from signoff.runtime.adapters.db import check_writable, is_default_sqlite, masked, sqlite_file
from signoff.runtime.adapters.sql import SqlStore
from signoff.runtime.approval_policy import ApprovalPolicy
from signoff.runtime.errors import ConfigError, SignoffError
from signoff.runtime.loop import Caller
from signoff.runtime.records import RunRecord
from signoff.runtime.replay import Replayed, replay
from signoff.runtime.state import TERMINAL, secret_names
from signoff.tools.base import Tool


def runs_store(database_url: str | None, demo: bool, tools: str | None = None,
               policy: str | None = None) -> tuple[Settings, SqlStore | None]:
    settings = load_settings({"database_url": database_url, "tools": tools, "policy": policy}, demo=demo)
    return settings, read_store(settings.database_url, demo)


def read_store(database_url: str, demo: bool) -> SqlStore | None:
    """The store to read runs from; None when it is the zero-configuration file and that does not
    exist yet. Reading never creates a database: any other missing file is an error."""
    path = sqlite_file(database_url)
    if path is not None and not path.exists():
        if is_zero_config(database_url, demo):
            return None
        return open_store(database_url)  # raises, naming the missing file
    # The zero-configuration file is kept current as `signoff run` would; any other needs `db upgrade`.
    return open_store(database_url, auto_upgrade=is_zero_config(database_url, demo))


def the_run(store: SqlStore | None, run_id: str, database_url: str, demo: bool = False) -> RunRecord:
    run = store.get_run(run_id) if store is not None else None
    if run is None:
        where = masked(database_url) + ("" if store is not None else " (it does not exist yet)")
        hint = "; it is in the demo database: add --demo" if not demo and _in_demo(database_url, run_id) else ""
        raise click.ClickException(f"no run {run_id!r} in {where}{hint}")
    return run


def _demo_store(database_url: str) -> SqlStore | None:
    """The demo's database, when `database_url` is the default one and the demo has left a file."""
    demo_file = sqlite_file(DEMO_DATABASE_URL)
    if not is_default_sqlite(database_url) or demo_file is None or not demo_file.exists():
        return None
    try:
        return read_store(DEMO_DATABASE_URL, demo=True)
    except SignoffError:  # only a hint: a demo file we cannot read is no reason to fail
        return None


def _in_demo(database_url: str, run_id: str) -> bool:
    store = _demo_store(database_url)
    try:
        return store is not None and store.get_run(run_id, history=False) is not None
    finally:
        if store is not None:
            store.close()


def _demo_has_runs(database_url: str) -> bool:
    store = _demo_store(database_url)
    try:
        return store is not None and bool(store.list_runs(limit=1))
    finally:
        if store is not None:
            store.close()


@click.command("list")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--status", help="Only runs with this status, e.g. awaiting_approval.")
@click.option("--requester", help="Only runs started by this user.")
@DATABASE_URL
@DEMO
def runs_list(limit: int, status: str | None, requester: str | None, database_url: str | None, demo: bool) -> int:
    """The most recent runs, newest first."""
    settings, store = runs_store(database_url, demo)
    found = store.list_runs(requester=requester, status=status, limit=limit) if store is not None else []
    if not found:
        words = "no runs yet" if store is None else "no runs"
        if not demo and _demo_has_runs(settings.database_url):
            words += f"; demo runs are in ./{sqlite_file(DEMO_DATABASE_URL)}: add --demo"
        click.echo(words)
        return EXIT_OK
    rows = [("RUN", "STATUS", "REQUESTER", "STEPS", "UPDATED", "GOAL")]
    rows += [(r.run_id, r.status, r.requester, "?" if r.unreadable else str(r.state.get("steps", 0)),
              f"{r.updated_at:%Y-%m-%d %H:%M}", one_line(r.goal, 60)) for r in found]
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    for row in rows:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(row[:5], widths, strict=True)) + "  " + row[5])
    for run in (r for r in found if r.unreadable):
        click.echo(f"warning: {run.unreadable}", err=True)
    return EXIT_OK


@click.command("show")
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: run, history, events, approvals, executions.")
@options(DATABASE_URL, TOOLS, DEMO)
def runs_show(run_id: str, as_json: bool, database_url: str | None, tools: str | None, demo: bool) -> int:
    """A run's story: what the model saw and did, the audit events, approvals and executions.

    Secret-looking arguments (password, token, ...) are redacted.
    """
    settings, store = runs_store(database_url, demo, tools)
    run = the_run(store, run_id, settings.database_url, demo)
    assert store is not None  # the run was found in it
    record = run_records(store, run, secret_keys(settings))
    if as_json:
        click.echo(dumps(record, indent=2))
    else:
        click.echo("\n".join(story_lines(record)))
    return EXIT_OK


@click.command("export")
@click.argument("run_id")
@options(DATABASE_URL, TOOLS, DEMO)
def runs_export(run_id: str, database_url: str | None, tools: str | None, demo: bool) -> int:
    """JSON lines, each {"record": kind, "data": {...}}: the run, then each history entry, event,
    approval and execution. Secret-looking values are redacted."""
    settings, store = runs_store(database_url, demo, tools)
    run = the_run(store, run_id, settings.database_url, demo)
    assert store is not None  # the run was found in it
    record = run_records(store, run, secret_keys(settings))
    click.echo(dumps({"record": "run", "data": record["run"]}))
    for kind, key in (("history", "history"), ("event", "events"), ("approval", "approvals"),
                      ("execution", "executions")):
        for item in record[key]:
            click.echo(dumps({"record": kind, "data": item}))
    return EXIT_OK


@deciding_command("resume")
@click.argument("run_id")
@options(TOOLS, MCP_CONFIG, OUTBOX, POLICY, DATABASE_URL, DEMO, QUIET, USER)
def runs_resume(run_id: str, tools: str | None, mcp_config: str | None, outbox: str | None, policy: str | None,
                database_url: str | None, demo: bool, quiet: bool, user: str) -> int:
    """Continue a paused, failed, out-of-budget or orphaned run here.

    A pending approval is asked for as in `signoff run`; a run out of budget is offered an
    extension, a failed run a retry, and a call with an unknown outcome is settled (done, retry
    or abort). A run whose worker died continues from its last checkpoint. Answers may be piped.
    """
    settings = load_settings({"database_url": database_url, "tools": tools, "outbox": outbox,
                              "mcp_config": mcp_config, "policy": policy}, demo=demo)
    store = read_store(settings.database_url, demo)  # a run to resume is in a database that exists
    run = the_run(store, run_id, settings.database_url, demo)
    assert store is not None  # the run was found in it
    check_writable(settings.database_url)
    console = make_console(quiet)
    hint = resume_hint(run_id, settings, demo)
    if run.status in TERMINAL:
        console.say(f"run {run_id} has ended; nothing to resume")
        return finish(console, run, hint, store.executions(run_id))
    # The run keeps the model it started with; build that one, whatever SIGNOFF_MODEL says now.
    runner, notifier = terminal_runner(settings.model_copy(update={"model": run.model}), console, store=store)
    console.say(f"resuming {run_id} ({run.status}); model: {model_label(run.model)}")
    try:
        final = drive(runner, run_id, console, notifier, user, settle=True)
    except KeyboardInterrupt:
        raise Interrupted(hint) from None
    return finish(console, final, hint, store.executions(run_id))


@click.command("replay")
@click.argument("run_id", required=False)
@click.option("--all", "every", is_flag=True, help="Replay every finished run (done, cancelled, expired).")
@click.option("--since", type=click.DateTime(), help="With --all: only runs started on or after this date (UTC).")
@options(DATABASE_URL, TOOLS, POLICY, DEMO)
def runs_replay(run_id: str | None, every: bool, since: datetime | None, database_url: str | None,
                tools: str | None, policy: str | None, demo: bool) -> int:
    """Re-drive recorded runs through this Signoff, with their recorded model replies, tool results
    and decisions, and compare what the loop does at every step with what it did then, under the
    approval policy (SIGNOFF_POLICY, or --policy).

    No model is called, no tool runs, nothing is written. Prints the first divergence of each run
    (step, expected, got); exits 0 when every replayed run is identical, 1 when one is not.
    """
    if bool(run_id) == every:
        raise click.UsageError("give a run id, or --all")
    if since is not None and not every:
        raise click.UsageError("--since goes with --all")
    settings, store = runs_store(database_url, demo, tools, policy)
    toolset = load_tools(settings)
    started = time.monotonic()
    if run_id:
        chosen = [the_run(store, run_id, settings.database_url, demo)]
    else:
        chosen = finished_runs(store, since) if store is not None else []
    # No store: the zero-configuration file does not exist yet, so there is nothing to replay.
    results = replay_each(store, toolset, chosen, reread=every, stall_after=settings.stall_after,
                          policies=RunPolicies(settings)) if store is not None else []
    if every:
        click.echo(summary_line(results, time.monotonic() - started))
    return EXIT_OK if all(r.divergence is None for r in results) else EXIT_ERROR


def finished_runs(store: SqlStore, since: datetime | None) -> list[RunRecord]:
    """Every readable run that has ended, started on or after `since` (UTC) if given; listed without history."""
    after = since.replace(tzinfo=UTC) if since is not None else None
    return [r for status in sorted(TERMINAL) for r in store.list_runs(status=status, limit=100_000)
            if not r.unreadable and (after is None or r.created_at >= after)]


class RunPolicies:
    """The approval policy each run went by, each read once: as a terminal's runner loads it for a
    run started there, as `signoff serve` does for any other (the difference is in its digest)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.loaded: dict[bool, ApprovalPolicy] = {}

    def of(self, run: RunRecord) -> ApprovalPolicy:
        in_terminal = run.origin.get("source") == TERMINAL_SOURCE
        if in_terminal not in self.loaded:
            overrides = IN_TERMINAL if in_terminal else {}
            self.loaded[in_terminal] = load_approval_policy(self.settings, **overrides)
        return self.loaded[in_terminal]


def replay_each(store: SqlStore, toolset: dict[str, Tool], chosen: list[RunRecord], *, reread: bool,
                stall_after: int | None, policies: RunPolicies) -> list[Replayed]:
    """Replay each run; print the verdict of each one, or with `reread` (runs listed without their
    history, read here one at a time) only of those that diverged."""
    results = []
    for listed in chosen:
        run = store.get_run(listed.run_id) if reread else listed
        assert run is not None
        result = replay(run.state, store.timeline(run.run_id), toolset, stall_after=stall_after,
                        approval_policy=policies.of(run),
                        caller=Caller(run.requester, str(run.origin.get("channel") or "")))
        results.append(result)
        if result.divergence is not None or not reread:
            click.echo("\n".join(verdict_lines(result)))
    return results


def secret_keys(settings: Settings) -> frozenset[str]:
    """The global secret names plus every loadable tool's own; warns if the tools cannot be loaded."""
    try:
        tools = load_tools(settings)
    except ConfigError as exc:
        click.echo(f"warning: tools not loaded ({exc}); only the standard secret names are redacted", err=True)
        return secret_names()
    return secret_names(*tools.values())


@click.group(commands=[runs_list, runs_show, runs_export, runs_resume, runs_replay])
def runs() -> None:
    """List, show, export and resume stored runs."""
