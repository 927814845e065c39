"""`signoff`: run, decide and inspect runs in the terminal; check, migrate and serve.

Exit codes: 0 done (or the command succeeded), 1 error, 2 bad usage, 3 the run is paused waiting
for a person, 4 the run stopped without an answer (budget, failure, reconciliation, cancelled, expired).
"""

from __future__ import annotations

import dataclasses
import getpass
import inspect
import logging
import os
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import click
from sqlalchemy.exc import OperationalError, SQLAlchemyError

from signoff.bot.checks import check_lines
from signoff.bot.replays import summary_line, verdict_lines
from signoff.bot.settings import ENV_VARS, Settings
from signoff.bot.story import dumps, run_records, story_lines
from signoff.bot.terminal import EXIT_ERROR, EXIT_OK, Console, TerminalNotifier, drive, finish, one_line
from signoff.bot.wiring import PACKAGE_DIR, build_runner, load_tools, model_env, open_store, runner_config
from signoff.bot.words import DEMO_MODEL, model_label
from signoff.runtime.adapters.db import (
    is_default_sqlite,
    make_engine,
    masked,
    upgrade,
)
from signoff.runtime.adapters.sql import SqlStore
from signoff.runtime.errors import ConfigError, SignoffError
from signoff.runtime.records import RunRecord
from signoff.runtime.replay import replay
from signoff.runtime.runner import Runner
from signoff.runtime.state import TERMINAL, secret_names

DEMO_DATABASE_URL = "sqlite:///signoff-demo.db"
DEMO_GOAL = "Ada Lovelace says order A-1001 arrived damaged. Refund her and let her know."
DEMO_ENV = {"SIGNOFF_DATABASE_URL": DEMO_DATABASE_URL, "SIGNOFF_MODEL": DEMO_MODEL, "SIGNOFF_TOOLS": "demo"}
"""The demo's whole configuration; it reads no SIGNOFF_* or SLACK_* variable."""

FLAG_VARS = {
    "model": "SIGNOFF_MODEL", "tools": "SIGNOFF_TOOLS", "max_steps": "SIGNOFF_MAX_STEPS",
    "max_tool_calls": "SIGNOFF_MAX_TOOL_CALLS", "max_tokens": "SIGNOFF_MAX_TOKENS",
    "max_cost_usd": "SIGNOFF_MAX_COST_USD", "max_seconds": "SIGNOFF_MAX_SECONDS",
    "database_url": "SIGNOFF_DATABASE_URL", "outbox": "SIGNOFF_OUTBOX",
}
EXIT_CODES_HELP = (
    "\b\nExit codes: 0 done, 1 error, 2 bad usage, 3 paused waiting for a decision\n"
    "(resume with `signoff runs resume`), 4 stopped without an answer (budget, failure,\n"
    "unknown outcome, cancelled, expired)."
)
TERMINAL_APPROVER_HELP = (
    "In the terminal the person at the keyboard is the approver: decisions are recorded as --user, "
    "who may approve their own run's side effects here (unlike in Slack)."
)



def with_approver_note(help_text: str | None) -> str:
    # Dedent first: click dedents a docstring as a whole, and the note has no indentation of its own.
    return inspect.cleandoc(help_text or "") + "\n\n" + TERMINAL_APPROVER_HELP


@dataclasses.dataclass
class Options:
    debug: bool = False


# -- entry point -------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    """The `signoff` console script: one line on stderr for errors, a traceback only with --debug."""
    options = Options()
    try:
        code = cli.main(args=argv, prog_name="signoff", standalone_mode=False, obj=options)
    except click.UsageError as exc:
        exc.show()
        code = exc.exit_code
    except click.ClickException as exc:
        click.echo(f"error: {exc.format_message()}", err=True)
        code = exc.exit_code
    except click.Abort:
        click.echo("aborted", err=True)
        code = EXIT_ERROR
    except BrokenPipeError:
        # The reader went away (`signoff runs export ... | head`); say nothing more to it.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = EXIT_ERROR
    except KeyboardInterrupt:
        click.echo("interrupted; a run in progress continues with `signoff runs resume`", err=True)
        code = 130
    except (SignoffError, SQLAlchemyError, OSError) as exc:
        _report(exc, options.debug)
        code = EXIT_ERROR
    except Exception as exc:  # a bug: say so in one line, and how to see more
        _report(exc, options.debug, bug=True)
        code = EXIT_ERROR
    sys.exit(code if isinstance(code, int) else EXIT_OK)


