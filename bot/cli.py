"""`signoff`: run, decide and inspect runs in the terminal; check, migrate and serve.

Exit codes: 0 done (or the command succeeded), 1 error, 2 bad usage, 3 the run is paused waiting
for a person, 4 the run stopped without an answer (budget, failure, reconciliation, cancelled, expired).
"""

from __future__ import annotations

import dataclasses
import getpass
import json
import logging
import os
import sys
import traceback
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, OperationalError, SQLAlchemyError

from bot.settings import Settings
from bot.terminal import Console, TerminalNotifier, as_text, budget_line, find_call, one_line, step_lines
from bot.wiring import (
    DEMO_MODEL,
    PACKAGE_DIR,
    build_runner,
    is_scripted,
    model_env,
    open_store,
    resolve_model_spec,
)
from runtime.adapters.db import (
    DEFAULT_DATABASE_URL,
    ensure_schema,
    is_default_sqlite,
    make_engine,
    masked,
    upgrade,
)
from runtime.adapters.sql import SqlStore
from runtime.errors import ConfigError, SignoffError
from runtime.models import check_model, describe_model
from runtime.records import (
    AlreadyDecided,
    ApprovalRecord,
    Decided,
    Done,
    Expired,
    Mismatch,
    Missing,
    NotAllowed,
    Refused,
    RunRecord,
)
from runtime.runner import Runner
from runtime.state import DEFAULT_REDACT_KEYS, REDACTED, TERMINAL, redact
from tools.registry import load_toolsets

EXIT_OK, EXIT_ERROR, EXIT_PAUSED, EXIT_STOPPED = 0, 1, 3, 4
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


@dataclasses.dataclass
class Options:
    debug: bool = False


class RunBusy(click.ClickException):
    """Another worker holds the run's lease."""


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
    click.echo(f"error: {message}{hint}", err=True)


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


