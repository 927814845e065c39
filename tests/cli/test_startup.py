"""What `signoff` does before a command runs: `--help` answers without loading the heavy parts, and
`signoff serve` says out loud when it would serve the scripted demo model."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import click
import pytest

from signoff.bot.cli import COMMANDS, cli
from tests.fakes.slack import FakeSlack

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


def test_help_lists_every_command_and_each_one_loads(signoff):
    result = signoff.here("--help")
    listed = result.out[result.out.index("Commands:"):].splitlines()[1:]

    assert [line.split()[0] for line in listed] == sorted(COMMANDS)
    context = click.Context(cli)
    for name in COMMANDS:
        command = cli.get_command(context, name)
        assert isinstance(command, click.Command) and command.name == name


@pytest.mark.slow
def test_serve_with_the_demo_model_says_so_at_start_up(signoff):
    with FakeSlack(token="xoxb-good") as slack:
        env = {"SLACK_BOT_TOKEN": "xoxb-revoked", "SLACK_SIGNING_SECRET": "s" * 12, "SLACK_API_URL": slack.url,
               "SIGNOFF_APPROVERS": "U0LEAD"}
        demo = signoff("serve", env=env)  # stops at the token check, after start-up has spoken
        (signoff.cwd / "script.json").write_text('[{"final": "ok"}]')
        configured = signoff("serve", env={**env, "SIGNOFF_MODEL": f"scripted:{signoff.cwd / 'script.json'}"})

    assert demo.code == configured.code == 1
    [warning] = [line for line in demo.err.splitlines() if "demo model" in line]
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z WARNING ", warning), warning  # timestamped
    assert "serving the scripted demo model, not a real one with the demo tools: set SIGNOFF_MODEL" in warning
    assert demo.err.rstrip().endswith("error: SLACK_BOT_TOKEN: Slack refused it (invalid_auth)")
    assert "demo model" not in configured.err
