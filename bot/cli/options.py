"""What the `signoff` commands share: their flags, the settings those override, the demo's fixed
configuration, the help texts, and the console.

Every command's `--help` imports this module: the settings and what it needs of the runtime (the
database URL rules, the demo's files) are imported inside the functions that use them.
"""

from __future__ import annotations

import getpass
import inspect
import os
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import click

from signoff.bot.cli import CliState
from signoff.bot.cli.console import Console

if TYPE_CHECKING:
    from signoff.bot.settings import Settings

DEMO_DATABASE_URL = "sqlite:///signoff-demo.db"
DEMO_OUTBOX = "./signoff-demo-outbox"
"""Beside the demo's database, apart from the `./outbox` that `signoff run` and `signoff serve` share:
each `signoff demo` empties its refund ledger, and no one else's refunds are in it."""
DEMO_GOAL = "Ada Lovelace says order A-1001 arrived damaged. Refund her and let her know."


def demo_env() -> dict[str, str]:
    """The demo's whole configuration; it reads no SIGNOFF_* or SLACK_* variable. Its approval
    policy: small refunds run unasked, large ones are refused, the rest ask."""
    from signoff.bot.wiring import PACKAGE_DIR
    from signoff.bot.words import DEMO_MODEL

    return {"SIGNOFF_DATABASE_URL": DEMO_DATABASE_URL, "SIGNOFF_MODEL": DEMO_MODEL, "SIGNOFF_TOOLS": "demo",
            "SIGNOFF_OUTBOX": DEMO_OUTBOX, "SIGNOFF_POLICY": str(PACKAGE_DIR / "demo_policy.yaml")}

FLAG_VARS = {
    "model": "SIGNOFF_MODEL", "tools": "SIGNOFF_TOOLS", "max_steps": "SIGNOFF_MAX_STEPS",
    "max_tool_calls": "SIGNOFF_MAX_TOOL_CALLS", "max_tokens": "SIGNOFF_MAX_TOKENS",
    "max_cost_usd": "SIGNOFF_MAX_COST_USD", "max_seconds": "SIGNOFF_MAX_SECONDS",
    "database_url": "SIGNOFF_DATABASE_URL", "outbox": "SIGNOFF_OUTBOX", "mcp_config": "SIGNOFF_MCP_CONFIG",
    "policy": "SIGNOFF_POLICY",
}
EXIT_CODES_HELP = (
    "\b\nExit codes: 0 done, 1 error, 2 bad usage, 3 paused waiting for a decision\n"
    "(resume with `signoff runs resume`), 4 stopped without an answer (budget, failure,\n"
    "unknown outcome, cancelled, expired), 5 done, but every approved call failed,\n"
    "130 interrupted (Ctrl-C; the run continues with `signoff runs resume`)."
)
TERMINAL_APPROVER_HELP = (
    "In the terminal the person at the keyboard is the approver: decisions are recorded as --user, "
    "who may approve their own run's side effects here (unlike in Slack) unless the approval policy says otherwise."
)


def with_approver_note(help_text: str | None) -> str:
    # Dedent first: click dedents a docstring as a whole, and the note has no indentation of its own.
    return inspect.cleandoc(help_text or "") + "\n\n" + TERMINAL_APPROVER_HELP


def deciding_command(name: str | None = None) -> Callable[[Callable[..., Any]], click.Command]:
    """`click.command` for a command where the person at the keyboard decides: its docstring, then
    `TERMINAL_APPROVER_HELP`, as its help; and the exit codes as its epilog."""
    def build(function: Callable[..., Any]) -> click.Command:
        return click.command(name, help=with_approver_note(function.__doc__), epilog=EXIT_CODES_HELP)(function)

    return build


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


