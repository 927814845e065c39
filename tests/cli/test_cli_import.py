"""`signoff --help`, `--version` and the help of every command answer from a new process without
loading what they do not need. What each one loaded is read from `sys.modules` after it answered;
how long it took is bench/startup.py's to say, not a test's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest

from signoff.bot.cli import COMMANDS, cli

NOT_FOR_USAGE = ("signoff.runtime", "signoff.tools", "signoff.bot.observe", "signoff.bot.wiring",
                 "signoff.bot.words", "celpy", "lark", "yaml", "dotenv", "sqlalchemy", "alembic", "slack_bolt",
                 "slack_sdk", "httpx", "mcp", "jsonschema", "prometheus_client")
"""What saying how to use `signoff` needs none of: the engine, the tools, the policy language, YAML,
the .env reader, logging, the database, Slack and HTTP."""

ONLY_TO_RUN = ("sqlalchemy", "alembic", "slack_bolt", "slack_sdk", "httpx", "mcp", "openai", "anthropic",
               "gunicorn", "apscheduler", "jsonschema", "prometheus_client", "signoff.bot.wiring",
               "signoff.bot.slack", "signoff.bot.cli.deciding", "signoff.bot.cli.stored", "signoff.runtime.adapters",
               "signoff.runtime.models", "signoff.runtime.runner", "signoff.tools.registry",
               "signoff.tools.demo", "signoff.tools.mcp", "signoff.tools.http")
"""What only running a command needs: the store, Slack, HTTP, MCP, the models, the runner and the tools."""

# `signoff ARGS` in a new interpreter; then its exit code, what it printed, and the modules of
# `sys.argv[1]` (comma-separated; a package counts with its modules) it had imported, as JSON on stderr.
PROBE = """
import contextlib, io, json, sys
from signoff.bot.cli import main
watched = tuple(sys.argv[1].split(","))
out = io.StringIO()
try:
    with contextlib.redirect_stdout(out):
        main(sys.argv[2:])
except SystemExit as exc:
    loaded = sorted(m for m in sys.modules if m in watched or m.startswith(tuple(w + "." for w in watched)))
    print(json.dumps({"code": exc.code, "out": out.getvalue(), "loaded": loaded}), file=sys.stderr)
"""


Found = dict[tuple[str, ...], dict[str, Any]]
"""For each command line: its exit code, what it printed and what it loaded."""


def probes(command_lines: list[tuple[str, ...]], watched: tuple[str, ...], cwd: Path) -> Found:
    """Each command line run at once in its own interpreter, in `cwd`: what it answered and loaded."""
    started = {args: subprocess.Popen([sys.executable, "-c", PROBE, ",".join(watched), *args], cwd=cwd,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for args in command_lines}
    found: Found = {}
    for args, process in started.items():
        _, err = process.communicate(timeout=300)
        found[args] = json.loads(err.strip().splitlines()[-1])
    return found


def every_command_help() -> list[tuple[str, ...]]:
    """`NAME --help` for every command, and `GROUP NAME --help` for each command of a group."""
    context = click.Context(cli)
    lines: list[tuple[str, ...]] = []
    for name in COMMANDS:
        command = cli.get_command(context, name)
        lines.append((name, "--help"))
        if isinstance(command, click.Group):
            lines += [(name, sub, "--help") for sub in command.list_commands(click.Context(command))]
    return lines


@pytest.mark.slow
def test_help_version_and_usage_load_none_of_the_engine_the_tools_or_logging(tmp_path: Path) -> None:
    found = probes([("--help",), ("-h",), ("--version",), (), ("no-such-command",)], NOT_FOR_USAGE, tmp_path)

    assert {args: probe["loaded"] for args, probe in found.items()} == {args: [] for args in found}
    helped, version = found[("--help",)], found[("--version",)]
    assert helped["code"] == 0 and helped["out"].startswith("Usage: signoff [OPTIONS]")
    assert version["code"] == 0 and version["out"].startswith("signoff ")
    assert found[("no-such-command",)]["code"] == 2


@pytest.mark.slow
def test_the_help_of_every_command_loads_nothing_only_running_it_needs(tmp_path: Path) -> None:
    lines = every_command_help()
    assert {("runs", "list", "--help"), ("db", "upgrade", "--help")} <= set(lines)  # the groups were read
    found = probes(lines, ONLY_TO_RUN, tmp_path)

    assert {args: probe["loaded"] for args, probe in found.items()} == {args: [] for args in lines}
    for args, probe in found.items():
        assert probe["code"] == 0, args
        assert probe["out"].startswith(f"Usage: signoff {' '.join(args[:-1])} "), probe["out"]


@pytest.mark.slow
def test_the_probe_sees_what_a_command_that_runs_loads(tmp_path: Path) -> None:
    # `runs list` with no database yet: it answers "no runs yet", having looked for the store.
    found = probes([("runs", "list")], ONLY_TO_RUN + NOT_FOR_USAGE, tmp_path)[("runs", "list")]

    assert found["code"] == 0 and found["out"].startswith("no runs yet")
    assert {"sqlalchemy", "signoff.bot.wiring", "signoff.bot.cli.stored"} <= set(found["loaded"])