def _report(exc: BaseException, debug: bool, bug: bool = False) -> None:
    if debug:
        traceback.print_exception(exc)
    if isinstance(exc, SQLAlchemyError):
        orig = getattr(exc, "orig", None)
        text = (str(orig) if orig is not None else str(exc)).strip().splitlines()
        message = f"database: {text[0] if text else type(exc).__name__}"
    elif bug:
        message = f"unexpected {type(exc).__name__}: {exc}"
    else:
        message = str(exc) or type(exc).__name__
    hint = "" if debug else " (--debug shows the traceback)" if bug else ""
    click.echo(f"error: {one_line(message, 2000)}{hint}", err=True)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")
@click.pass_obj
def cli(options: Options, debug: bool) -> None:
    """Signoff: a tool-using agent whose side effects wait for a human's approval.

    Settings come from SIGNOFF_* and SLACK_* variables (see README); flags override them.
    """
    options.debug = debug
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")


# -- shared options ------------------------------------------------------------------------------


def default_user() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except (OSError, KeyError):  # no login name anywhere (e.g. a bare container)
        return "cli:unknown"


def options(*decorators: Callable[..., Any]) -> Callable[..., Any]:
    """Several `click.option`s as one decorator, in the order given."""
    def apply(command: Callable[..., Any]) -> Callable[..., Any]:
        for decorator in reversed(decorators):
            command = decorator(command)
        return command

    return apply


_POSITIVE_INT, _POSITIVE = click.IntRange(min=1), click.FloatRange(min=0, min_open=True)
DATABASE_URL = click.option("--database-url", help="SQLAlchemy URL of the run store (overrides SIGNOFF_DATABASE_URL).")
TOOLS = click.option("--tools", help="Toolsets: demo or package.module:attribute, comma-separated "
                                     "(overrides SIGNOFF_TOOLS).")
OUTBOX = click.option("--outbox", help="Directory for the demo send_email .eml files and refund ledger.")
QUIET = click.option("--quiet", "-q", is_flag=True, help="Print only the outcome line.")
USER = click.option("--user", default=default_user, show_default="cli:$USER",
                    help="Who starts and decides, as recorded in the audit log.")
DEMO = click.option("--demo", is_flag=True,
                    help=f"Use the demo's configuration ({DEMO_DATABASE_URL}, demo tools), as `signoff demo` does.")
RUN_OPTIONS = options(
    click.option("--model", help="Model spec: openai:<model>, anthropic:<model> or scripted:<path>."),
    TOOLS,
    click.option("--max-steps", type=_POSITIVE_INT, help="Budget: model calls."),
    click.option("--max-tool-calls", type=_POSITIVE_INT, help="Budget: tool executions."),
    click.option("--max-tokens", type=_POSITIVE_INT, help="Budget: input plus output tokens."),
    click.option("--max-cost-usd", type=_POSITIVE, help="Budget: model cost in US dollars."),
    click.option("--max-seconds", type=_POSITIVE, help="Budget: seconds spent running."),
    DATABASE_URL, OUTBOX, QUIET, USER,
)
"""The flags `run` and `demo` share; each overrides its SIGNOFF_* variable."""


def load_settings(flags: Mapping[str, Any], *, demo: bool = False) -> Settings:
    """Settings from the environment (or the demo's fixed configuration), flags taking precedence."""
    base: Mapping[str, str] = DEMO_ENV if demo else os.environ
    overrides = {FLAG_VARS[name]: str(value) for name, value in flags.items()
                 if name in FLAG_VARS and value is not None}
    return Settings.from_env({**base, **overrides})


def may_create(database_url: str, demo: bool) -> bool:
    """Only the zero-configuration SQLite files are created and upgraded without asking."""
    return is_default_sqlite(database_url) or (demo and database_url == DEMO_DATABASE_URL)


def make_console(quiet: bool) -> Console:
    return Console(sys.stdout, sys.stdin, quiet=quiet, echo_answers=not sys.stdin.isatty())


# -- run and demo --------------------------------------------------------------------------------


