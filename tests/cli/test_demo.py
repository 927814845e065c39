"""`signoff demo` end to end: piped answers, a real SQLite file, the real demo tools."""

from __future__ import annotations

import json

import pytest
from cli_harness import Signoff


def refunds(signoff: Signoff) -> list[dict]:
    ledger = signoff.outbox / "refunds.jsonl"
    return [json.loads(line) for line in ledger.read_text().splitlines()] if ledger.exists() else []


def emails(signoff: Signoff) -> list[str]:
    return sorted(p.name for p in signoff.outbox.glob("*.eml"))


def run_id_of(line: str) -> str:
    return line.split()[0]


@pytest.mark.slow
def test_demo_with_both_approved_sends_one_email_and_records_one_refund(signoff):
    result = signoff("demo", answers="a\na\n")

    assert result.code == 0, result.err
    assert "model:    scripted (not a real model)" in result.out
    assert result.out.count("Approval needed") == 2
    outcome = result.lines[-1]
    run_id = run_id_of(outcome)
    assert outcome.startswith(f"{run_id} done: Order A-1001")
    assert emails(signoff) == [e for e in emails(signoff) if e.startswith(f"{run_id}_3")] and len(emails(signoff)) == 1
    [refund] = refunds(signoff)
    assert (refund["order_id"], refund["amount_usd"], refund["key"]) == ("A-1001", "42.00", f"{run_id}:4")
    assert (signoff.cwd / "signoff-demo.db").exists()


@pytest.mark.slow
def test_demo_without_answers_stops_paused_after_showing_the_card(signoff):
    result = signoff("demo")  # stdin is /dev/null: the end of input counts as quit

    assert result.code == 3, result.err
    run_id = run_id_of(result.lines[-1])
    assert result.lines[-1] == f"{run_id} awaiting_approval (resume with: signoff runs resume {run_id} --demo)"
    card = result.out[result.out.index("+-- Approval needed: send_email"):]
    for expected in ("Goal:         Ada Lovelace says order A-1001 arrived damaged.", "Requested by: cli:",
                     "Tool:         send_email: Send a plain-text email", '|   to: "ada@example.com"',
                     '|   subject: "Your refund for order A-1001"', '|   body: "Dear Ada,\\n\\nWe are sorry',
                     f"Key:          {run_id}:3",
                     "Budget used:  steps 3/8, tool calls 2", "Expires:"):
        assert expected in card
    assert emails(signoff) == []


@pytest.mark.slow
def test_deny_reason_reaches_the_model_and_the_story(signoff):
    result = signoff("demo", answers="d\nplease use a warmer tone\na\n")

    assert result.code == 0, result.err
    assert "denied by cli:" in result.out
    assert emails(signoff) == []
    assert len(refunds(signoff)) == 1

    shown = signoff.here("runs", "show", run_id_of(result.lines[-1]), "--demo")
    assert shown.code == 0, shown.err
    history = shown.out[shown.out.index("history"):shown.out.index("audit events")]
    assert "x denied by human: please use a warmer tone" in history
    approvals = shown.out[shown.out.index("approvals:"):]
    assert "send_email  denied by cli:" in approvals and "please use a warmer tone" in approvals
    assert "issue_refund  approved and executed by cli:" in approvals


@pytest.mark.slow
def test_quit_leaves_the_run_paused_and_resume_finishes_it(signoff):
    paused = signoff("demo", "--quiet", answers="a\nq\n")

    assert paused.code == 3, paused.err
    [outcome] = paused.lines  # --quiet: the outcome line and nothing else
    run_id = run_id_of(outcome)
    assert outcome == f"{run_id} awaiting_approval (resume with: signoff runs resume {run_id} --demo)"
    assert len(emails(signoff)) == 1 and refunds(signoff) == []

    resumed = signoff("runs", "resume", run_id, "--demo", answers="a\n")

    assert resumed.code == 0, resumed.err
    assert "Approval needed: issue_refund" in resumed.out
    assert resumed.lines[-1].startswith(f"{run_id} done: ")
    assert len(emails(signoff)) == 1
    assert [r["key"] for r in refunds(signoff)] == [f"{run_id}:4"]


def test_resuming_a_finished_run_changes_nothing(signoff):
    done = signoff.here("demo", "--quiet", answers="a\na\n")
    run_id = run_id_of(done.out)

    again = signoff.here("runs", "resume", run_id, "--demo", answers="a\na\n")

    assert again.code == 0
    assert again.lines[-1].startswith(f"{run_id} done: ")
    assert len(emails(signoff)) == 1 and len(refunds(signoff)) == 1


def test_unusable_answers_do_not_loop_forever(signoff):
    result = signoff.here("demo", "--quiet", answers="y\n" * 1000)

    assert result.code == 3, result.err
    assert len(result.lines) == 1
    assert emails(signoff) == []


def test_spelled_out_answers_work_too(signoff):
    result = signoff.here("demo", answers="approve\nDENY\nnot today\n")

    assert result.code == 0, result.err
    assert len(emails(signoff)) == 1 and refunds(signoff) == []
    assert "Approve [a], deny [d] or quit [q]? approve" in result.out  # piped answers are echoed


def test_demo_ignores_the_environment_but_not_its_flags(signoff):
    env = {"SIGNOFF_TOOLS": "no.such.module:TOOLS", "SIGNOFF_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/x",
           "SIGNOFF_MAX_STEPS": "1"}

    result = signoff.here("demo", "--quiet", "--max-steps", "2", "--outbox", "mail", env=env)

    assert result.code == 4, result.err
    assert "budget_exhausted: max_steps reached (extend with: signoff runs resume" in result.out
    assert (signoff.cwd / "signoff-demo.db").exists()


def test_runs_list_and_show_json(signoff):
    done = signoff.here("demo", "--quiet", answers="a\na\n")
    run_id = run_id_of(done.out)

    listed = signoff.here("runs", "list", "--demo")
    header, row = listed.lines
    assert header.split() == ["RUN", "STATUS", "REQUESTER", "STEPS", "UPDATED", "GOAL"]
    assert row.split()[:2] == [run_id, "done"] and row.split()[3] == "5"

    shown = signoff.here("runs", "show", run_id, "--demo", "--json")
    story = json.loads(shown.out)
    assert story["run"]["status"] == "done" and story["run"]["steps"] == 5
    assert [e["type"] for e in story["events"]][:2] == ["run_created", "run_started"]
    assert [a["status"] for a in story["approvals"]] == ["consumed", "consumed"]
    assert [(x["tool"], x["status"]) for x in story["executions"]] == [
        ("send_email", "succeeded"), ("issue_refund", "succeeded")]
    assert story["history"][0] == {"role": "user", "content": story["run"]["goal"]}
