"""`signoff hook claude-code` as Claude Code runs it (a subprocess, the input on stdin), without Claude
Code: what it answers for inputs Claude Code would not send, and for Signoff's answers.

The approvals come from the STAND-IN of the approval API (tests/client/standin.py), to be replaced by
the real server once it exists.
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

from tests.claude_code.harness import REPO
from tests.client.standin import ApprovalStandIn

KEY = "sk-hook"
WRITE = {"session_id": "sess-1", "tool_use_id": "toolu_01", "hook_event_name": "PreToolUse",
         "cwd": "/home/dev/project", "transcript_path": "/tmp/t.jsonl", "permission_mode": "default",
         "tool_name": "Write", "tool_input": {"file_path": "/home/dev/project/a.txt", "content": "a"}}


@pytest.fixture
def api() -> Iterator[ApprovalStandIn]:
    with ApprovalStandIn(keys={KEY: None, "sk-bash-only": {"Bash"}}) as server:
        yield server


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


def settings_for(api: ApprovalStandIn, key: str = KEY) -> dict[str, str]:
    return {"SIGNOFF_URL": api.url, "SIGNOFF_API_KEY": key}


@pytest.mark.parametrize(("stdin", "words"), [
    ("", "not JSON"),
    ("{not json", "not JSON"),
    ("[1, 2]", "not a JSON object"),
    (json.dumps({**WRITE, "hook_event_name": "PostToolUse"}), "not PostToolUse"),
    (json.dumps({k: v for k, v in WRITE.items() if k != "tool_use_id"}), "no tool_use_id"),
    (json.dumps({**WRITE, "tool_input": "rm -rf /"}), "no tool_input object"),
])
def test_an_input_it_cannot_read_is_denied(stdin: str, words: str, tmp_path: Path, api: ApprovalStandIn) -> None:
    decision = hook(stdin, tmp_path, settings_for(api))

    assert decision["permissionDecision"] == "deny"
    assert words in decision["permissionDecisionReason"]
    assert api.seen == []


def test_without_settings_it_denies_and_names_what_is_missing(tmp_path: Path) -> None:
    decision = hook(json.dumps(WRITE), tmp_path, {"SIGNOFF_URL": "http://127.0.0.1:9"})

    assert decision["permissionDecision"] == "deny"
    assert "SIGNOFF_API_KEY not set" in decision["permissionDecisionReason"]


def test_a_tool_outside_the_keys_scope_is_denied_with_the_api_code(tmp_path: Path, api: ApprovalStandIn) -> None:
    decision = hook(json.dumps(WRITE), tmp_path, settings_for(api, "sk-bash-only"))

    assert decision["permissionDecision"] == "deny"
    assert "forbidden" in decision["permissionDecisionReason"]


def test_an_approved_call_is_started_once_and_allowed_as_it_was(tmp_path: Path, api: ApprovalStandIn) -> None:
    api.policy = lambda tool, args: ("allow", None)

    decision = hook(json.dumps(WRITE), tmp_path, settings_for(api))

    assert decision == {"hookEventName": "PreToolUse", "permissionDecision": "allow",
                        "permissionDecisionReason": "Signoff: approved by Signoff's policy"}
    (approval,) = api.approvals.values()
    assert (approval.key, approval.status, approval.starts) == ("sess-1:toolu_01", "started", 1)
    assert approval.request["side_effect"] is True
    assert approval.request["preview"] == "/home/dev/project/a.txt"


def test_the_same_call_asked_again_is_not_allowed_twice(tmp_path: Path, api: ApprovalStandIn) -> None:
    api.policy = lambda tool, args: ("allow", None)
    first = hook(json.dumps(WRITE), tmp_path, settings_for(api))

    again = hook(json.dumps(WRITE), tmp_path, settings_for(api))

    assert first["permissionDecision"] == "allow"
    assert again["permissionDecision"] == "deny"
    assert "started already" in again["permissionDecisionReason"]
    assert len(api.approvals) == 1


def test_a_policy_denial_is_denied_with_the_rules_reason(tmp_path: Path, api: ApprovalStandIn) -> None:
    api.policy = lambda tool, args: ("deny", "no writes on Fridays")

    decision = hook(json.dumps(WRITE), tmp_path, settings_for(api))

    assert decision["permissionDecision"] == "deny"
    assert decision["permissionDecisionReason"] == "Signoff: denied by policy: no writes on Fridays"
    assert api.requests_to("POST", "/start") == []


def test_a_timeout_that_is_not_a_positive_number_is_a_usage_error(tmp_path: Path) -> None:
    # Exit status 2: Claude Code blocks the call on it too (and shows this error).
    done = subprocess.run([sys.executable, "-m", "signoff", "hook", "claude-code", "--timeout", "0"], input="{}",
                          cwd=tmp_path, env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=120)

    assert done.returncode == 2 and "--timeout" in done.stderr


def test_a_signoff_that_hangs_is_denied_by_the_hooks_own_deadline(tmp_path: Path, api: ApprovalStandIn) -> None:
    # The long poll never answers: the client's read timeout (10 s past the wait) would end it later
    # as "unreachable"; the hook's own deadline (--timeout plus a few seconds) ends it first.
    api.hang = True

    decision = hook(json.dumps(WRITE), tmp_path, settings_for(api), "--timeout", "1")

    assert decision["permissionDecision"] == "deny"
    assert "no decision within 1 s (Signoff answered too slowly)" in decision["permissionDecisionReason"]