def run_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The flags `run` and `demo` share; each overrides its SIGNOFF_* variable."""
    positive_int = click.IntRange(min=1)
    positive = click.FloatRange(min=0, min_open=True)
    decorators = [
        click.option("--model", help="Model spec: openai:<model>, anthropic:<model> or scripted:<path>."),
        click.option("--tools", help="Toolsets: demo or package.module:attribute, comma-separated."),
        click.option("--max-steps", type=positive_int, help="Budget: model calls."),
        click.option("--max-tool-calls", type=positive_int, help="Budget: tool executions."),
        click.option("--max-tokens", type=positive_int, help="Budget: input plus output tokens."),
        click.option("--max-cost-usd", type=positive, help="Budget: model cost in US dollars."),
        click.option("--max-seconds", type=positive, help="Budget: seconds spent running."),
        *store_options(),
        click.option("--outbox", help="Directory for the demo send_email .eml files and refund ledger."),
        *terminal_options(),
    ]
    for decorator in reversed(decorators):
        command = decorator(command)
    return command


def store_options() -> list[Callable[..., Any]]:
    return [click.option("--database-url", help="SQLAlchemy URL of the run store (overrides SIGNOFF_DATABASE_URL).")]


def terminal_options() -> list[Callable[..., Any]]:
    return [
        click.option("--quiet", "-q", is_flag=True, help="Print only the outcome line."),
        click.option("--user", default=default_user, show_default="cli:$USER",
                     help="Who starts and decides, as recorded in the audit log."),
    ]


def demo_option(command: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--demo", is_flag=True,
                        help=f"Use the demo's configuration ({DEMO_DATABASE_URL}, demo tools), as `signoff demo` does.")(
        command)


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
@run_options
def run(goal: str, quiet: bool, user: str, **flags: Any) -> int:
    """Run GOAL in the terminal with the configured model and tools.

    Every side-effecting call is shown as Slack would show it and waits for an answer:
    approve [a], deny [d] (then a reason, which the model is told) or quit [q] (the run stays
    paused in the database; `signoff runs resume` continues it). Answers may be piped, one a
    line; the end of input counts as quit.

    """
    settings = load_settings(flags)
    return run_in_terminal(settings, goal, user=user, quiet=quiet, demo=False)


run.help = (run.help or "") + TERMINAL_APPROVER_HELP


@cli.command(epilog=EXIT_CODES_HELP)
@click.argument("goal", default=DEMO_GOAL)
@run_options
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


demo.help = (demo.help or "") + TERMINAL_APPROVER_HELP


def run_in_terminal(settings: Settings, goal: str, *, user: str, quiet: bool, demo: bool) -> int:
    console = make_console(quiet)
    notifier = TerminalNotifier(console, {})
    runner = build_runner(settings, notifier, env=model_env(os.environ), allow_self_approval=True,
                          auto_upgrade=may_create(settings.database_url, demo))
    notifier.tools = runner.tools
    console.say(f"model:    {model_label(settings.model)}")
    console.say(f"tools:    {', '.join(runner.tools)}")
    console.say(f"database: {masked(settings.database_url)}   outbox: {settings.outbox}")
    try:
        started = runner.start_run(goal, requester=user, origin={"source": "cli", "user": user})
    except ValueError as exc:
        raise click.UsageError(f"GOAL: {exc}") from None
    final = drive(runner, started.run_id, console, notifier, user, settle=False)
    return finish(console, final, resume_hint(final.run_id, settings, demo))


def model_label(spec: str) -> str:
    """How the model is named to people; a scripted one says plainly that it is not a model."""
    if is_scripted(spec):
        source = "the built-in demo script" if spec.strip() == DEMO_MODEL else spec.partition(":")[2]
        return f"scripted (not a real model), replaying {source}"
    return describe_model(spec)


def resume_hint(run_id: str, settings: Settings, demo: bool) -> str:
    command = f"signoff runs resume {run_id}"
    if demo:
        command += " --demo"
    default = DEMO_DATABASE_URL if demo else DEFAULT_DATABASE_URL
    if settings.database_url != default:
        command += f" --database-url {masked(settings.database_url)}"
    return command


# -- driving a run in the terminal ---------------------------------------------------------------


def drive(runner: Runner, run_id: str, console: Console, notifier: TerminalNotifier, user: str, *,
          settle: bool) -> RunRecord:
    """Execute the run, deciding what it waits for here, until it ends or the person quits.

    With `settle`, a run that stopped (budget, failure, unknown outcome) is offered extend, retry
    or reconcile; otherwise only approvals are asked.
    """
    stalled_at: int | None = None
    while True:
        runner.execute(run_id)
        run = runner.get_run(run_id)
        assert run is not None, "runs are never deleted"
        if run.status in ("idle", "running"):
            until = f" until {run.lease_expires_at:%H:%M:%S} UTC" if run.lease_expires_at else ""
            raise RunBusy(f"run {run_id} is being run by {run.lease_owner or 'another worker'}{until}; "
                          "try again later")
        if run.version == stalled_at:
            return run  # nothing moved since the last round: stop rather than spin
        stalled_at = run.version
        match run.status:
            case "awaiting_approval":
                approval = runner.pending_approval(run_id)
                if approval is not None and not decide_here(runner, run, approval, console, notifier, user):
                    return run
            case "budget_exhausted" | "failed" | "needs_reconciliation" if settle:
                if not settle_here(runner, run, console, notifier, user):
                    return run
            case _:
                return run


def decide_here(runner: Runner, run: RunRecord, approval: ApprovalRecord, console: Console,
                notifier: TerminalNotifier, user: str) -> bool:
    """Ask for a decision on `approval` and record it; False if the person quit."""
    notifier.show_approval(run, approval)
    if approval.expires_at <= datetime.now(UTC):
        # Deciding cannot win any more; the store marks it expired and the run ends as expired.
        runner.decide(approval.approval_id, approval.digest, user, approved=False)
        return True
    choice = console.choose("Approve [a], deny [d] or quit [q]? ", {"a": "approve", "d": "deny", "q": "quit"})
    if choice in (None, "quit"):
        return False
    note = ""
    if choice == "deny":
        note = console.read("Reason (the model is told): ") or ""
    match runner.decide(approval.approval_id, approval.digest, user, approved=choice == "approve", note=note):
        case Decided() | Expired():
            pass  # the notifier has said so
        case AlreadyDecided(approval=earlier):
            console.say(f"  already {earlier.status} by {earlier.decided_by}")
        case NotAllowed(reason=reason) | Mismatch(reason=reason):
            raise click.ClickException(reason)
        case Missing(what=what):
            raise click.ClickException(f"the {what} disappeared while you were deciding")
    return True


def settle_here(runner: Runner, run: RunRecord, console: Console, notifier: TerminalNotifier, user: str) -> bool:
    """Offer what fits a stopped run (extend, retry, reconcile); False if the person quit."""
    stop = run.stop or {}
    console.say(f"run {run.run_id} is {run.status}: {stop.get('reason', '')}")
    if stop.get("detail"):
        console.say(f"  {one_line(stop['detail'], 300)}")
    console.say(f"  budget: {budget_line(run.state)}")
    match run.status:
        case "budget_exhausted":
            limit = stop.get("budget", "max_steps")
            choice = console.choose(f"Extend {limit} [e] or quit [q]? ", {"e": "extend", "q": "quit"})
            outcome = runner.extend(run.run_id, user) if choice == "extend" else None
        case "failed":
            choice = console.choose("Retry from the last checkpoint [r] or quit [q]? ", {"r": "retry", "q": "quit"})
            outcome = runner.retry(run.run_id, user) if choice == "retry" else None
        case _:
            outcome = reconcile_here(runner, run, console, notifier, user)
    match outcome:
        case None:
            return False
        case Done():
            return True
        case Refused(reason=reason) | NotAllowed(reason=reason):
            console.say(f"  not possible: {reason}")
            return False
        case Missing(what=what):
            raise click.ClickException(f"the {what} disappeared")
    return False


def reconcile_here(runner: Runner, run: RunRecord, console: Console, notifier: TerminalNotifier,
                   user: str) -> Done | Refused | NotAllowed | Missing | None:
    pending = run.state.get("pending") or {}
    args = redact(pending.get("args", {}), notifier.secret_keys(pending.get("tool", "")))
    console.say(f"  the call: {pending.get('tool')} {one_line(as_text(args), 300)} (key {pending.get('key')})")
    console.say("  it may or may not have taken effect; check, then say what happened")
    # Whole words: claiming a side effect happened, or running it again, must not be one stray letter.
    choice = console.choose("Type done (it happened), retry (run it again) or abort (end the run), or q to quit: ",
                            {"done": "done", "retry": "retry", "abort": "abort", "q": "quit"})
    if choice in (None, "quit"):
        return None
    result: Any = None
    if choice == "done":
        text = console.read("Its result, for the model (JSON or text, empty for none): ") or ""
        result = _json_or_text(text)
    return runner.reconcile(run.run_id, user, choice, result, note="settled in the terminal")


def _json_or_text(text: str) -> Any:
    if not text:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def finish(console: Console, run: RunRecord, hint: str) -> int:
    """Print the outcome line; return the exit code for the run's status."""
    console.outcome(outcome_line(run, hint))
    return exit_code(run.status)