@cli.command(epilog=EXIT_CODES_HELP)
@click.argument("goal")
@RUN_OPTIONS
def run(goal: str, quiet: bool, user: str, **flags: Any) -> int:
    """Run GOAL in the terminal with the configured model and tools.

    Every side-effecting call is shown as Slack would show it and waits for an answer:
    approve [a], deny [d] (then a reason, which the model is told) or quit [q] (the run stays
    paused in the database; `signoff runs resume` continues it). Answers may be piped, one a
    line; the end of input counts as quit.

    """
    settings = load_settings(flags)
    return run_in_terminal(settings, goal, user=user, quiet=quiet, demo=False)


run.help = with_approver_note(run.help)


@cli.command(epilog=EXIT_CODES_HELP)
@click.argument("goal", default=DEMO_GOAL)
@RUN_OPTIONS
def demo(goal: str, quiet: bool, user: str, **flags: Any) -> int:
    """A run with zero configuration: a scripted model (not a real one), the built-in demo tools
    and a SQLite file (./signoff-demo.db) created on first use.

    The script looks up an order, searches the handbook, then proposes an email and a refund,
    each waiting for your answer. The email lands as an .eml file in ./outbox, the refund in
    ./outbox/refunds.jsonl. Ignores SIGNOFF_* variables; the flags still apply. To answer
    without a terminal:

    \b
        printf 'a\\na\\n' | signoff demo     # approve both
        printf 'd\\ntoo early\\na\\n' | signoff demo   # deny the email, approve the refund

    """
    settings = load_settings(flags, demo=True)
    return run_in_terminal(settings, goal, user=user, quiet=quiet, demo=True)


demo.help = with_approver_note(demo.help)


def run_in_terminal(settings: Settings, goal: str, *, user: str, quiet: bool, demo: bool) -> int:
    console = make_console(quiet)
    runner, notifier = terminal_runner(settings, console, auto_upgrade=may_create(settings.database_url, demo))
    console.say(f"model:    {model_label(settings.model)}")
    console.say(f"tools:    {', '.join(runner.tools)}")
    console.say(f"database: {masked(settings.database_url)}   outbox: {settings.outbox}")
    try:
        started = runner.start_run(goal, requester=user, origin={"source": "cli", "user": user})
    except ValueError as exc:
        raise click.UsageError(f"GOAL: {exc}") from None
    final = drive(runner, started.run_id, console, notifier, user, settle=False)
    return finish(console, final, resume_hint(final.run_id, settings, demo))


def terminal_runner(settings: Settings, console: Console, *, store: SqlStore | None = None,
                    auto_upgrade: bool | None = None) -> tuple[Runner, TerminalNotifier]:
    """A runner that tells `console`, where the person at the keyboard decides (their own runs too)."""
    tools = load_tools(settings)
    config = runner_config(settings, allow_self_approval=True)
    notifier = TerminalNotifier(console, tools, redact_keys=config.redact_keys)
    runner = build_runner(settings, notifier, env=model_env(os.environ), tools=tools, config=config, store=store,
                          auto_upgrade=auto_upgrade)
    return runner, notifier


def resume_hint(run_id: str, settings: Settings, demo: bool) -> str:
    """The `runs resume` command line, with the flags that differ from what it would read by itself."""
    base: Mapping[str, str] = DEMO_ENV if demo else os.environ
    command = f"signoff runs resume {run_id}" + (" --demo" if demo else "")
    for flag, name, value in (("--tools", "SIGNOFF_TOOLS", settings.tools),
                              ("--outbox", "SIGNOFF_OUTBOX", settings.outbox),
                              ("--database-url", "SIGNOFF_DATABASE_URL", settings.database_url)):
        if value != (base.get(name, "").strip() or ENV_VARS[name]):
            command += f" {flag} {masked(value) if name == 'SIGNOFF_DATABASE_URL' else value}"
    return command


# -- runs ----------------------------------------------------------------------------------------


@cli.group()
def runs() -> None:
    """List, show, export and resume stored runs."""


def runs_store(database_url: str | None, demo: bool, tools: str | None = None) -> tuple[Settings, SqlStore]:
    settings = load_settings({"database_url": database_url, "tools": tools}, demo=demo)
    return settings, open_store(settings.database_url, auto_upgrade=may_create(settings.database_url, demo))


