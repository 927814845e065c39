"""`signoff`: run, decide and inspect runs in the terminal; check, migrate and serve.

Exit codes: 0 done (or the command succeeded), 1 error, 2 bad usage, 3 the run is paused waiting
for a person, 4 the run stopped without an answer (budget, failure, reconciliation, cancelled, expired),
5 the run is done but every side effect that was let run (by a person or a rule) failed, 130
interrupted (Ctrl-C; a run being decided continues with `signoff runs resume`).

Each command's module is imported when that command runs, so `signoff --help` (and a typo) answers
without loading SQLAlchemy, the model adapters, MCP or Slack; this module imports the runtime only
where a command has run (its error report, its logging).
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
import sys
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from signoff.bot.cli.envfile import EnvFile, load_env_file
from signoff.bot.cli.outcomes import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, Interrupted

__all__ = ["CliState", "cli", "main"]

COMMANDS: Mapping[str, tuple[str, str]] = {
    "run": ("signoff.bot.cli.running:run", "Run a goal here; you approve its side effects."),
    "demo": ("signoff.bot.cli.running:demo", "A run with zero configuration: scripted model, demo tools."),
    "runs": ("signoff.bot.cli.runs:runs", "List, show, export, resume and replay stored runs."),
    "audit": ("signoff.bot.cli.audit:audit", "Check the audit log's hash chains; export it to check later."),
    "tools": ("signoff.bot.cli.toolview:tools", "Every tool the model will see, and how each is gated."),
    "policy": ("signoff.bot.cli.policy_group:policy", "What the approval policy decides for a call, and why."),
    "db": ("signoff.bot.cli.ops:db", "Create or upgrade the database schema."),
    "check": ("signoff.bot.cli.ops:check", "Check settings, tools, policy, database, Slack and model."),
    "manifest": ("signoff.bot.cli.ops:manifest", "Print the Slack app manifest."),
    "serve": ("signoff.bot.cli.ops:serve", "Run the Slack bot."),
    "hook": ("signoff.bot.cli.hook:hook", "Answer an agent's hook (Claude Code) from Signoff's approvals."),
    "keys": ("signoff.bot.cli.keys:keys", "Keys programs ask for approvals with (the approval API)."),
    "grants": ("signoff.bot.cli.grants:grants", "Grants made by \"Approve + allow similar\": list, revoke."),
    "receipts": ("signoff.bot.cli.receipts:receipts", "Signed receipts of decisions: the public keys to check them."),
    "gateway": ("signoff.bot.cli.gateway:gateway", "Gate MCP servers: every tool call is decided in Signoff first."),
}
"""Each command: where it lives ("module:attribute"), and its line in `signoff --help`."""
UNLISTED: frozenset[str] = frozenset()
"""Commands that run but `signoff --help` does not list (none now)."""


@dataclasses.dataclass
class CliState:
    """What `main` found before the command ran, for the commands that report it."""

    env_file: EnvFile | None = None
    debug: bool = False
    flag_for: dict[str, str] = dataclasses.field(default_factory=dict)
    """The settings a flag gave, and the flag: `{"SIGNOFF_POLICY": "--policy"}`."""

    def naming_flags(self, message: str) -> str:
        """`SIGNOFF_POLICY: cannot read x.yaml` as `--policy: cannot read x.yaml` when --policy gave
        it: an error names the setting it is about (`NAME: problem`), and here a flag was typed."""
        for name, flag in self.flag_for.items():
            message = message.replace(f"{name}: ", f"{flag}: ")
        return message


class LazyGroup(click.Group):
    """A group whose commands are imported only when one is run (or asked for its help)."""

    def __init__(self, *args: Any, lazy: Mapping[str, tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy and cmd_name not in self.commands:
            module, _, attribute = self.lazy[cmd_name][0].partition(":")
            command = getattr(importlib.import_module(module), attribute)
            assert isinstance(command, click.Command), f"{self.lazy[cmd_name][0]} is not a click command"
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # The listing's own lines, so listing the commands imports none of them.
        rows = [(name, self.lazy[name][1]) for name in self.list_commands(ctx) if name not in UNLISTED]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def main(argv: list[str] | None = None) -> None:
    """The `signoff` console script: one line on stderr for errors, a traceback only with --debug."""
    state = CliState(env_file=load_env_file(os.environ, Path.cwd()))
    try:
        code = _run(argv, state)
    except click.UsageError as exc:
        exc.show()
        code = exc.exit_code
    except click.ClickException as exc:
        click.echo(f"error: {exc.format_message()}", err=True)
        code = exc.exit_code
    except Interrupted as exc:
        _interrupted(f"the run continues with `{exc.resume}`")
        code = EXIT_INTERRUPTED
    except click.Abort as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt):  # Ctrl-C where no run was being decided
            _interrupted("nothing was left half done")
            code = EXIT_INTERRUPTED
        else:
            click.echo("aborted", err=True)
            code = EXIT_ERROR
    except BrokenPipeError:
        # The reader went away (`signoff runs export ... | head`); say nothing more to it.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = EXIT_ERROR
    except KeyboardInterrupt:
        _interrupted("a run in progress continues with `signoff runs resume`")
        code = EXIT_INTERRUPTED
    except Exception as exc:
        _report(exc, state)
        code = EXIT_ERROR
    sys.exit(code if isinstance(code, int) else EXIT_OK)


def _interrupted(what_now: str) -> None:
    if sys.stderr.isatty():
        click.echo(err=True)  # end the line the prompt and the terminal's ^C left open
    click.echo(f"interrupted; {what_now}", err=True)


def _run(argv: list[str] | None, state: CliState) -> object:
    """The command, then the MCP servers it started stopped, however it ended."""
    try:
        return cli.main(args=argv, prog_name="signoff", standalone_mode=False, obj=state)
    finally:
        wiring = sys.modules.get("signoff.bot.wiring")
        if wiring is not None:  # not loaded: no command that starts MCP servers ran
            wiring.stop_mcp_servers()


def _report(exc: Exception, state: CliState) -> None:
    # Imported only now: `signoff --help` must not load SQLAlchemy, nor the runtime.
    from sqlalchemy.exc import SQLAlchemyError

    from signoff.bot.cli.rendering import one_line
    from signoff.runtime.errors import SignoffError

    if state.debug:
        traceback.print_exception(exc)
    bug = not isinstance(exc, SignoffError | SQLAlchemyError | OSError)
    if isinstance(exc, SQLAlchemyError):
        orig = getattr(exc, "orig", None)
        text = (str(orig) if orig is not None else str(exc)).strip().splitlines()
        message = f"database: {text[0] if text else type(exc).__name__}"
    elif bug:
        message = f"unexpected {type(exc).__name__}: {exc}"
    else:
        message = state.naming_flags(str(exc) or type(exc).__name__)
    hint = " (--debug shows the traceback)" if bug and not state.debug else ""
    click.echo(f"error: {one_line(message, 2000)}{hint}", err=True)


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="signoff", prog_name="signoff", message="%(prog)s %(version)s",
                      help="Print the installed version and exit.")
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")
@click.pass_obj
def cli(state: CliState, debug: bool) -> None:
    """Signoff: a tool-using agent whose side effects wait for a human's approval.

    Settings come from SIGNOFF_* and SLACK_* variables, and from a .env file in the working
    directory for those the environment does not set; flags override them. Every setting is in
    docs/getting-started.md.
    """
    state.debug = debug
    # Imported only now, as a command is about to run: `signoff --help` and `--version` need no logging.
    from signoff.bot.observe.logs import configure_logging

    # Replaced by `signoff serve` once its settings are read (a basicConfig here would keep its own).
    configure_logging(logging.DEBUG if debug else logging.WARNING)