def outcome_line(run: RunRecord, hint: str) -> str:
    reason = (run.stop or {}).get("reason", "")
    match run.status:
        case "done":
            return f"{run.run_id} done: {run.answer}"
        case "awaiting_approval":
            return f"{run.run_id} awaiting_approval (resume with: {hint})"
        case "budget_exhausted":
            return f"{run.run_id} budget_exhausted: {reason} (extend with: {hint})"
        case "failed":
            return f"{run.run_id} failed: {reason} (retry with: {hint})"
        case "needs_reconciliation":
            return f"{run.run_id} needs_reconciliation: {reason} (settle with: {hint})"
        case status:
            return f"{run.run_id} {status}: {reason}" if reason else f"{run.run_id} {status}"


def exit_code(status: str) -> int:
    if status == "done":
        return EXIT_OK
    return EXIT_PAUSED if status == "awaiting_approval" else EXIT_STOPPED


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
@click.option("--database-url", help="SQLAlchemy URL of the run store (overrides SIGNOFF_DATABASE_URL).")
@demo_option
def runs_list(limit: int, status: str | None, requester: str | None, database_url: str | None, demo: bool) -> int:
    """The most recent runs, newest first."""
    _, store = runs_store(database_url, demo)
    found = store.list_runs(requester=requester, status=status, limit=limit)
    if not found:
        click.echo("no runs")
        return EXIT_OK
    rows = [("RUN", "STATUS", "REQUESTER", "STEPS", "UPDATED", "GOAL")]
    rows += [(r.run_id, r.status, r.requester, str(r.state.get("steps", 0)),
              f"{r.updated_at:%Y-%m-%d %H:%M}", one_line(r.goal, 60)) for r in found]
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    for row in rows:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(row[:5], widths, strict=True)) + "  " + row[5])
    return EXIT_OK


