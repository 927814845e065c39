"""`signoff run` and `signoff demo`: start a run in the terminal and decide it there.

`signoff run --help` imports this module: the settings, the store, the runner, the model and the
tools are imported inside the functions that run a goal.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from signoff.bot.cli.options import (
    DEMO_GOAL,
    DEMO_OUTBOX,
    RUN_OPTIONS,
    deciding_command,
    demo_env,
    load_settings,
    make_console,
    may_create,
)
from signoff.bot.cli.outcomes import Interrupted, finish

if TYPE_CHECKING:
    from signoff.bot.cli.console import Console
    from signoff.bot.cli.notifier import TerminalNotifier
    from signoff.bot.settings import Settings
    from signoff.runtime.ports import Store
    from signoff.runtime.runner import Runner

TERMINAL_SOURCE = "cli"
"""The `origin.source` of a run started in the terminal."""
IN_TERMINAL: Mapping[str, Any] = {"allow_self_approval": True}
"""How a terminal's runner differs from `signoff serve`'s: the person at the keyboard may approve their
own run's calls, unless the approval policy's rule says otherwise."""


@deciding_command()
@click.argument("goal")
@RUN_OPTIONS
def run(goal: str, quiet: bool, user: str, **flags: Any) -> int:
    """Run GOAL in the terminal with the configured model and tools.

    Every call the approval policy asks about (by default every side effect) is shown as Slack
    would show it and waits for an answer: approve [a]; approve and allow similar calls for a
    while [s], where the rule offers a grant; deny [d] (then a reason, which the model is told);
    edit [e] the call's arguments, one at a time (then it is asked about afresh); or quit [q] (the
    run stays paused in the database; `signoff runs resume` continues it). Answers may be piped,
    one a line; the end of input counts as quit. A rule with `confirm` has you type the tool's name
    to approve; where a rule needs several approvals, yours counts as one and the run stays paused
    for the others. Calls a rule allows or refuses say so.

    """
    settings = load_settings(flags)
    return run_in_terminal(settings, goal, user=user, quiet=quiet, demo=False)


@deciding_command()
@click.argument("goal", default=DEMO_GOAL)
@RUN_OPTIONS
def demo(goal: str, quiet: bool, user: str, **flags: Any) -> int:
    """A run with zero configuration: a scripted model (not a real one), the built-in demo tools,
    the demo's approval policy and a SQLite file (./signoff-demo.db) created on first use.

    The script looks up the customer's orders, searches the handbook, then proposes an email
    (it waits for your answer), a $42 refund (the policy's rule small-refunds lets it run) and
    a $129 goodwill refund (rule large-refunds refuses it). The email lands as an .eml file in
    ./signoff-demo-outbox, the refund in ./signoff-demo-outbox/refunds.jsonl. Every demo starts
    from a fresh world: it forgets the earlier demos' refunds (their runs and emails stay).
    Ignores SIGNOFF_* variables; the flags still apply (--policy FILE to try your own rules;
    --outbox DIR writes into DIR and keeps the refunds already there). To answer without a terminal:

    \b
        printf 'a\\n' | signoff demo               # approve the email
        printf 'd\\ntoo early\\n' | signoff demo   # deny it, with the reason the model is told

    """
    from signoff.tools.demo.ledger import forget_refunds

    settings = load_settings(flags, demo=True)
    if settings.outbox == DEMO_OUTBOX:  # the demo's own world; an outbox given with --outbox is someone's
        forget_refunds(Path(settings.outbox))
    return run_in_terminal(settings, goal, user=user, quiet=quiet, demo=True)


def run_in_terminal(settings: Settings, goal: str, *, user: str, quiet: bool, demo: bool) -> int:
    from signoff.bot.cli.deciding import drive
    from signoff.bot.wiring import check_writable, masked
    from signoff.bot.words import model_label

    console = make_console(quiet)
    check_writable(settings.database_url)
    runner, notifier = terminal_runner(settings, console, auto_upgrade=may_create(settings.database_url, demo))
    console.say(f"model:    {model_label(settings.model)}")
    console.say(f"tools:    {', '.join(runner.tools)}")
    console.say(f"database: {masked(settings.database_url)}   outbox: {settings.outbox}")
    try:
        started = runner.start_run(goal, requester=user, origin={"source": TERMINAL_SOURCE, "user": user})
    except ValueError as exc:
        raise click.UsageError(f"GOAL: {exc}") from None
    hint = resume_hint(started.run_id, settings, demo)
    try:
        final = drive(runner, started.run_id, console, notifier, user, settle=False)
    except KeyboardInterrupt:
        # Caught here, where the run is known: click would turn it into a bare "Aborted!".
        raise Interrupted(hint) from None
    return finish(console, final, hint, runner.store.executions(final.run_id))


def terminal_runner(settings: Settings, console: Console, *, store: Store | None = None,
                    auto_upgrade: bool | None = None) -> tuple[Runner, TerminalNotifier]:
    """A runner that tells `console`, where the person at the keyboard decides (their own runs too)."""
    from signoff.bot.cli.notifier import TerminalNotifier
    from signoff.bot.observe.logs import LogObserver
    from signoff.bot.wiring import build_runner, load_tools, model_env, runner_config

    tools = load_tools(settings)
    config = runner_config(settings, **IN_TERMINAL)
    notifier = TerminalNotifier(console, tools, redact_keys=config.redact_keys)
    # The run's story is logged at INFO, as serve logs it: shown with --debug (or SIGNOFF_LOG_LEVEL=INFO).
    runner = build_runner(settings, notifier, env=model_env(os.environ), tools=tools, config=config, store=store,
                          auto_upgrade=auto_upgrade, observer=LogObserver())
    return runner, notifier


def resume_hint(run_id: str, settings: Settings, demo: bool) -> str:
    """The `runs resume` command line, with the flags that differ from what it would read by itself."""
    from signoff.bot.settings import ENV_VARS
    from signoff.bot.wiring import masked

    base: Mapping[str, str] = demo_env() if demo else os.environ
    command = f"signoff runs resume {run_id}" + (" --demo" if demo else "")
    for flag, name, value in (("--tools", "SIGNOFF_TOOLS", settings.tools),
                              ("--mcp-config", "SIGNOFF_MCP_CONFIG", settings.mcp_config or ""),
                              ("--outbox", "SIGNOFF_OUTBOX", settings.outbox),
                              ("--policy", "SIGNOFF_POLICY", settings.policy or ""),
                              ("--database-url", "SIGNOFF_DATABASE_URL", settings.database_url)):
        if value != (base.get(name, "").strip() or ENV_VARS[name]):
            command += f" {flag} {masked(value) if name == 'SIGNOFF_DATABASE_URL' else value}"
    return command
