"""The real `signoff` CLI in a subprocess with MCP servers: an approval answered on stdin commits to a
throwaway repository through `mcp-server-git`; `signoff tools` and `signoff check` show each tool's
gate; nothing is left running and nothing is printed at exit."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp_harness import commits, fault_server, git_server, make_repo

pytestmark = pytest.mark.slow

_SCRUBBED = ("SIGNOFF_", "SLACK_", "OPENAI_", "ANTHROPIC_")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


@pytest.fixture
def signoff(tmp_path: Path, repo: Path):
    """`signoff ARGS` in `tmp_path` with git and fault servers configured, a scripted model and a fresh database."""
    config = {"mcpServers": {
        "git": git_server(repo),
        "faults": fault_server(tmp_path / "faults.log",
                               tools={"count_notes": {"side_effect": False}, "slow_write": {"timeout": 5}}),
    }}
    (tmp_path / "mcp.json").write_text(json.dumps(config))
    env = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUBBED)}
    env.update(SIGNOFF_MCP_CONFIG="mcp.json", SIGNOFF_TOOLS="mcp:*", SIGNOFF_MODEL=f"scripted:{tmp_path / 'script.json'}",
               SIGNOFF_DATABASE_URL=f"sqlite:///{tmp_path / 'signoff.db'}")

    def run(*args: str, answers: str | None = None, script: list[dict[str, Any]] | None = None
            ) -> subprocess.CompletedProcess[str]:
        if script is not None:
            (tmp_path / "script.json").write_text(json.dumps(script))
        return subprocess.run([sys.executable, "-m", "signoff.bot.cli", *args], cwd=tmp_path, env=env,
                              input=answers, stdin=None if answers is not None else subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=120)

    run("db", "upgrade")
    return run


def commit_script(repo: Path) -> list[dict[str, Any]]:
    return [
        {"tool": "mcp__faults__whoami", "args": {}},
        {"tool": "mcp__git__git_status", "args": {"repo_path": str(repo)}},
        {"tool": "mcp__git__git_add", "args": {"repo_path": str(repo), "files": ["notes.txt"]}},
        {"tool": "mcp__git__git_commit", "args": {"repo_path": str(repo), "message": "Add notes"}},
        {"final": "Committed notes.txt."},
    ]


def test_signoff_run_asks_before_git_add_and_git_commit_and_commits_once(signoff, repo):
    done = signoff("run", "Commit the notes", answers="a\na\n", script=commit_script(repo))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == ""  # no warning, no traceback at shutdown
    out = done.stdout
    assert out.count("Approval needed:") == 2
    assert "Approval needed: mcp__git__git_commit" in out and 'message: "Add notes"' in out
    assert "Changes committed successfully" in out and out.rstrip().endswith("done: Committed notes.txt.")
    assert commits(repo) == ["Add notes"]
    pid = int(re.search(r'"pid": (\d+)', out).group(1))
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the servers stopped with the command


def test_a_commit_left_waiting_is_resumed_later_with_the_servers_started_again(signoff, repo):
    paused = signoff("run", "Commit the notes", answers="a\nq\n", script=commit_script(repo))
    assert paused.returncode == 3, paused.stdout + paused.stderr
    assert commits(repo) == []
    run_id = re.search(r"(run-[0-9a-f]{10})", paused.stdout).group(1)
    resumed = signoff("runs", "resume", run_id, answers="a\n")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert commits(repo) == ["Add notes"] and resumed.stderr == ""


def test_signoff_tools_prints_every_tool_with_its_gate_and_where_it_came_from(signoff):
    done = signoff("tools")
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line for line in done.stdout.splitlines() if line.startswith("mcp__")}
    assert len([name for name in rows if name.startswith("mcp__git__")]) == 12
    assert re.search(r"read-only +- +30s +gate: annotation · timeout: default +Shows the working tree status",
                     rows["mcp__git__git_status"])
    assert re.search(r"approval +not idempotent +30s +gate: annotation · idempotent: annotation",
                     rows["mcp__git__git_commit"])
    assert re.search(r"approval +not idempotent +30s +gate: default · idempotent: default", rows["mcp__faults__append_note"])
    assert re.search(r"approval .* 5s +gate: default · idempotent: default · timeout: override",
                     rows["mcp__faults__slow_write"])
    assert ('note: mcp__faults__count_notes: override refused: "side_effect": false needs "trusted": true '
            "on the server") in done.stdout


def test_signoff_check_lists_each_server_with_its_tools_and_names_one_that_does_not_start(signoff, tmp_path):
    config = json.loads((tmp_path / "mcp.json").read_text())
    config["mcpServers"]["broken"] = {"command": "no-such-mcp-server"}
    (tmp_path / "mcp.json").write_text(json.dumps(config))
    done = signoff("check")
    lines = done.stdout.splitlines()
    assert done.returncode == 1
    assert any(re.match(r"ok mcp git: .*mcp_server_git --repository .* -> 12 tools$", line) for line in lines)
    assert any(re.match(r" +mcp__git__git_commit +approval \(annotation\), not idempotent \(annotation\), 30s", line)
               for line in lines)
    assert "FAIL mcp broken: no-such-mcp-server: could not start: no-such-mcp-server: command not found" in lines
    assert any(line.startswith("ok tools: mcp:* -> ") is False and line.startswith("FAIL tools: ")
               and "server broken could not start" in line for line in lines)
