"""`signoff serve` and MCP servers: they start with the bot's tools, are stopped before gunicorn forks
(the start-up check) and when the bot closes, and leave no process behind."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp_harness import fault_server

from signoff.bot.settings import Settings
from signoff.bot.slack.serve import Parts, check, compose
from signoff.bot.wiring import open_store, stop_mcp_servers
from signoff.runtime.tool_calls import run_tool
from tests.fakes.slack import FakeSlack

pytestmark = pytest.mark.slow



@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    with FakeSlack() as fake:
        yield fake


def processes_running(marker: str) -> list[int]:
    """The processes whose command line mentions `marker` (a path unique to one test)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            found.append(int(proc.name))
    return found


def gone(marker: str, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while processes_running(marker):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_the_bot_starts_its_mcp_servers_and_stops_them_when_it_closes(slack, tmp_path):
    log = tmp_path / "faults.log"
    (tmp_path / "mcp.json").write_text(json.dumps({"mcpServers": {
        "faults": fault_server(log)}}))
    database = f"sqlite:///{tmp_path / 'signoff.db'}"
    open_store(database, auto_upgrade=True).close()
    settings = Settings.from_env({
        "SLACK_BOT_TOKEN": slack.token, "SLACK_SIGNING_SECRET": "s" * 12, "SLACK_API_URL": slack.url,
        "SIGNOFF_APPROVERS": "*", "SIGNOFF_DATABASE_URL": database, "SIGNOFF_TOOLS": "demo,mcp:faults",
        "SIGNOFF_MCP_CONFIG": str(tmp_path / "mcp.json"), "SIGNOFF_OUTBOX": str(tmp_path / "outbox"),
    })
    try:
        check(settings, {})  # what `signoff serve` does before gunicorn forks
        assert gone(str(log)), "the start-up check left its MCP server running across the fork"

        service = compose(settings, environ={}, parts=Parts(scheduler=False))
        tool = service.runner.tools["mcp__faults__whoami"]
        pid = run_tool(tool, {}, "run-serve:1")["pid"]
        assert processes_running(str(log)) == [pid]
        service.close()
        assert gone(str(log))
    finally:
        stop_mcp_servers()
