"""The real Claude Code CLI, gated by the real `signoff hook claude-code`, asking the real approval API.

The model (tests/claude_code/fake_model.py) proposes one call, then ends: a `Write` of `hello.txt`
in the project, or a `Bash` command. Claude Code runs the hook, a subprocess of this checkout, which
asks a real `signoff serve` (one for the module, tests/approval_server.py); its card shows in
(fake) Slack and an approver decides there, as they would from their phone. What happens when
Signoff cannot answer is in test_claude_code_fails_closed.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scenarios.drive import APPROVER
from signoff.runtime.records import ApprovalRecord
from tests.approval_server import SECOND_APPROVER, ApprovalServer, Person, deciding
from tests.claude_code.fake_model import FakeModel
from tests.claude_code.harness import ClaudeRun, hook_command, run_claude

pytestmark = pytest.mark.slow

CONTENT = "hello from the model\n"
POLICY = """
rules:
  - name: no pushes
    tool: Bash
    when: "args.command.startsWith('git push')"
    decision: deny
    reason: pushes go through review
"""


@pytest.fixture(scope="module")
def server() -> Iterator[ApprovalServer]:
    server = ApprovalServer(POLICY)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def key(server: ApprovalServer) -> str:
    return server.new_key("claude-code", "--tools", "Bash,Write,Edit,mcp__*")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return tmp_path / "project"


@pytest.fixture
def model(project: Path) -> Iterator[FakeModel]:
    with FakeModel(tool="Write", tool_input={"file_path": str(project / "hello.txt"), "content": CONTENT}) as fake:
        yield fake


def claude(cli: Path, model: FakeModel, project: Path, url: str, api_key: str, *,
           timeout: float = 60, mode: str = "acceptEdits") -> ClaudeRun:
    run = run_claude(cli, model, project, project.parent / "home", hook=hook_command(timeout),
                     env={"SIGNOFF_URL": url, "SIGNOFF_API_KEY": api_key}, args=("--permission-mode", mode))
    assert run.returncode == 0, run.explain()
    assert len(run.hooks) == 1, run.explain()
    assert run.hooks[0]["exit_code"] == 0, run.explain()
    return run


def denied(run: ClaudeRun) -> str:
    """The reason of the hook's one decision, which must be a deny that Claude Code obeyed."""
    (decision,) = run.decisions
    assert decision["permissionDecision"] == "deny", run.explain()
    assert "updatedInput" not in decision
    reason = str(decision["permissionDecisionReason"])
    (result,) = run.tool_results
    assert result.get("is_error") is True
    assert reason in str(result["content"])  # the model is told why
    return reason


def writes(project: Path) -> Any:
    """Matches the approval of the model's `Write` in `project`."""
    return lambda approval: approval.tool == "Write" and approval.args.get("file_path") == str(project / "hello.txt")


def test_approved_in_slack_the_file_is_written_and_the_approval_consumed_once(
        claude_cli: Path, model: FakeModel, project: Path, server: ApprovalServer, key: str) -> None:
    decided: list[ApprovalRecord] = []

    with deciding(lambda: decided.append(Person(server, writes(project)).approve())):
        run = claude(claude_cli, model, project, server.url, key)

    (decision,) = run.decisions
    assert decision["permissionDecision"] == "allow", run.explain()
    assert decision["permissionDecisionReason"] == f"Signoff: approved by {APPROVER}"
    assert "updatedInput" not in decision
    assert (project / "hello.txt").read_text() == CONTENT
    (approval,) = decided
    assert approval.args == {"file_path": str(project / "hello.txt"), "content": CONTENT}
    (tool_use_id,) = [r["tool_use_id"] for r in run.tool_results]
    asked = server.run(approval.run_id).origin
    assert asked["api"]["id_key"] == f"{run.session_id}:{tool_use_id}"
    assert (asked["caller"]["side_effect"], asked["caller"]["preview"]) == (True, str(project / "hello.txt"))
    # Consumed once, and the PostToolUse hook reported how it went: the outcome is in the ledger.
    [row] = server.executions(approval.run_id)
    assert row["status"] == "succeeded", row
    assert server.run(approval.run_id).status == "done"


