"""What the terminal takes for an answer, and what it shows of a reply the loop could not use."""

from __future__ import annotations

import json

import pytest


def emails(signoff) -> list[str]:
    return sorted(p.name for p in signoff.demo_outbox.glob("*.eml"))


@pytest.mark.parametrize("answer", ["yes", "y", "Yes"])
def test_yes_approves(signoff, answer):
    result = signoff.here("demo", answers=f"{answer}\n")

    assert result.code == 0, result.err
    assert f"Approve [a], deny [d], edit [e] or quit [q]? {answer}\n" in result.out and "approved by cli:" in result.out
    assert len(emails(signoff)) == 1


@pytest.mark.parametrize("answer", ["no", "n", "NO"])
def test_no_denies_and_asks_the_reason(signoff, answer):
    result = signoff.here("demo", answers=f"{answer}\nnot before the courier confirms\n")

    assert result.code == 0, result.err
    assert "denied by cli:" in result.out and "not before the courier confirms" in result.out
    assert emails(signoff) == []


def write_script(path, *decisions) -> str:
    path.write_text(json.dumps(list(decisions)))
    return f"scripted:{path}"


TOLD = "          x malformed decision: give exactly one of 'tool' (with 'args') or 'final' (the model is told)"


def test_a_reply_with_neither_a_tool_nor_an_answer_is_shown_where_it_happened(signoff, tmp_path):
    model = write_script(tmp_path / "script.json",
                         {"tool": "search_handbook", "args": {"query": "damaged"}},
                         {"args": {"query": "refunds"}},
                         {"tool": "send_email", "args": {"to": "ada@example.com", "subject": "Sorry", "body": "Hi"}},
                         {"final": "Told Ada."})

    result = signoff.here("run", "write to Ada", "--model", model, answers="a\n")

    assert result.code == 0, result.err
    lines = result.out.splitlines()
    [reply] = [i for i, line in enumerate(lines) if line.startswith("  step 2  malformed reply: ")]
    assert "{'args': {'query': 'refunds'}" in lines[reply]
    assert lines[reply + 1] == TOLD
    # Where it happened: after step 1's result, before step 3's approval card.
    assert lines.index('  step 1  search_handbook {"query": "damaged"}') < reply
    assert reply < next(i for i, line in enumerate(lines) if line.startswith("+-- Approval needed: send_email"))


def test_resuming_does_not_repeat_an_earlier_malformed_reply(signoff, tmp_path):
    model = write_script(tmp_path / "script.json", {"nothing": True},
                         {"tool": "send_email", "args": {"to": "ada@example.com", "subject": "Sorry", "body": "Hi"}},
                         {"final": "Told Ada."})
    paused = signoff.here("run", "write to Ada", "--model", model)

    resumed = signoff.here("runs", "resume", paused.lines[-1].split()[0], answers="a\n")

    assert paused.code == 3 and paused.out.count("malformed reply") == 1
    assert resumed.code == 0, resumed.err
    assert "malformed" not in resumed.out
