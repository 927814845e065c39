"""`signoff demo` end to end: piped answers, a real SQLite file, the real demo tools."""

from __future__ import annotations

import json
import re

import pytest
from cli_harness import Signoff


def refunds(signoff: Signoff) -> list[dict]:
    ledger = signoff.demo_outbox / "refunds.jsonl"
    return [json.loads(line) for line in ledger.read_text().splitlines()] if ledger.exists() else []


def emails(signoff: Signoff) -> list[str]:
    return sorted(p.name for p in signoff.demo_outbox.glob("*.eml"))


def as_any_run(out: str) -> str:
    """`out` without what differs from run to run of the same story: the run id, clock times and
    the digests derived from them (message ids, file names, refund ids)."""
    return re.sub(r"\brun-[0-9a-f]{10}|\d\d:\d\d:\d\d|[0-9a-f]{12,}", "*", out)


def run_id_of(line: str) -> str:
    return line.split()[0]


@pytest.mark.slow
def test_demo_asks_for_the_email_its_policy_runs_the_refund_and_refuses_the_goodwill_one(signoff):
    result = signoff("demo", answers="a\n")

    assert result.code == 0, result.err
    assert "model:    scripted (not a real model)" in result.out
    assert result.out.count("Approval needed") == 1 and "Approval needed: send_email" in result.out
    outcome = result.lines[-1]
    run_id = run_id_of(outcome)
    assert outcome.startswith(f"{run_id} done: Order A-1001")
    assert emails(signoff) == [e for e in emails(signoff) if e.startswith(f"{run_id}_3")] and len(emails(signoff)) == 1
    assert "  step 4  issue_refund" in result.out and "          allowed by rule small-refunds\n" in result.out
    assert ("          x refused by rule large-refunds: refunds over $100 are made by a person in the payments "
            "console, never by the agent\n") in result.out
    [refund] = refunds(signoff)  # the $42.00 one; the $129.00 goodwill refund never ran
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
                     "Budget used:  steps 3/8, tool calls 3", "Expires:",
                     "Who decides:  1 approval from the approvers (the policy's defaults)"):
        assert expected in card
    assert emails(signoff) == []


@pytest.mark.slow
def test_deny_reason_reaches_the_model_and_the_story(signoff):
    result = signoff("demo", answers="d\nplease use a warmer tone\n")

    assert result.code == 0, result.err
    assert "denied by cli:" in result.out
    assert emails(signoff) == []
    assert len(refunds(signoff)) == 1

    shown = signoff.here("runs", "show", run_id_of(result.lines[-1]), "--demo")
    assert shown.code == 0, shown.err
    history = shown.out[shown.out.index("history"):shown.out.index("audit events")]
    assert "x denied by human: please use a warmer tone" in history
    assert "allowed by rule small-refunds" in history and "x refused by rule large-refunds: " in history
    approvals = shown.out[shown.out.index("approvals:"):shown.out.index("executions:")]
    assert "send_email  denied by cli:" in approvals and "please use a warmer tone" in approvals
    assert "issue_refund" not in approvals  # the policy decided both refunds; no one was asked


@pytest.mark.slow
def test_quit_leaves_the_run_paused_and_resume_finishes_it(signoff):
    paused = signoff("demo", "--quiet", answers="q\n")

    assert paused.code == 3, paused.err
    [outcome] = paused.lines  # --quiet: the outcome line and nothing else
    run_id = run_id_of(outcome)
    assert outcome == f"{run_id} awaiting_approval (resume with: signoff runs resume {run_id} --demo)"
    assert emails(signoff) == [] and refunds(signoff) == []

    resumed = signoff("runs", "resume", run_id, "--demo", answers="a\n")

    assert resumed.code == 0, resumed.err
    assert "Approval needed: send_email" in resumed.out
    assert resumed.lines[-1].startswith(f"{run_id} done: ")
    assert len(emails(signoff)) == 1
    assert [r["key"] for r in refunds(signoff)] == [f"{run_id}:4"]


@pytest.mark.slow
def test_a_second_demo_in_the_same_folder_goes_as_the_first_and_leaves_the_shared_outbox_alone(signoff):
    signoff.outbox.mkdir()  # what `signoff run` in this folder made: a refund of its own, on the demo's order
    theirs = '{"amount_usd": "42.00", "key": "run-theirs:1", "order_id": "A-1001"}\n'
    (signoff.outbox / "refunds.jsonl").write_text(theirs)

    first = signoff("demo", answers="a\n")
    second = signoff("demo", answers="a\n")

    assert (first.code, second.code) == (0, 0), first.err + second.err
    first_id, second_id = run_id_of(first.lines[-1]), run_id_of(second.lines[-1])
    assert first_id != second_id
    assert as_any_run(second.out) == as_any_run(first.out)  # step for step, the same story and outcome
    assert first.lines[-1].startswith(f"{first_id} done: Order A-1001")
    assert [(r["key"], r["amount_usd"]) for r in refunds(signoff)] == [(f"{second_id}:4", "42.00")]
    assert len(emails(signoff)) == 2  # each demo's email stays to be read
    assert [p.name for p in signoff.outbox.iterdir()] == ["refunds.jsonl"]
    assert (signoff.outbox / "refunds.jsonl").read_text() == theirs


