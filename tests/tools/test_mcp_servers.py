"""MCP servers for real, as subprocesses: the reference `mcp-server-git` on a throwaway repository and
`mcp-server-time` from PyPI, and a fault server of our own (`mcp_fault_server.py`), driven through
the real runner with a scripted model, as `signoff run` and `signoff serve` drive them."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_harness import FAULT_SERVER, commits, fault_server, git_server, make_repo

from signoff.bot.settings import Settings
from signoff.bot.wiring import build_runner, load_tools, mcp_servers, runner_config, stop_mcp_servers
from signoff.runtime.errors import ConfigError
from signoff.runtime.runner import Runner
from signoff.runtime.tool_calls import ToolTimeout, run_tool
from signoff.tools.base import Tool, ToolFailed, ToolOutcomeUnknown

pytestmark = pytest.mark.slow

USER = "cli:ana"


# -- the world: a repository, a configuration, a runner ---------------------------------------------


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


class World:
    """A configuration file, a script for the scripted model, and the runner `signoff run` would build."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.log = tmp_path / "faults.log"

    def settings(self, servers: dict[str, Any], script: list[dict[str, Any]] | None = None,
                 tools: str = "mcp:*") -> Settings:
        config, script_path = self.tmp_path / "mcp.json", self.tmp_path / "script.json"
        config.write_text(json.dumps({"mcpServers": servers}))
        script_path.write_text(json.dumps(script or [{"final": "nothing to do"}]))
        return Settings.from_env({
            "SIGNOFF_DATABASE_URL": f"sqlite:///{self.tmp_path / 'signoff.db'}", "SIGNOFF_TOOLS": tools,
            "SIGNOFF_MODEL": f"scripted:{script_path}", "SIGNOFF_MCP_CONFIG": str(config),
            "SIGNOFF_OUTBOX": str(self.tmp_path / "outbox"),
        })

    def tools(self, servers: dict[str, Any], tools: str = "mcp:*") -> dict[str, Tool]:
        return load_tools(self.settings(servers, tools=tools), environ={})

    def runner(self, servers: dict[str, Any], script: list[dict[str, Any]]) -> Runner:
        settings = self.settings(servers, script)
        tools = load_tools(settings, environ={})
        return build_runner(settings, None, env={}, tools=tools, auto_upgrade=True,
                            config=runner_config(settings, allow_self_approval=True))

    def logged(self, tool: str | None = None) -> list[dict[str, Any]]:
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return [entry for entry in map(json.loads, lines) if tool is None or entry["tool"] == tool]


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    yield World(tmp_path)
    stop_mcp_servers()


def drive(runner: Runner, run_id: str, answers: list[bool]) -> str:
    """Execute the run, answering each approval from `answers` in turn, until it stops; its status."""
    while True:
        runner.execute(run_id)
        run = runner.get_run(run_id)
        assert run is not None
        if run.status != "awaiting_approval" or not answers:
            return run.status
        approval = runner.pending_approval(run_id)
        assert approval is not None
        runner.decide(approval.approval_id, approval.digest, USER, approved=answers.pop(0))


def start(runner: Runner, answers: list[bool]) -> tuple[str, str]:
    run = runner.start_run("work on the repository", requester=USER)
    return run.run_id, drive(runner, run.run_id, answers)


def tool_entries(runner: Runner, run_id: str) -> list[dict[str, Any]]:
    run = runner.get_run(run_id)
    assert run is not None
    return [entry for entry in run.state["history"] if entry["role"] == "tool"]