@runs.command("show")
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: run, history, events, approvals, executions.")
@click.option("--database-url", help="SQLAlchemy URL of the run store (overrides SIGNOFF_DATABASE_URL).")
@click.option("--tools", help="Toolsets whose extra secret argument names to redact (overrides SIGNOFF_TOOLS).")
@demo_option
def runs_show(run_id: str, as_json: bool, database_url: str | None, tools: str | None, demo: bool) -> int:
    """A run's story: what the model saw and did, the audit events, approvals and executions.

    Secret-looking arguments (password, token, ...) are redacted.
    """
    settings, store = runs_store(database_url, demo, tools)
    record = run_records(store, the_run(store, run_id, settings.database_url), secret_keys(settings))
    if as_json:
        click.echo(json.dumps(record, indent=2, ensure_ascii=False, default=_json_default))
    else:
        click.echo("\n".join(story_lines(record)))
    return EXIT_OK


@runs.command("export")
@click.argument("run_id")
@click.option("--database-url", help="SQLAlchemy URL of the run store (overrides SIGNOFF_DATABASE_URL).")
@click.option("--tools", help="Toolsets whose extra secret argument names to redact (overrides SIGNOFF_TOOLS).")
@demo_option
def runs_export(run_id: str, database_url: str | None, tools: str | None, demo: bool) -> int:
    """JSON lines, each {"record": kind, "data": {...}}: the run, then each history entry, event,
    approval and execution. Secret-looking values are redacted."""
    settings, store = runs_store(database_url, demo, tools)
    record = run_records(store, the_run(store, run_id, settings.database_url), secret_keys(settings))
    click.echo(json.dumps({"record": "run", "data": record["run"]}, ensure_ascii=False, default=_json_default))
    for kind, key in (("history", "history"), ("event", "events"), ("approval", "approvals"),
                      ("execution", "executions")):
        for item in record[key]:
            click.echo(json.dumps({"record": kind, "data": item}, ensure_ascii=False, default=_json_default))
    return EXIT_OK


@runs.command("resume", epilog=EXIT_CODES_HELP)
@click.argument("run_id")
@click.option("--tools", help="Toolsets: demo or package.module:attribute (overrides SIGNOFF_TOOLS).")
@click.option("--outbox", help="Directory for the demo send_email .eml files and refund ledger.")
@click.option("--database-url", help="SQLAlchemy URL of the run store (overrides SIGNOFF_DATABASE_URL).")
@demo_option
@click.option("--quiet", "-q", is_flag=True, help="Print only the outcome line.")
@click.option("--user", default=default_user, show_default="cli:$USER",
              help="Who decides, as recorded in the audit log.")
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
    notifier = TerminalNotifier(console, {})
    # The run keeps the model it started with; build that one, whatever SIGNOFF_MODEL says now.
    runner = build_runner(settings.model_copy(update={"model": run.model}), notifier, env=model_env(os.environ),
                          store=store, allow_self_approval=True)
    notifier.tools = runner.tools
    console.say(f"resuming {run_id} ({run.status}); model: {model_label(run.model)}")
    final = drive(runner, run_id, console, notifier, user, settle=True)
    return finish(console, final, hint)


runs_resume.help = (runs_resume.help or "") + "\n\n" + TERMINAL_APPROVER_HELP