def the_run(store: SqlStore, run_id: str, database_url: str) -> RunRecord:
    run = store.get_run(run_id)
    if run is None:
        raise click.ClickException(f"no run {run_id!r} in {masked(database_url)}")
    return run


@runs.command("list")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--status", help="Only runs with this status, e.g. awaiting_approval.")
@click.option("--requester", help="Only runs started by this user.")
@DATABASE_URL
@DEMO
def runs_list(limit: int, status: str | None, requester: str | None, database_url: str | None, demo: bool) -> int:
    """The most recent runs, newest first."""
    _, store = runs_store(database_url, demo)
    found = store.list_runs(requester=requester, status=status, limit=limit)
    if not found:
        click.echo("no runs")
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


@runs.command("show")
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: run, history, events, approvals, executions.")
@options(DATABASE_URL, TOOLS, DEMO)
def runs_show(run_id: str, as_json: bool, database_url: str | None, tools: str | None, demo: bool) -> int:
    """A run's story: what the model saw and did, the audit events, approvals and executions.

    Secret-looking arguments (password, token, ...) are redacted.
    """
    settings, store = runs_store(database_url, demo, tools)
    record = run_records(store, the_run(store, run_id, settings.database_url), secret_keys(settings))
    if as_json:
        click.echo(dumps(record, indent=2))
    else:
        click.echo("\n".join(story_lines(record)))
    return EXIT_OK


@runs.command("export")
@click.argument("run_id")
@options(DATABASE_URL, TOOLS, DEMO)
def runs_export(run_id: str, database_url: str | None, tools: str | None, demo: bool) -> int:
    """JSON lines, each {"record": kind, "data": {...}}: the run, then each history entry, event,
    approval and execution. Secret-looking values are redacted."""
    settings, store = runs_store(database_url, demo, tools)
    record = run_records(store, the_run(store, run_id, settings.database_url), secret_keys(settings))
    click.echo(dumps({"record": "run", "data": record["run"]}))
    for kind, key in (("history", "history"), ("event", "events"), ("approval", "approvals"),
                      ("execution", "executions")):
        for item in record[key]:
            click.echo(dumps({"record": kind, "data": item}))
    return EXIT_OK


@runs.command("resume", epilog=EXIT_CODES_HELP)
@click.argument("run_id")
@options(TOOLS, OUTBOX, DATABASE_URL, DEMO, QUIET, USER)
def runs_resume(run_id: str, tools: str | None, outbox: str | None, database_url: str | None, demo: bool,
                quiet: bool, user: str) -> int:
    """Continue a paused, failed, out-of-budget or orphaned run here.

    A pending approval is asked for as in `signoff run`; a run out of budget is offered an
    extension, a failed run a retry, and a call with an unknown outcome is settled (done, retry
    or abort). A run whose worker died continues from its last checkpoint. Answers may be piped.
    """
    settings = load_settings({"database_url": database_url, "tools": tools, "outbox": outbox}, demo=demo)
    store = open_store(settings.database_url, auto_upgrade=may_create(settings.database_url, demo))
    run = the_run(store, run_id, settings.database_url)
    console = make_console(quiet)
    hint = resume_hint(run_id, settings, demo)
    if run.status in TERMINAL:
        console.say(f"run {run_id} has ended; nothing to resume")
        return finish(console, run, hint)
    # The run keeps the model it started with; build that one, whatever SIGNOFF_MODEL says now.
    runner, notifier = terminal_runner(settings.model_copy(update={"model": run.model}), console, store=store)
    console.say(f"resuming {run_id} ({run.status}); model: {model_label(run.model)}")
    final = drive(runner, run_id, console, notifier, user, settle=True)
    return finish(console, final, hint)


runs_resume.help = with_approver_note(runs_resume.help)