def eventually(check: Callable[[], bool], seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "it did not happen in time"
        time.sleep(0.1)


# -- mcp-server-git and mcp-server-time -------------------------------------------------------------


def test_git_status_runs_unasked_and_add_and_commit_wait_for_approval_then_commit_once(world, repo):
    script = [
        {"tool": "mcp__git__git_status", "args": {"repo_path": str(repo)}},
        {"tool": "mcp__git__git_add", "args": {"repo_path": str(repo), "files": ["notes.txt"]}},
        {"tool": "mcp__git__git_commit", "args": {"repo_path": str(repo), "message": "Add notes"}},
        {"final": "committed"},
    ]
    runner = world.runner({"git": git_server(repo)}, script)
    run_id, status = start(runner, [])
    assert status == "awaiting_approval"
    [status_result] = tool_entries(runner, run_id)
    assert "notes.txt" in status_result["result"]
    assert runner.pending_approval(run_id).tool == "mcp__git__git_add"

    assert drive(runner, run_id, [True]) == "awaiting_approval"
    approval = runner.pending_approval(run_id)
    assert approval.tool == "mcp__git__git_commit" and approval.args["message"] == "Add notes"
    assert commits(repo) == []  # nothing is committed before someone says so

    assert drive(runner, run_id, [True]) == "done"
    assert commits(repo) == ["Add notes"]
    assert drive(runner, run_id, [True]) == "done" and commits(repo) == ["Add notes"]
    assert "Changes committed successfully" in tool_entries(runner, run_id)[-1]["result"]


def test_a_denied_git_add_stages_nothing(world, repo):
    script = [{"tool": "mcp__git__git_add", "args": {"repo_path": str(repo), "files": ["notes.txt"]}},
              {"final": "left it"}]
    runner = world.runner({"git": git_server(repo)}, script)
    assert start(runner, [False])[1] == "done"
    staged = subprocess.run(["git", "diff", "--cached", "--name-only"], cwd=repo, capture_output=True, text=True)
    assert staged.stdout == ""


def test_the_model_sees_the_servers_schema_and_bad_arguments_never_reach_an_approver(world, repo):
    script = [{"tool": "mcp__git__git_commit", "args": {"repo_path": str(repo), "message": "x", "amend": True}},
              {"final": "gave up"}]
    runner = world.runner({"git": git_server(repo)}, script)
    schema = runner.tools["mcp__git__git_commit"].json_schema()
    assert schema["required"] == ["repo_path", "message"]
    run_id, status = start(runner, [])
    assert status == "done" and runner.pending_approval(run_id) is None
    [refused] = tool_entries(runner, run_id)
    assert refused["error_kind"] == "invalid_args" and "amend: Extra inputs are not permitted" in refused["error"]


def test_the_time_server_is_read_only_and_answers_with_structured_content(world):
    tools = world.tools({"time": {"command": sys.executable, "args": ["-m", "mcp_server_time"]}})
    assert sorted(tools) == ["mcp__time__convert_time", "mcp__time__get_current_time"]
    assert not any(tool.side_effect for tool in tools.values())
    now = run_tool(tools["mcp__time__get_current_time"], {"timezone": "Europe/Paris"}, "run-t:1")
    assert now["timezone"] == "Europe/Paris" and "datetime" in now
    with pytest.raises(ToolFailed, match="Invalid timezone"):
        run_tool(tools["mcp__time__get_current_time"], {"timezone": "Mars/Olympus"}, "run-t:2")


# -- our fault server --------------------------------------------------------------------------------


def test_each_call_carries_its_idempotency_key_in_meta(world):
    script = [{"tool": "mcp__faults__echo", "args": {"word": "hi"}},
              {"tool": "mcp__faults__append_note", "args": {"note": "paid"}}, {"final": "noted"}]
    runner = world.runner({"faults": fault_server(world.log)}, script)
    run_id, status = start(runner, [True])
    assert status == "done"
    assert [(e["tool"], e["key"]) for e in world.logged()] == [("echo", f"{run_id}:1"),
                                                              ("append_note", f"{run_id}:2")]


def test_a_side_effect_that_times_out_needs_reconciliation_and_is_not_run_again(world):
    servers = {"faults": fault_server(world.log, tools={"slow_write": {"timeout": 1}})}
    runner = world.runner(servers, [{"tool": "mcp__faults__slow_write", "args": {"seconds": 5}}, {"final": "?"}])
    run_id, status = start(runner, [True])
    assert status == "needs_reconciliation"
    assert drive(runner, run_id, []) == "needs_reconciliation"
    assert len(world.logged("slow_write")) == 1


def test_a_server_that_dies_mid_call_is_restarted_and_the_run_goes_on(world):
    script = [{"tool": "mcp__faults__whoami", "args": {}}, {"tool": "mcp__faults__crash_read", "args": {}},
              {"tool": "mcp__faults__whoami", "args": {}}, {"final": "survived"}]
    runner = world.runner({"faults": fault_server(world.log)}, script)
    run_id, status = start(runner, [])
    assert status == "done"
    before, crashed, after = tool_entries(runner, run_id)
    assert crashed["error"].startswith("ToolFailed: server faults is unavailable: the connection closed")
    assert after["result"]["pid"] != before["result"]["pid"]


def test_a_write_cut_short_by_a_crash_has_an_unknown_outcome_and_ran_once(world):
    tools = world.tools({"faults": fault_server(world.log)})
    with pytest.raises(ToolOutcomeUnknown, match="may or may not have taken effect"):
        run_tool(tools["mcp__faults__crash_write"], {}, "run-c:1")
    assert len(world.logged("crash_write")) == 1
    assert run_tool(tools["mcp__faults__echo"], {"word": "back"}, "run-c:2")["word"] == "back"


def test_an_approved_write_cut_short_by_a_crash_stops_for_a_person_and_is_not_run_again(world):
    runner = world.runner({"faults": fault_server(world.log)},
                          [{"tool": "mcp__faults__crash_write", "args": {}}, {"final": "?"}])
    run_id, status = start(runner, [True])
    assert status == "needs_reconciliation"
    run = runner.get_run(run_id)
    assert "went away during the call" in run.state["stop"]["reason"]
    assert drive(runner, run_id, []) == "needs_reconciliation"
    assert len(world.logged("crash_write")) == 1


def test_a_server_that_stays_down_fails_its_tools_and_nothing_else(world):
    time_server = {"command": sys.executable, "args": ["-m", "mcp_server_time"]}
    tools = world.tools({"faults": fault_server(world.log, timeout=4), "time": time_server})
    down = world.log.with_name(world.log.name + ".down")
    down.touch()
    with pytest.raises(ToolFailed, match="unavailable"):
        run_tool(tools["mcp__faults__crash_read"], {}, "run-d:1")
    with pytest.raises(ToolFailed, match=r"^server faults is unavailable: .*nothing was sent"):
        run_tool(tools["mcp__faults__append_note"], {"note": "lost"}, "run-d:2")
    assert run_tool(tools["mcp__time__get_current_time"], {"timezone": "UTC"}, "run-d:3")["timezone"] == "UTC"
    assert world.logged("append_note") == []
    down.unlink()
    eventually(lambda: _answers(tools["mcp__faults__echo"]))


def _answers(tool: Tool) -> bool:
    try:
        run_tool(tool, {"word": "up?"}, "run-d:9")
    except (ToolFailed, ToolTimeout):
        return False
    return True


def test_config_overrides_beat_lying_annotations_and_only_trust_loosens_a_gate(world):
    lying = {"delete_branch": {"side_effect": True}, "count_notes": {"side_effect": False}}
    script = [{"tool": "mcp__faults__delete_branch", "args": {"branch": "main"}}, {"final": "?"}]
    runner = world.runner({"faults": fault_server(world.log, tools=lying)}, script)
    run_id, status = start(runner, [])
    assert status == "awaiting_approval" and world.logged("delete_branch") == []
    assert runner.tools["mcp__faults__count_notes"].side_effect is True  # the server is not trusted
    gate = mcp_servers(world.settings({})).gate_of("mcp__faults__count_notes")
    assert gate is not None and gate.refused
    stop_mcp_servers()

    trusted = world.tools({"faults": fault_server(world.log, tools=lying, trusted=True)})
    assert trusted["mcp__faults__count_notes"].side_effect is False
    assert trusted["mcp__faults__delete_branch"].side_effect is True


def test_an_override_naming_no_tool_and_a_server_that_cannot_start_are_config_errors(world):
    with pytest.raises(ConfigError, match=r"server faults: tools\.delete_brnach: the server lists no tool"):
        world.tools({"faults": fault_server(world.log, tools={"delete_brnach": {"side_effect": True}})})
    stop_mcp_servers()
    world.log.with_name(world.log.name + ".down").touch()
    with pytest.raises(ConfigError) as caught:
        world.tools({"faults": fault_server(world.log), "gone": {"command": "no-such-mcp-server"}})
    message = str(caught.value)
    assert "server faults could not start: " in message and "LOG.down exists, refusing to start" in message
    assert "server gone could not start: no-such-mcp-server: command not found" in message


def test_stopping_the_servers_leaves_no_process_behind(world):
    tools = world.tools({"faults": fault_server(world.log)})
    pid = run_tool(tools["mcp__faults__whoami"], {}, "run-s:1")["pid"]
    stop_mcp_servers()
    eventually(lambda: not _alive(pid), seconds=10)
    with pytest.raises(ToolFailed, match="server faults is unavailable"):
        run_tool(tools["mcp__faults__echo"], {"word": "late"}, "run-s:2")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# -- streamable HTTP --------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def http_server(world: World) -> Iterator[Callable[[], None]]:
    """Start (and restart) the fault server over streamable HTTP on a port of its own."""
    port = _free_port()
    processes: list[subprocess.Popen[bytes]] = []

    def serve() -> None:
        processes.append(subprocess.Popen([sys.executable, FAULT_SERVER, str(world.log), "--http", str(port)],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        eventually(lambda: _listening(port))

    serve.port = port  # type: ignore[attr-defined]
    serve.processes = processes  # type: ignore[attr-defined]
    yield serve
    for process in processes:
        process.terminate()
        process.wait(10)


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def test_a_remote_server_gets_its_headers_from_the_environment_and_comes_back_after_an_outage(world, http_server):
    http_server()
    entry = {"url": f"http://127.0.0.1:{http_server.port}/mcp", "headers": {"X-Test": "${FAULTS_TOKEN}"}, "timeout": 4}
    (world.tmp_path / "mcp.json").write_text(json.dumps({"mcpServers": {"faults": entry}}))
    settings = world.settings({"faults": entry})
    tools = load_tools(settings, environ={"FAULTS_TOKEN": "tok-from-env"})
    assert run_tool(tools["mcp__faults__echo"], {"word": "hi"}, "run-h:1") == {"word": "hi", "key": "run-h:1"}
    assert world.logged("echo")[0]["header"] == "tok-from-env"

    http_server.processes[-1].terminate()
    http_server.processes[-1].wait(10)
    with pytest.raises(ToolFailed, match="server faults is unavailable"):
        run_tool(tools["mcp__faults__echo"], {"word": "down"}, "run-h:2")
    http_server()
    eventually(lambda: _answers(tools["mcp__faults__echo"]), seconds=40)
