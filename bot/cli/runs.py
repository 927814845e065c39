"""`signoff runs ...`: list, show, export, resume and replay stored runs.

`signoff runs --help` imports this module: each command imports the store, the runner and the
tools it works with inside its body.
"""

from __future__ import annotations

import time
from datetime import datetime

import click

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
    load_settings,
    make_console,
    options,
)
from signoff.bot.cli.outcomes import EXIT_ERROR, EXIT_OK, Interrupted, finish


@click.command("list")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--status", help="Only runs with this status, e.g. awaiting_approval.")
@click.option("--requester", help="Only runs started by this user.")
@DATABASE_URL
@DEMO
def runs_list(limit: int, status: str | None, requester: str | None, database_url: str | None, demo: bool) -> int:
    """The most recent runs, newest first."""
    from signoff.bot.cli.rendering import one_line
    from signoff.bot.cli.stored import demo_has_runs, runs_store
    from signoff.bot.wiring import sqlite_file

    settings, store = runs_store(database_url, demo)
    found = store.list_runs(requester=requester, status=status, limit=limit) if store is not None else []
    if not found:
        words = "no runs yet" if store is None else "no runs"
        if not demo and demo_has_runs(settings.database_url):
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
    from signoff.bot.cli.stored import runs_store, secret_keys, the_run
    from signoff.bot.cli.story import dumps, run_records, story_lines

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
    from signoff.bot.cli.stored import runs_store, secret_keys, the_run
    from signoff.bot.cli.story import dumps, run_records

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
    extension, a failed run a retry, a call with an unknown outcome is settled (done, retry or
    abort), and a run that expired with nobody deciding its call is offered to request it again.
    A run whose worker died continues from its last checkpoint. Answers may be piped.
    """
    from signoff.bot.cli.deciding import drive
    from signoff.bot.cli.running import resume_hint, terminal_runner
    from signoff.bot.cli.stored import read_store, the_run
    from signoff.bot.wiring import check_writable
    from signoff.bot.words import model_label
    from signoff.runtime.caller_runs import caller_call
    from signoff.runtime.state import REOPENABLE, TERMINAL

    settings = load_settings({"database_url": database_url, "tools": tools, "outbox": outbox,
                              "mcp_config": mcp_config, "policy": policy}, demo=demo)
    store = read_store(settings.database_url, demo)  # a run to resume is in a database that exists
    run = the_run(store, run_id, settings.database_url, demo)
    assert store is not None  # the run was found in it
    check_writable(settings.database_url)
    console = make_console(quiet)
    hint = resume_hint(run_id, settings, demo)
    if run.status in TERMINAL and not (run.status in REOPENABLE and run.state.get("pending")):
        console.say(f"run {run_id} has ended; nothing to resume")
        return finish(console, run, hint, store.executions(run_id))
    # The run keeps the model it started with; build that one, whatever SIGNOFF_MODEL says now. A
    # caller's run has none to build: its one call is its own (`caller_runs`).
    model = run.model if caller_call(run) is None else settings.model
    runner, notifier = terminal_runner(settings.model_copy(update={"model": model}), console, store=store)
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
    from signoff.bot.cli.replays import summary_line
    from signoff.bot.cli.stored import RunPolicies, finished_runs, replay_each, runs_store, the_run
    from signoff.bot.wiring import load_tools

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


@click.group(commands=[runs_list, runs_show, runs_export, runs_resume, runs_replay])
def runs() -> None:
    """List, show, export, resume and replay stored runs."""
