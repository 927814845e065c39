"""`signoff` at a keyboard, through a pseudo-terminal: what --quiet still shows, what is typed, Ctrl-C."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import pytest
from cli_harness import Signoff
from pty_harness import Terminal

PROMPT = "Approve [a], deny [d], edit [e] or quit [q]? "


@pytest.fixture
def terminal(signoff: Signoff) -> Iterator[Callable[..., Terminal]]:
    """`terminal(*args)`: `signoff ARGS` at a keyboard, in the test's scratch directory."""
    started: list[Terminal] = []

    def start(*args: str) -> Terminal:
        shell = Terminal(*args, cwd=signoff.cwd, env=signoff.env)
        started.append(shell)
        return shell

    yield start
    for shell in started:
        shell.close()


def run_id_on(screen: str) -> str:
    [run_id] = set(re.findall(r"\brun-[0-9a-f]{10}\b", screen))
    return run_id


@pytest.mark.slow
def test_quiet_demo_at_a_terminal_shows_what_it_asks_about(terminal, signoff):
    shell = terminal("demo", "--quiet")

    asked = shell.expect(PROMPT)
    shell.type("a\n")
    code = shell.wait()

    assert code == 0, shell.screen
    assert "+-- Approval needed: send_email" in asked and '|   to: "ada@example.com"' in asked
    assert "model:" not in shell.screen and "step 1" not in shell.screen  # the progress stays quiet
    assert shell.screen.splitlines()[-1].startswith(f"{run_id_on(shell.screen)} done: Order A-1001")
    assert len(list(signoff.demo_outbox.glob("*.eml"))) == 1


def test_quiet_demo_with_piped_answers_prints_only_the_outcome(signoff):
    result = signoff.here("demo", "--quiet", answers="a\n")

    assert result.code == 0, result.err
    [outcome] = result.lines
    assert " done: Order A-1001" in outcome
    assert len(list(signoff.demo_outbox.glob("*.eml"))) == 1


@pytest.mark.slow
def test_ctrl_c_at_the_prompt_says_how_to_resume_and_the_run_resumes(terminal, signoff):
    shell = terminal("demo")

    shell.expect(PROMPT)
    shell.type("\x03")
    code = shell.wait()

    run_id = run_id_on(shell.screen)
    assert code == 130, shell.screen
    assert f"interrupted; the run continues with `signoff runs resume {run_id} --demo`" in shell.screen
    assert "Aborted" not in shell.screen and "aborted" not in shell.screen
    resumed = signoff.here("runs", "resume", run_id, "--demo", answers="a\n")
    assert resumed.code == 0, resumed.err
    assert resumed.lines[-1].startswith(f"{run_id} done: ")
    assert len(list(signoff.demo_outbox.glob("*.eml"))) == 1


@pytest.mark.slow
def test_ctrl_c_in_a_configured_run_names_no_demo_flag(terminal):
    shell = terminal("run", "handle the damaged order")

    shell.expect(PROMPT)
    shell.type("\x03")

    assert shell.wait() == 130, shell.screen
    assert f"the run continues with `signoff runs resume {run_id_on(shell.screen)}`" in shell.screen


@pytest.mark.slow
def test_yes_typed_at_a_terminal_approves(terminal, signoff):
    shell = terminal("demo")

    shell.expect(PROMPT)
    shell.type("yes\n")

    assert shell.wait() == 0, shell.screen
    assert "approved by cli:" in shell.screen
    assert len(list(signoff.demo_outbox.glob("*.eml"))) == 1
