"""What `signoff` does before a command runs: `--help` answers without loading the heavy parts.

(What `signoff serve` says of the scripted demo model is in test_serve_demo_warning.py.)"""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest

from signoff.bot.cli import COMMANDS, UNLISTED, cli

HEAVY = ("sqlalchemy", "alembic", "slack_bolt", "slack_sdk", "mcp", "openai", "anthropic", "httpx", "gunicorn",
         "apscheduler", "mako", "jsonschema", "signoff.bot.wiring", "signoff.bot.slack", "signoff.runtime.models",
         "signoff.runtime.adapters", "signoff.tools.mcp", "signoff.tools.demo")
"""Modules only a command that runs something needs (SQL, Slack, models, MCP, the tools)."""

# `signoff ARGS` in a fresh interpreter, then which of HEAVY it had imported, as JSON on stderr.
PROBE = """
import json, sys
from signoff.bot.cli import main
heavy = tuple(sys.argv[1].split(","))
try:
    main(sys.argv[2:])
except SystemExit as exc:
    loaded = sorted(m for m in sys.modules if m in heavy or m.startswith(tuple(h + "." for h in heavy)))
    print(json.dumps({"code": exc.code, "loaded": loaded}), file=sys.stderr)
"""


def imported_by(*args: str, cwd) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, ",".join(HEAVY), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120)
    return json.loads(done.stderr.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("args", [("--help",), ("-h",), ("no-such-command",), ()], ids=" ".join)
def test_help_and_usage_errors_load_no_heavy_module(args, tmp_path):
    probe = imported_by(*args, cwd=tmp_path)

    assert probe["loaded"] == []
    assert probe["code"] in (0, 2)


@pytest.mark.slow
def test_the_probe_sees_a_command_that_does_load_them(tmp_path):
    probe = imported_by("runs", "list", cwd=tmp_path)

    assert probe["code"] == 0
    assert "sqlalchemy" in probe["loaded"] and "signoff.bot.wiring" in probe["loaded"]


def test_help_lists_every_command_but_the_unlisted_and_each_one_loads(signoff):
    result = signoff.here("--help")
    listed = result.out[result.out.index("Commands:"):].splitlines()[1:]

    assert [line.split()[0] for line in listed] == sorted(set(COMMANDS) - UNLISTED)
    context = click.Context(cli)
    for name in COMMANDS:
        command = cli.get_command(context, name)
        assert isinstance(command, click.Command) and command.name == name


@pytest.mark.slow
@pytest.mark.parametrize("args", [("runs", "list"), ("runs", "show", "run-none")], ids=" ".join)
def test_read_commands_load_none_of_the_replay_machinery(args, tmp_path):
    replaying = ("signoff.runtime.replay", "signoff.bot.cli.replays", "signoff.bot.cli.running")
    probe = subprocess.run([sys.executable, "-c", PROBE, ",".join(replaying), *args], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)

    assert json.loads(probe.stderr.strip().splitlines()[-1])["loaded"] == []