@runs.command("replay")
@click.argument("run_id", required=False)
@click.option("--all", "every", is_flag=True, help="Replay every finished run (done, cancelled, expired).")
@click.option("--since", type=click.DateTime(), help="With --all: only runs started on or after this date (UTC).")
@options(DATABASE_URL, TOOLS, DEMO)
def runs_replay(run_id: str | None, every: bool, since: datetime | None, database_url: str | None,
                tools: str | None, demo: bool) -> int:
    """Re-drive recorded runs through this Signoff, with their recorded model replies, tool results
    and decisions, and compare what the loop does at every step with what it did then.

    No model is called, no tool runs, nothing is written. Prints the first divergence of each run
    (step, expected, got); exits 0 when every replayed run is identical, 1 when one is not.
    """
    if bool(run_id) == every:
        raise click.UsageError("give a run id, or --all")
    if since is not None and not every:
        raise click.UsageError("--since goes with --all")
    settings, store = runs_store(database_url, demo, tools)
    toolset = load_tools(settings)
    started = time.monotonic()
    if run_id:
        chosen = [the_run(store, run_id, settings.database_url)]
    else:
        after = since.replace(tzinfo=UTC) if since is not None else None
        chosen = [r for status in sorted(TERMINAL) for r in store.list_runs(status=status, limit=100_000)
                  if not r.unreadable and (after is None or r.created_at >= after)]
    results = []
    for listed in chosen:
        run = store.get_run(listed.run_id) if every else listed
        assert run is not None
        result = replay(run.state, store.timeline(run.run_id), toolset, stall_after=settings.stall_after)
        results.append(result)
        if result.divergence is not None or not every:
            click.echo("\n".join(verdict_lines(result)))
    if every:
        click.echo(summary_line(results, time.monotonic() - started))
    return EXIT_OK if all(r.divergence is None for r in results) else EXIT_ERROR


def secret_keys(settings: Settings) -> frozenset[str]:
    """The global secret names plus every loadable tool's own; warns if the tools cannot be loaded."""
    try:
        tools = load_tools(settings)
    except ConfigError as exc:
        click.echo(f"warning: tools not loaded ({exc}); only the standard secret names are redacted", err=True)
        return secret_names()
    return secret_names(*tools.values())


# -- operations ----------------------------------------------------------------------------------


@cli.group()
def db() -> None:
    """Database schema commands."""


@db.command("upgrade")
@DATABASE_URL
def db_upgrade(database_url: str | None) -> int:
    """Create or upgrade the schema to the newest revision; prints `before -> after`."""
    settings = load_settings({"database_url": database_url})
    engine = make_engine(settings.database_url)
    try:
        before, after = upgrade(engine)
    except OperationalError as exc:
        raise ConfigError(f"cannot reach the database at {masked(settings.database_url)}: "
                          f"{_first_line(exc)}") from None
    finally:
        engine.dispose()
    click.echo(f"{masked(settings.database_url)}: {before or '(empty)'} -> {after}"
               + (" (already current)" if before == after else ""))
    return EXIT_OK


@cli.command()
def check() -> int:
    """Check the configuration, the database, Slack (auth.test) and the model.

    Prints one line per check, "ok ..." or "FAIL ... reason" ("skip ..." when not configured);
    exits 1 if any check failed.
    """
    try:
        settings = load_settings({})
    except ConfigError as exc:
        click.echo(f"FAIL config: {exc}")
        return EXIT_ERROR
    click.echo("ok config: SIGNOFF_* and SLACK_* settings are valid")
    results = check_lines(settings, os.environ)
    for line in results:
        click.echo(line)
    return EXIT_ERROR if any(line.startswith("FAIL") for line in results) else EXIT_OK


def _first_line(exc: OperationalError) -> str:
    text = str(exc.orig if exc.orig is not None else exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


@cli.command()
def manifest() -> int:
    """Print the Slack app manifest (paste it at api.slack.com/apps -> Create New App -> From a manifest)."""
    source = PACKAGE_DIR / "slack-manifest.yaml"
    if not source.is_file():
        raise click.ClickException("the Slack app manifest is not part of this installation")
    click.echo(source.read_text(encoding="utf-8"), nl=False)
    return EXIT_OK


@cli.command()
def serve() -> int:
    """Run the Slack bot (Socket Mode when SLACK_APP_TOKEN is set, HTTP on SIGNOFF_PORT otherwise)."""
    settings = load_settings({})
    from signoff.bot.serve import serve as serve_slack  # imported here: only this command needs the Slack app

    serve_slack(settings, environ=os.environ)
    return EXIT_OK


if __name__ == "__main__":
    main()