def test_resuming_a_finished_run_changes_nothing(signoff):
    done = signoff.here("demo", "--quiet", answers="a\n")
    run_id = run_id_of(done.out)

    again = signoff.here("runs", "resume", run_id, "--demo", answers="a\n")

    assert again.code == 0
    assert again.lines[-1].startswith(f"{run_id} done: ")
    assert len(emails(signoff)) == 1 and len(refunds(signoff)) == 1


def test_unusable_answers_do_not_loop_forever(signoff):
    result = signoff.here("demo", "--quiet", answers="maybe\n" * 1000)

    assert result.code == 3, result.err
    assert len(result.lines) == 1
    assert emails(signoff) == []


def test_spelled_out_answers_work_too(signoff):
    approved = signoff.here("demo", answers="approve\n")
    denied = signoff.here("demo", answers="DENY\nnot today\n")

    assert approved.code == 0, approved.err
    # Each demo starts from a fresh world, so the second one's refund runs as the first one's did.
    assert denied.code == 0, denied.err
    assert denied.lines[-1].split(" ", 1)[1].startswith("done: Order A-1001")
    assert len(emails(signoff)) == 1
    assert "Approve [a], deny [d], edit [e] or quit [q]? approve" in approved.out  # piped answers are echoed
    assert "Approve [a], deny [d], edit [e] or quit [q]? DENY" in denied.out and "denied by cli:" in denied.out


def test_demo_ignores_the_environment_but_not_its_flags(signoff):
    env = {"SIGNOFF_TOOLS": "no.such.module:TOOLS", "SIGNOFF_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/x",
           "SIGNOFF_MAX_STEPS": "1", "SIGNOFF_POLICY": "no/such/policy.yaml"}

    result = signoff.here("demo", "--quiet", "--max-steps", "2", "--outbox", "mail", env=env)

    assert result.code == 4, result.err
    assert "budget_exhausted: max_steps reached (extend with: signoff runs resume" in result.out
    assert (signoff.cwd / "signoff-demo.db").exists()


def test_demo_goes_by_another_policy_given_with_the_flag(signoff):
    (signoff.cwd / "strict.yaml").write_text(
        "rules:\n  - name: no-refunds\n    tool: issue_refund\n    decision: deny\n"
        "    reason: refunds wait for the monthly review\n")

    result = signoff.here("demo", "--policy", "strict.yaml", answers="a\n")

    assert result.code == 0, result.err
    assert result.out.count("x refused by rule no-refunds: refunds wait for the monthly review") == 2
    assert refunds(signoff) == [] and len(emails(signoff)) == 1
    paused = signoff.here("demo", "--quiet", "--policy", "strict.yaml")  # resumed, it must go by the same rules
    [outcome] = paused.lines
    assert outcome.endswith(f"(resume with: signoff runs resume {run_id_of(outcome)} --demo --policy strict.yaml)")


def test_runs_list_and_show_json(signoff):
    done = signoff.here("demo", "--quiet", answers="a\n")
    run_id = run_id_of(done.out)

    listed = signoff.here("runs", "list", "--demo")
    header, row = listed.lines
    assert header.split() == ["RUN", "STATUS", "REQUESTER", "STEPS", "UPDATED", "GOAL"]
    assert row.split()[:2] == [run_id, "done"] and row.split()[3] == "6"

    shown = signoff.here("runs", "show", run_id, "--demo", "--json")
    story = json.loads(shown.out)
    assert story["run"]["status"] == "done" and story["run"]["steps"] == 6
    assert [e["type"] for e in story["events"]][:2] == ["run_created", "run_started"]
    assert [(a["tool"], a["status"]) for a in story["approvals"]] == [("send_email", "consumed")]
    assert [(x["tool"], x["status"]) for x in story["executions"]] == [
        ("send_email", "succeeded"), ("issue_refund", "succeeded")]
    assert story["history"][0] == {"role": "user", "content": story["run"]["goal"]}
    ruled = [(e["tool"], e.get("rule"), e.get("error_kind")) for e in story["history"] if e["role"] == "tool"]
    # The second turn is two reads at once: their results are told together, in the order asked.
    assert ruled[:3] == [("lookup_orders", None, None), ("search_handbook", None, None), ("lookup_orders", None, None)]
    assert [e["step"] for e in story["history"] if e["role"] == "tool"][:3] == [1, 2, 2]
    assert ruled[3:] == [("send_email", None, None), ("issue_refund", "small-refunds", None),
                         ("issue_refund", "large-refunds", "denied_by_rule")]
