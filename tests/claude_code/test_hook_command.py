"""`signoff hook claude-code` as Claude Code runs it (a subprocess, the input on stdin), without Claude
Code: what it answers for inputs Claude Code would not send, and for the real approval API's answers
(a `signoff serve` for the module, tests/approval_server.py). A Signoff that takes the request and
then never answers is a faulty server (tests/client/faulty_servers.py): the real one always answers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.approval_server import ApprovalServer
from tests.claude_code.harness import REPO
from tests.client.faulty_servers import Garbage, Stalling

pytestmark = pytest.mark.slow

WRITE = {"session_id": "sess-1", "tool_use_id": "toolu_01", "hook_event_name": "PreToolUse",
         "cwd": "/home/dev/project", "transcript_path": "/tmp/t.jsonl", "permission_mode": "default",
         "tool_name": "Write", "tool_input": {"file_path": "/home/dev/project/a.txt", "content": "a"}}
POLICY = """
rules:
  - name: scratch files
    tool: Write
    when: "args.file_path.endsWith('/scratch.txt')"
    decision: allow
  - name: no writes to etc
    tool: Write
    when: "args.file_path.startsWith('/etc/')"
    decision: deny
    reason: the system's files are not the agent's
"""


@pytest.fixture(scope="module")
def server() -> Iterator[ApprovalServer]:
    server = ApprovalServer(POLICY)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def settings(server: ApprovalServer) -> dict[str, str]:
    return {"SIGNOFF_URL": server.url, "SIGNOFF_API_KEY": server.new_key("claude-code", "--tools", "Write,Bash")}


def hook(stdin: str, tmp_path: Path, env: dict[str, str], *args: str) -> dict[str, Any]:
    """The hook's decision; it must exit 0 with one JSON object on stdout, whatever happened."""
    environment = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "PYTHONPATH": str(REPO), **env}
    done = subprocess.run([sys.executable, "-m", "signoff", "hook", "claude-code", *args], input=stdin,
                          cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert set(answer) == {"hookSpecificOutput"}
    assert answer["hookSpecificOutput"]["hookEventName"] == "PreToolUse"
    return dict(answer["hookSpecificOutput"])


def writing(path: str, call: str) -> str:
    """The hook's input for a `Write` of `path`, as the call `call` of session sess-1."""
    return json.dumps({**WRITE, "tool_use_id": call, "tool_input": {"file_path": path, "content": "a"}})


@pytest.mark.parametrize(("stdin", "words"), [
    ("", "not JSON"),
    ("{not json", "not JSON"),
    ("[1, 2]", "not a JSON object"),
    (json.dumps({**WRITE, "hook_event_name": "UserPromptSubmit"}), "not UserPromptSubmit"),
    (json.dumps({k: v for k, v in WRITE.items() if k != "tool_use_id"}), "no tool_use_id"),
    (json.dumps({**WRITE, "tool_input": "rm -rf /"}), "no tool_input object"),
])
def test_an_input_it_cannot_read_is_denied_without_asking(stdin: str, words: str, tmp_path: Path) -> None:
    with Garbage() as anything:
        decision = hook(stdin, tmp_path, {"SIGNOFF_URL": anything.url, "SIGNOFF_API_KEY": "sk_signoff_any"})

    assert decision["permissionDecision"] == "deny"
    assert words in decision["permissionDecisionReason"]
    assert anything.seen == []


def test_without_settings_it_denies_and_names_what_is_missing(tmp_path: Path) -> None:
    decision = hook(json.dumps(WRITE), tmp_path, {"SIGNOFF_URL": "http://127.0.0.1:9"})

    assert decision["permissionDecision"] == "deny"
    assert "SIGNOFF_API_KEY not set" in decision["permissionDecisionReason"]


def test_a_tool_outside_the_keys_scope_is_denied_with_the_api_code(tmp_path: Path, server: ApprovalServer) -> None:
    bash_only = {"SIGNOFF_URL": server.url, "SIGNOFF_API_KEY": server.new_key("bash-only", "--tools", "Bash")}

    decision = hook(json.dumps(WRITE), tmp_path, bash_only)

    assert decision["permissionDecision"] == "deny"
    assert "forbidden" in decision["permissionDecisionReason"]


def test_a_call_the_policy_allows_is_started_once_and_allowed_as_it_was(
        tmp_path: Path, server: ApprovalServer, settings: dict[str, str]) -> None:
    decision = hook(writing("/home/dev/project/scratch.txt", "toolu_allowed"), tmp_path, settings)

    assert decision == {"hookEventName": "PreToolUse", "permissionDecision": "allow",
                        "permissionDecisionReason": "Signoff: approved by the policy rule 'scratch files'"}
    (run,) = [r for r in server.world.db.store.list_runs(limit=1000)
              if r.origin["api"]["id_key"] == "sess-1:toolu_allowed"]
    assert run.origin["caller"]["preview"] == "/home/dev/project/scratch.txt"
    assert [row["status"] for row in server.executions(run.run_id)] == ["started"]


def test_the_same_call_asked_again_is_not_allowed_twice(tmp_path: Path, settings: dict[str, str]) -> None:
    call = writing("/home/dev/other/scratch.txt", "toolu_twice")
    first = hook(call, tmp_path, settings)

    again = hook(call, tmp_path, settings)

    assert first["permissionDecision"] == "allow"
    assert again["permissionDecision"] == "deny"
    assert "started already" in again["permissionDecisionReason"]


def test_a_policy_denial_is_denied_with_the_rules_reason(tmp_path: Path, settings: dict[str, str]) -> None:
    decision = hook(writing("/etc/passwd", "toolu_etc"), tmp_path, settings)

    assert decision["permissionDecision"] == "deny"
    assert decision["permissionDecisionReason"].startswith("Signoff: denied")
    assert "the system's files are not the agent's" in decision["permissionDecisionReason"]


def test_a_timeout_that_is_not_a_positive_number_is_a_usage_error(tmp_path: Path) -> None:
    # Exit status 2: Claude Code blocks the call on it too (and shows this error).
    done = subprocess.run([sys.executable, "-m", "signoff", "hook", "claude-code", "--timeout", "0"], input="{}",
                          cwd=tmp_path, env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=120)

    assert done.returncode == 2 and "--timeout" in done.stderr


def test_a_signoff_that_hangs_is_denied_by_the_hooks_own_deadline(tmp_path: Path) -> None:
    # The long poll never answers: the client's read timeout (10 s past the wait) would end it later
    # as "unreachable"; the hook's own deadline (--timeout plus a few seconds) ends it first.
    with Stalling(hang=True) as hanging:
        decision = hook(json.dumps(WRITE), tmp_path, {"SIGNOFF_URL": hanging.url, "SIGNOFF_API_KEY": "sk"},
                        "--timeout", "1")

    assert decision["permissionDecision"] == "deny"
    assert "no decision within 1 s (Signoff answered too slowly)" in decision["permissionDecisionReason"]
