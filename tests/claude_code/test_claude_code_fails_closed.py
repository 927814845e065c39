"""The real Claude Code CLI, gated by the real `signoff hook claude-code`, when Signoff cannot give a
decision: nothing listens, or what answers is not the approval API (tests/client/faulty_servers.py).
The hook denies, Claude Code obeys and tells the model why. With the controls: without the hook,
the same setup writes the file, and refuses a Bash command nobody may approve.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.claude_code.fake_model import FakeModel
from tests.claude_code.harness import hook_command, run_claude
from tests.client.faulty_servers import Garbage

pytestmark = pytest.mark.slow

CONTENT = "hello from the model\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return tmp_path / "project"


@pytest.fixture
def model(project: Path) -> Iterator[FakeModel]:
    with FakeModel(tool="Write", tool_input={"file_path": str(project / "hello.txt"), "content": CONTENT}) as fake:
        yield fake


def denied_by_the_hook(cli: Path, model: FakeModel, project: Path, url: str) -> str:
    """Run Claude Code with the hook asking `url`: the reason of its one decision, a deny Claude Code obeyed."""
    run = run_claude(cli, model, project, project.parent / "home", hook=hook_command(60),
                     env={"SIGNOFF_URL": url, "SIGNOFF_API_KEY": "sk_signoff_any"})
    assert run.returncode == 0, run.explain()
    assert [hook["exit_code"] for hook in run.hooks] == [0], run.explain()
    (decision,) = run.decisions
    assert decision["permissionDecision"] == "deny", run.explain()
    reason = str(decision["permissionDecisionReason"])
    (result,) = run.tool_results
    assert result.get("is_error") is True and reason in str(result["content"])  # the model is told why
    return reason


def test_without_the_hook_this_setup_writes_the_file(claude_cli: Path, model: FakeModel, project: Path) -> None:
    # The control: the file is written unless a hook refuses, so an unwritten file below is the hook's doing.
    run = run_claude(claude_cli, model, project, project.parent / "home", hook=None)

    assert run.returncode == 0, run.explain()
    assert (project / "hello.txt").read_text() == CONTENT
    assert model.unknown == []


def test_without_the_hook_claude_code_p_refuses_bash_in_the_default_mode(claude_cli: Path, project: Path) -> None:
    # The control for the approved Bash command: with nobody to ask, the default mode refuses it.
    with FakeModel(tool="Bash", tool_input={"command": "touch marker", "description": "Make a marker"}) as bash:
        run = run_claude(claude_cli, bash, project, project.parent / "home", hook=None,
                         args=("--permission-mode", "default"))

    assert run.returncode == 0, run.explain()
    assert run.result["permission_denials"], run.explain()
    assert not (project / "marker").exists()


def test_signoff_unreachable_denies_and_the_file_is_not_written(claude_cli: Path, model: FakeModel,
                                                               project: Path) -> None:
    with Garbage() as garbage:
        closed = garbage.url  # nothing listens there once the block ends

    assert "unreachable" in denied_by_the_hook(claude_cli, model, project, closed)
    assert not (project / "hello.txt").exists()


@pytest.mark.parametrize(("status", "body"), [
    (500, b"<html>Internal Server Error</html>"),
    (201, b"{this is not json"),
    (201, b'{"id": "apr_1", "status": "perhaps"}'),
])
def test_signoff_answering_garbage_denies_and_the_file_is_not_written(
        claude_cli: Path, model: FakeModel, project: Path, status: int, body: bytes) -> None:
    with Garbage(status=status, body=body) as garbage:
        reason = denied_by_the_hook(claude_cli, model, project, garbage.url)

    assert "could not get a decision" in reason
    assert garbage.seen == ["POST /v1/approvals"]
    assert not (project / "hello.txt").exists()
