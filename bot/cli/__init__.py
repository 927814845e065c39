"""`signoff`: run, decide and inspect runs in the terminal; check, migrate and serve.

Exit codes: 0 done (or the command succeeded), 1 error, 2 bad usage, 3 the run is paused waiting
for a person, 4 the run stopped without an answer (budget, failure, reconciliation, cancelled, expired).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import traceback

import click
from sqlalchemy.exc import SQLAlchemyError

from signoff.bot.cli.ops import check, db, manifest, serve
from signoff.bot.cli.outcomes import EXIT_ERROR, EXIT_OK
from signoff.bot.cli.policy import policy
from signoff.bot.cli.rendering import one_line
from signoff.bot.cli.running import demo, run
from signoff.bot.cli.runs import runs
from signoff.bot.cli.toolview import tools
from signoff.bot.wiring import stop_mcp_servers
from signoff.runtime.errors import SignoffError

__all__ = ["cli", "main"]


@dataclasses.dataclass
class Options:
    debug: bool = False


def main(argv: list[str] | None = None) -> None:
    """The `signoff` console script: one line on stderr for errors, a traceback only with --debug."""
    options = Options()
    try:
        code = _run(argv, options)
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


def _run(argv: list[str] | None, options: Options) -> object:
    """The command, then the MCP servers it started stopped, however it ended."""
    try:
        return cli.main(args=argv, prog_name="signoff", standalone_mode=False, obj=options)
    finally:
        stop_mcp_servers()


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


@click.group(commands=[run, demo, runs, tools, policy, db, check, manifest, serve],
             context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")
@click.pass_obj
def cli(options: Options, debug: bool) -> None:
    """Signoff: a tool-using agent whose side effects wait for a human's approval.

    Settings come from SIGNOFF_* and SLACK_* variables (see README); flags override them.
    """
    options.debug = debug
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