def _database_url(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    from signoff.bot.wiring import url_problem
    from signoff.database_url import sqlalchemy_database_url

    url = sqlalchemy_database_url(value)
    problem = url_problem(url)
    if problem is not None:
        raise click.BadParameter(problem, ctx, param)  # names the flag, not SIGNOFF_DATABASE_URL
    return url


_POSITIVE_INT, _POSITIVE = click.IntRange(min=1), click.FloatRange(min=0, min_open=True)
DATABASE_URL = click.option("--database-url", callback=_database_url,
                            help="SQLAlchemy URL of the run store (overrides SIGNOFF_DATABASE_URL).")
TOOLS = click.option("--tools", help="Toolsets, comma-separated: demo, mcp:<server> (mcp:* for every server in "
                                     "SIGNOFF_MCP_CONFIG), http:<api> (http:* for every API in SIGNOFF_HTTP_TOOLS) "
                                     "or package.module:attribute (overrides SIGNOFF_TOOLS).")
MCP_CONFIG = click.option("--mcp-config", help="JSON file of MCP servers (overrides SIGNOFF_MCP_CONFIG).")
POLICY = click.option("--policy", metavar="PATH",
                       help="YAML file of approval rules (overrides SIGNOFF_POLICY; see `signoff policy explain`).")
OUTBOX = click.option("--outbox", help="Directory for the demo send_email .eml files and refund ledger.")
QUIET = click.option("--quiet", "-q", is_flag=True, help="Print only the outcome line.")
USER = click.option("--user", default=default_user, show_default="cli:$USER",
                    help="Who starts and decides, as recorded in the audit log.")
DEMO = click.option("--demo", is_flag=True,
                    help=f"Use the demo's configuration ({DEMO_DATABASE_URL}, {DEMO_OUTBOX}, demo tools and policy), "
                         "as `signoff demo` does.")
RUN_OPTIONS = options(
    click.option("--model", help="Model spec: openai:<model>, anthropic:<model> or scripted:<path>."),
    TOOLS, MCP_CONFIG,
    click.option("--max-steps", type=_POSITIVE_INT, help="Budget: model calls."),
    click.option("--max-tool-calls", type=_POSITIVE_INT, help="Budget: tool executions."),
    click.option("--max-tokens", type=_POSITIVE_INT, help="Budget: input plus output tokens."),
    click.option("--max-cost-usd", type=_POSITIVE, help="Budget: model cost in US dollars."),
    click.option("--max-seconds", type=_POSITIVE, help="Budget: seconds spent running."),
    DATABASE_URL, OUTBOX, POLICY, QUIET, USER,
)
"""The flags `run` and `demo` share; each overrides its SIGNOFF_* variable."""


def load_settings(flags: Mapping[str, Any], *, demo: bool = False) -> Settings:
    """Settings from the environment (or the demo's fixed configuration), flags taking precedence."""
    from signoff.bot.settings import Settings

    base: Mapping[str, str] = demo_env() if demo else os.environ
    given = {name: value for name, value in flags.items() if name in FLAG_VARS and value is not None}
    context = click.get_current_context(silent=True)
    state = context.find_object(CliState) if context is not None else None
    if state is not None:
        state.flag_for.update({FLAG_VARS[name]: "--" + name.replace("_", "-") for name in given})
    return Settings.from_env({**base, **{FLAG_VARS[name]: str(value) for name, value in given.items()}})


def is_zero_config(database_url: str, demo: bool) -> bool:
    """The SQLite file `signoff run` (or `signoff demo`) uses when nothing is configured."""
    from signoff.bot.wiring import is_default_sqlite

    return is_default_sqlite(database_url) or (demo and database_url == DEMO_DATABASE_URL)


def may_create(database_url: str, demo: bool) -> bool:
    """Whether a command that writes runs may create the database or upgrade its schema: the
    zero-configuration files, and a SQLite file that does not exist yet, anywhere. A database that
    exists (PostgreSQL, someone's SQLite file) is never changed without `signoff db upgrade`."""
    from signoff.bot.wiring import is_new_sqlite

    return is_zero_config(database_url, demo) or is_new_sqlite(database_url)


def make_console(quiet: bool) -> Console:
    typing = sys.stdin.isatty()  # a person types the answers, and sees what they answer
    return Console(sys.stdout, sys.stdin, quiet=quiet, echo_answers=not typing, interactive=typing)
