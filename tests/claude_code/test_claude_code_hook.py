"""The real Claude Code CLI, gated by the real `signoff hook claude-code`, against a scripted model.

The model (tests/claude_code/fake_model.py) proposes one `Write` of `hello.txt` in the project, then
ends. Claude Code runs the hook, a subprocess of this checkout, which asks Signoff.

Signoff's approval API (issue #30) has no server yet: the tests that need one use the STAND-IN in
tests/client/standin.py, which speaks the documented contract. They are to be replaced by tests
against the real `signoff serve` once it exists. The tests where Signoff is unreachable or answers
garbage need no server and stay.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.claude_code.fake_model import FakeModel
from tests.claude_code.harness import ClaudeRun, hook_command, run_claude
from tests.client.standin import ApprovalStandIn, Garbage, person

pytestmark = pytest.mark.slow

KEY = "sk-claude-code"
CONTENT = "hello from the model\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return tmp_path / "project"


@pytest.fixture
def model(project: Path) -> Iterator[FakeModel]:
    with FakeModel(tool="Write", tool_input={"file_path": str(project / "hello.txt"), "content": CONTENT}) as fake:
        yield fake


@pytest.fixture
def api() -> Iterator[ApprovalStandIn]:
    with ApprovalStandIn(keys={KEY: None}) as server:
        yield server


def claude(cli: Path, model: FakeModel, project: Path, url: str, *, api_key: str = KEY,
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


def test_without_the_hook_this_setup_writes_the_file(claude_cli: Path, model: FakeModel, project: Path) -> None:
    # The control: the file is written unless a hook refuses, so an unwritten file below is the hook's doing.
    run = run_claude(claude_cli, model, project, project.parent / "home", hook=None)

    assert run.returncode == 0, run.explain()
    assert (project / "hello.txt").read_text() == CONTENT
    assert model.unknown == []


def test_signoff_unreachable_denies_and_the_file_is_not_written(claude_cli: Path, model: FakeModel,
                                                               project: Path) -> None:
    with Garbage() as server:
        closed = server.url  # nothing listens there once the block ends

    run = claude(claude_cli, model, project, closed)

    assert "unreachable" in denied(run)
    assert not (project / "hello.txt").exists()


@pytest.mark.parametrize(("status", "body"), [
    (500, b"<html>Internal Server Error</html>"),
    (201, b"{this is not json"),
    (201, b'{"id": "apr_1", "status": "perhaps"}'),
])
def test_signoff_answering_garbage_denies_and_the_file_is_not_written(
        claude_cli: Path, model: FakeModel, project: Path, status: int, body: bytes) -> None:
    with Garbage(status=status, body=body) as server:
        run = claude(claude_cli, model, project, server.url)

    assert "could not get a decision" in denied(run)
    assert server.seen == ["POST /v1/approvals"]
    assert not (project / "hello.txt").exists()


def test_a_refused_api_key_denies(claude_cli: Path, model: FakeModel, project: Path,
                                  api: ApprovalStandIn) -> None:
    run = claude(claude_cli, model, project, api.url, api_key="sk-wrong")

    assert "unauthorized" in denied(run)
    assert not (project / "hello.txt").exists()


def test_approved_the_file_is_written_and_the_approval_consumed_once(claude_cli: Path, model: FakeModel,
                                                                    project: Path, api: ApprovalStandIn) -> None:
    api.policy = lambda tool, args: ("allow", None)

    run = claude(claude_cli, model, project, api.url)

    (decision,) = run.decisions
    assert decision["permissionDecision"] == "allow", run.explain()
    assert "updatedInput" not in decision
    assert (project / "hello.txt").read_text() == CONTENT
    (approval,) = api.approvals.values()
    (tool_use_id,) = [r["tool_use_id"] for r in run.tool_results]
    assert approval.key == f"{run.session_id}:{tool_use_id}"
    assert approval.request["tool"] == "Write"
    assert approval.request["args"] == {"file_path": str(project / "hello.txt"), "content": CONTENT}
    assert approval.request["side_effect"] is True
    assert (approval.status, approval.starts) == ("started", 1)


def test_an_approval_with_edits_makes_claude_code_run_the_edited_input(
        claude_cli: Path, model: FakeModel, project: Path, api: ApprovalStandIn) -> None:
    edited: dict[str, Any] = {"file_path": str(project / "hello.txt"), "content": "edited by the approver\n"}

    with person(api, lambda pending: api.decide(pending.id, "approved", by="U_ALICE", args=edited)):
        run = claude(claude_cli, model, project, api.url)

    (decision,) = run.decisions
    assert decision["permissionDecision"] == "allow", run.explain()
    assert decision["updatedInput"] == edited
    assert "U_ALICE" in decision["permissionDecisionReason"]
    assert (project / "hello.txt").read_text() == "edited by the approver\n"
    assert api.approvals["apr_0001"].starts == 1


def test_denied_by_a_person_the_file_is_not_written_and_claude_is_told_why(
        claude_cli: Path, model: FakeModel, project: Path, api: ApprovalStandIn) -> None:
    with person(api, lambda pending: api.decide(pending.id, "denied", by="U_BOB", reason="not in this repo")):
        run = claude(claude_cli, model, project, api.url)

    reason = denied(run)
    assert "U_BOB" in reason and "not in this repo" in reason
    assert not (project / "hello.txt").exists()
    assert api.approvals["apr_0001"].starts == 0


def test_nobody_deciding_within_the_timeout_denies(claude_cli: Path, model: FakeModel, project: Path,
                                                  api: ApprovalStandIn) -> None:
    run = claude(claude_cli, model, project, api.url, timeout=2)

    assert "nobody decided within 2 s" in denied(run)
    assert not (project / "hello.txt").exists()
    assert api.approvals["apr_0001"].status == "pending"


@pytest.mark.parametrize(("on_failure", "written"), [(None, True), ("block", False)])
def test_a_hook_claude_code_gives_up_on_lets_the_call_run_unless_on_failure_blocks(
        claude_cli: Path, model: FakeModel, project: Path, api: ApprovalStandIn, on_failure: str | None,
        written: bool) -> None:
    # Why the hook's --timeout must stay under the hook's `timeout` in the settings, and why the
    # documented settings say `"onFailure": "block"`: Claude Code cancels a hook that outlasts its
    # timeout and then runs the call, unless onFailure is "block". Nobody decides here, so the hook
    # (willing to wait 60 s) is still waiting when Claude Code gives up on it after 1 s.
    run = run_claude(claude_cli, model, project, project.parent / "home", hook=hook_command(60),
                     env={"SIGNOFF_URL": api.url, "SIGNOFF_API_KEY": KEY}, hook_timeout=1, on_failure=on_failure)

    assert run.returncode == 0, run.explain()
    assert [h["outcome"] for h in run.hooks] == ["cancelled"], run.explain()
    assert (project / "hello.txt").exists() is written
    assert all(approval.starts == 0 for approval in api.approvals.values())  # nobody approved anything


BASH = {"command": "touch marker", "description": "Make a marker"}


def test_without_the_hook_claude_code_p_refuses_bash_in_the_default_mode(claude_cli: Path, project: Path) -> None:
    # The control for the next test: with nobody to ask, the default permission mode refuses the command.
    with FakeModel(tool="Bash", tool_input=BASH) as bash:
        run = run_claude(claude_cli, bash, project, project.parent / "home", hook=None,
                         args=("--permission-mode", "default"))

    assert run.returncode == 0, run.explain()
    assert run.result["permission_denials"], run.explain()
    assert not (project / "marker").exists()


def test_an_approved_bash_command_runs_where_no_permission_rule_allows_it(
        claude_cli: Path, project: Path, api: ApprovalStandIn) -> None:
    # The hook's "allow" stands in for the permission prompt `claude -p` cannot show.
    with FakeModel(tool="Bash", tool_input=BASH) as bash, \
            person(api, lambda pending: api.decide(pending.id, "approved", by="U_ALICE")):
        run = claude(claude_cli, bash, project, api.url, mode="default")

    (decision,) = run.decisions
    assert decision["permissionDecision"] == "allow", run.explain()
    assert (project / "marker").exists()
    (approval,) = api.approvals.values()
    assert (approval.tool, approval.request["preview"], approval.starts) == ("Bash", "touch marker", 1)