def secret_keys(settings: Settings) -> frozenset[str]:
    """The global secret names plus every loadable tool's own; warns if the tools cannot be loaded."""
    try:
        tools = load_toolsets(settings.tools, outbox=settings.outbox)
    except ConfigError as exc:
        click.echo(f"warning: tools not loaded ({exc}); only the standard secret names are redacted", err=True)
        return DEFAULT_REDACT_KEYS
    return DEFAULT_REDACT_KEYS.union(*(tool.redact for tool in tools.values()))


def run_records(store: SqlStore, run: RunRecord, keys: frozenset[str]) -> dict[str, Any]:
    """Everything stored about a run, secrets redacted, as JSON-ready data."""
    row = dataclasses.asdict(run)
    state = {k: v for k, v in row.pop("state").items() if k != "history"}
    events = store.timeline(run.run_id)
    # Events carry arguments as the runner redacted them with the tool loaded, so the names it
    # hid stay hidden here even when this process cannot load that tool.
    keys = keys | redacted_names(events)
    record = {
        "run": {**row, **{k: state.get(k) for k in ("steps", "usage", "budget", "answer", "stop", "pending")}},
        "history": run.state.get("history", []),
        "events": events,
        "approvals": [dataclasses.asdict(a) for a in store.list_approvals(run_id=run.run_id, limit=1000)][::-1],
        "executions": store.executions(run.run_id),
    }
    redacted: dict[str, Any] = redact(record, keys)
    return redacted


def redacted_names(value: Any) -> frozenset[str]:
    """Every dict key in `value` whose value is the redaction marker."""
    if isinstance(value, dict):
        found = {k for k, v in value.items() if v == REDACTED and isinstance(k, str)}
        return frozenset(found).union(*(redacted_names(v) for v in value.values()))
    if isinstance(value, list):
        return frozenset().union(*(redacted_names(v) for v in value))
    return frozenset()


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def story_lines(record: Mapping[str, Any]) -> list[str]:
    """`runs show` as text."""
    run = record["run"]
    lines = [f"run {run['run_id']}  {run['status']}",
             f"  goal:       {run['goal']}",
             f"  requester:  {run['requester']}",
             f"  model:      {run['model']}",
             f"  created:    {run['created_at']:%Y-%m-%d %H:%M:%S} UTC   updated: {run['updated_at']:%Y-%m-%d %H:%M:%S} UTC",
             f"  budget:     {budget_line({'budget': run['budget'], 'usage': run['usage'], 'steps': run['steps']})}"]
    if run.get("answer") is not None:
        lines.append(f"  answer:     {run['answer']}")
    if run.get("stop"):
        lines.append(f"  stopped:    {run['stop'].get('reason', '')}")
    lines += ["", "history (what the model saw and did):"]
    lines += history_lines(record["history"])
    lines += ["", "audit events:"]
    lines += [f"  #{e['seq']:<3} {e['at'][11:19]}  {e['type']:<20} {event_summary(e)}" for e in record["events"]]
    lines += ["", "approvals:"]
    lines += [approval_line(a) for a in record["approvals"]] or ["  (none)"]
    lines += ["", "executions:"]
    lines += [f"  {x['key']}  {x['tool']}  {x['status']}  attempts {x['attempts']}"
              + (f"  {x['seconds']:.3f}s" if x.get("seconds") is not None else "")
              + (f"  error: {one_line(x['error'], 200)}" if x.get("error") else "")
              for x in record["executions"]] or ["  (none)"]
    return lines


def history_lines(history: list[Mapping[str, Any]]) -> list[str]:
    lines = []
    for entry in history:
        match entry.get("role"):
            case "user":
                lines.append(f"  goal: {one_line(entry.get('content', ''), 300)}")
            case "assistant" if "final" in entry:
                lines.append(f"  step {entry.get('step')}  final: {one_line(entry['final'], 500)}")
            case "assistant" if "malformed" in entry:
                lines.append(f"  step {entry.get('step')}  malformed reply: {one_line(entry['malformed'], 200)}")
            case "tool":
                lines += step_lines(find_call(history, entry), entry, frozenset())
            case "runtime":
                lines.append(f"  step {entry.get('step')}  runtime: {one_line(entry.get('error', ''), 300)}")
    return lines