def test_an_approval_with_edits_makes_claude_code_run_the_edited_input(
        claude_cli: Path, model: FakeModel, project: Path, server: ApprovalServer, key: str) -> None:
    edited: dict[str, Any] = {"file_path": str(project / "hello.txt"), "content": "edited by the approver\n"}

    with deciding(lambda: Person(server, writes(project)).edit_and_approve(edited)):
        run = claude(claude_cli, model, project, server.url, key)

    (decision,) = run.decisions
    assert decision["permissionDecision"] == "allow", run.explain()
    assert decision["updatedInput"] == edited
    assert decision["permissionDecisionReason"] == f"Signoff: approved by {SECOND_APPROVER} with edits"
    assert (project / "hello.txt").read_text() == "edited by the approver\n"


def test_denied_in_slack_the_file_is_not_written_and_claude_is_told_why(
        claude_cli: Path, model: FakeModel, project: Path, server: ApprovalServer, key: str) -> None:
    decided: list[ApprovalRecord] = []

    with deciding(lambda: decided.append(Person(server, writes(project)).deny("not in this repo"))):
        run = claude(claude_cli, model, project, server.url, key)

    reason = denied(run)
    assert APPROVER in reason and "not in this repo" in reason
    assert not (project / "hello.txt").exists()
    assert server.executions(decided[0].run_id) == []


def test_a_policy_deny_rule_refuses_without_a_card_and_claude_is_told_the_rule_s_reason(
        claude_cli: Path, project: Path, server: ApprovalServer, key: str) -> None:
    with FakeModel(tool="Bash", tool_input={"command": "git push origin main", "description": "Push"}) as push:
        run = claude(claude_cli, push, project, server.url, key, mode="default")

    assert "pushes go through review" in denied(run)


def test_nobody_deciding_within_the_timeout_denies(claude_cli: Path, model: FakeModel, project: Path,
                                                  server: ApprovalServer, key: str) -> None:
    run = claude(claude_cli, model, project, server.url, key, timeout=2)

    assert "nobody decided within 2 s" in denied(run)
    assert not (project / "hello.txt").exists()
    approval, _ = server.card(writes(project))  # still pending, its card still in Slack
    assert server.executions(approval.run_id) == []


def test_a_refused_api_key_denies(claude_cli: Path, model: FakeModel, project: Path, server: ApprovalServer) -> None:
    run = claude(claude_cli, model, project, server.url, "sk_signoff_not_a_key")

    assert "unauthorized" in denied(run)
    assert not (project / "hello.txt").exists()


@pytest.mark.parametrize(("on_failure", "written"), [(None, True), ("block", False)])
def test_a_hook_claude_code_gives_up_on_lets_the_call_run_unless_on_failure_blocks(
        claude_cli: Path, model: FakeModel, project: Path, server: ApprovalServer, key: str, on_failure: str | None,
        written: bool) -> None:
    # Why the hook's --timeout must stay under the hook's `timeout` in the settings, and why the
    # documented settings say `"onFailure": "block"`: Claude Code cancels a hook that outlasts its
    # timeout and then runs the call, unless onFailure is "block". Nobody decides here, so the hook
    # (willing to wait 5 s) is still waiting when Claude Code gives up on it after 1 s.
    run = run_claude(claude_cli, model, project, project.parent / "home", hook=hook_command(5),
                     env={"SIGNOFF_URL": server.url, "SIGNOFF_API_KEY": key}, hook_timeout=1, on_failure=on_failure)

    assert run.returncode == 0, run.explain()
    assert [h["outcome"] for h in run.hooks] == ["cancelled"], run.explain()
    assert (project / "hello.txt").exists() is written


BASH = {"command": "touch marker", "description": "Make a marker"}


def test_an_approved_bash_command_runs_where_no_permission_rule_allows_it(
        claude_cli: Path, project: Path, server: ApprovalServer, key: str) -> None:
    # The hook's "allow" stands in for the permission prompt `claude -p` cannot show (the control,
    # without the hook, is in test_claude_code_fails_closed.py).
    person = Person(server, lambda approval: approval.tool == "Bash" and approval.args == BASH)
    with FakeModel(tool="Bash", tool_input=BASH) as bash, deciding(person.approve):
        run = claude(claude_cli, bash, project, server.url, key, mode="default")

    (decision,) = run.decisions
    assert decision["permissionDecision"] == "allow", run.explain()
    assert (project / "marker").exists()