def event_summary(event: Mapping[str, Any]) -> str:
    skip = {"seq", "type", "at", "run_id", "step", "usage"}
    return one_line(" ".join(f"{k}={as_text(v)}" for k, v in event.items() if k not in skip and v not in (None, "")),
                    160)


def approval_line(approval: Mapping[str, Any]) -> str:
    status = "approved and executed" if approval["status"] == "consumed" else approval["status"]
    decided = f" by {approval['decided_by']}" if approval.get("decided_by") else ""
    note = f": {one_line(approval['note'], 200)}" if approval.get("note") else ""
    return (f"  {approval['key']}  {approval['tool']}  {status}{decided}{note}  "
            f"(requested {approval['requested_at']:%H:%M:%S}, expires {approval['expires_at']:%H:%M:%S} UTC)")


# -- operations ----------------------------------------------------------------------------------


@cli.group()
def db() -> None:
    """Database schema commands."""


@db.command("upgrade")
@click.option("--database-url", help="SQLAlchemy URL of the run store (overrides SIGNOFF_DATABASE_URL).")
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
    results = [check_tools(settings), check_database(settings), check_slack(settings), check_model_line(settings)]
    for line in results:
        click.echo(line)
    return EXIT_ERROR if any(line.startswith("FAIL") for line in results) else EXIT_OK


def check_tools(settings: Settings) -> str:
    try:
        tools = load_toolsets(settings.tools, outbox=settings.outbox)
    except ConfigError as exc:
        return f"FAIL tools: {exc}"
    return f"ok tools: {settings.tools} -> {', '.join(tools)}"


def check_database(settings: Settings) -> str:
    url = settings.database_url
    try:
        backend = make_url(url).get_backend_name()
    except ArgumentError:
        return "FAIL database: SIGNOFF_DATABASE_URL is not a database URL"
    if is_default_sqlite(url) and not Path(make_url(url).database or "").exists():
        return f"ok database: {url} does not exist yet; `signoff run` creates it on first use"
    options = {"connect_args": {"connect_timeout": 5}} if backend == "postgresql" else {}
    try:
        engine = make_engine(url, **options)
        try:
            ensure_schema(engine)
        finally:
            engine.dispose()
    except ConfigError as exc:
        return f"FAIL database: {_scrub(str(exc), url)}"
    return f"ok database: {masked(url)} is reachable and its schema is current"


def check_slack(settings: Settings) -> str:
    if settings.slack_bot_token is None:
        return "skip slack: SLACK_BOT_TOKEN is not set (only `signoff serve` needs it)"
    from slack_sdk import WebClient
    from slack_sdk.errors import SlackApiError, SlackClientError

    client = WebClient(token=settings.slack_bot_token.get_secret_value(), base_url=settings.slack_api_url,
                       timeout=10)
    try:
        reply = client.auth_test()
    except SlackApiError as exc:
        return f"FAIL slack: auth.test at {settings.slack_api_url} answered {exc.response.get('error', 'an error')}"
    except (SlackClientError, OSError) as exc:
        return f"FAIL slack: cannot reach {settings.slack_api_url}: {one_line(exc, 200)}"
    return f"ok slack: auth.test accepted the bot token ({reply.get('user')} in {reply.get('team')})"


def check_model_line(settings: Settings) -> str:
    try:
        text = check_model(resolve_model_spec(settings.model), model_env(os.environ))
    except SignoffError as exc:
        return f"FAIL model {settings.model}: {one_line(exc, 300)}"
    return f"ok model {settings.model}: {text.removeprefix('ok').lstrip(': ')}"


def _first_line(exc: OperationalError) -> str:
    text = str(exc.orig if exc.orig is not None else exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _scrub(text: str, url: str) -> str:
    """`text` without the URL's password, even where a driver quoted it."""
    try:
        password = make_url(url).password
    except ArgumentError:
        return text
    return text.replace(str(password), "***") if password else text


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
    from bot.serve import serve as serve_slack  # imported here: only this command needs the Slack app

    serve_slack(settings, environ=os.environ)
    return EXIT_OK


if __name__ == "__main__":
    main()
