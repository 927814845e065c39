"""Deciding better in the terminal (`signoff run` / `runs resume`, answers piped): `e` edits the
call one argument at a time or as one JSON object and asks again when the tool refuses the edit;
`s` approves and allows similar calls where the rule offers it; reminders, escalations and a run
that goes on after nobody decided are said plainly."""

from __future__ import annotations

import io
import json
import time
from datetime import UTC, datetime, timedelta
from email import message_from_bytes

from signoff.bot.cli.console import Console
from signoff.bot.cli.notifier import TerminalNotifier
from signoff.runtime.budget import Budget
from signoff.runtime.cards import ALONE
from signoff.runtime.records import ApprovalRecord, RunRecord
from signoff.runtime.state import call_digest, new_state

EMAIL = {"tool": "send_email", "args": {"to": "ada@example.com", "subject": "Your refund",
                                        "body": "Dear Ada, your refund is on its way."}}
PROMPT = "Approve [a], deny [d], edit [e] or quit [q]? "


def script(signoff, *decisions: dict) -> str:
    path = signoff.cwd / "script.json"
    path.write_text(json.dumps([*decisions, {"final": "done"}]))
    return f"scripted:{path}"


def sent(signoff) -> list[dict[str, str]]:
    """Each email in the outbox: its recipient, subject and body."""
    found = []
    for path in sorted(signoff.outbox.glob("*.eml")):
        message = message_from_bytes(path.read_bytes())
        found.append({"to": message["To"], "subject": message["Subject"],
                      "body": message.get_payload(decode=True).decode().strip()})
    return found


def story(signoff, run_id: str) -> dict:
    shown = signoff.here("runs", "show", run_id, "--json")
    assert shown.code == 0, shown.err
    return json.loads(shown.out)


def test_e_edits_one_argument_at_a_time_and_the_edited_call_is_approved_afresh(signoff):
    model = script(signoff, EMAIL)
    answers = "e\n\n\"Your refund of $42.00\"\n\na\n"  # keep to, change subject, keep body; then approve

    result = signoff.here("run", "write to Ada", "--model", model, "--user", "cli:ana", answers=answers)

    assert result.code == 0, result.out + result.err
    assert '    to: "ada@example.com"\n    new value: \n' in result.out
    assert '    subject: "Your refund"\n    new value: "Your refund of $42.00"\n' in result.out
    assert "  edited by cli:ana; a new request follows\n" in result.out
    assert result.out.count("+-- Approval needed: send_email") == 2  # the edited call is shown again, whole
    second_card = result.out[result.out.rindex("+-- Approval needed: send_email"):]
    assert '|   subject: "Your refund of $42.00"' in second_card
    assert ("| Edited by cli:ana, from what the model proposed:\n"
            '|   subject: "Your refund" -> "Your refund of $42.00"') in second_card
    assert sent(signoff) == [{**EMAIL["args"], "subject": "Your refund of $42.00"}]
    ran = result.out[result.out.index("  step 1  send_email"):]
    assert ran.splitlines()[0].endswith(" (as the model proposed it)")
    assert ran.splitlines()[1] == ('          cli:ana changed this call before it ran (subject: "Your refund" -> '
                                   '"Your refund of $42.00")')
    run = story(signoff, result.lines[-1].split()[0])
    assert sorted(a["status"] for a in run["approvals"]) == ["consumed", "superseded"]


def test_an_edit_the_tool_refuses_is_said_and_asked_again_and_json_replaces_every_argument(signoff):
    model = script(signoff, EMAIL)
    whole = json.dumps({"to": "ben@example.com", "subject": "Hello", "body": "Hi Ben"})
    answers = f'e\n"not an address"\n\n\ne\njson\n{whole}\na\n'

    result = signoff.here("run", "write to Ada", "--model", model, answers=answers)

    assert result.code == 0, result.out + result.err
    assert "  not done: invalid arguments: to: Value error, not a valid email address\n" + PROMPT in result.out
    assert f"  All the arguments, as one JSON object: {whole}\n" in result.out
    assert sent(signoff) == [{"to": "ben@example.com", "subject": "Hello", "body": "Hi Ben"}]


def test_an_edit_that_changes_nothing_is_refused_and_end_of_input_leaves_the_run_paused(signoff):
    model = script(signoff, EMAIL)

    result = signoff.here("run", "write to Ada", "--model", model, answers="e\n\n\n\n")

    assert result.code == 3, result.out + result.err
    assert "  not done: nothing was changed\n" in result.out
    assert sent(signoff) == []
    [approval] = story(signoff, result.lines[-1].split()[0])["approvals"]
    assert approval["status"] == "pending"


GRANTING = """\
rules:
  - name: mail-ada
    tool: send_email
    grant: {for: 30m, same: [to], scope: run}
"""


def test_s_approves_and_lets_similar_calls_of_the_run_go_unasked(signoff):
    (signoff.cwd / "policy.yaml").write_text(GRANTING)
    follow_up = {"tool": "send_email", "args": {**EMAIL["args"], "subject": "Your refund, again",
                                                "body": "Dear Ada, it has arrived."}}
    model = script(signoff, EMAIL, follow_up)

    result = signoff.here("run", "write to Ada twice", "--model", model, "--policy", "policy.yaml", answers="s\n")

    assert result.code == 0, result.out + result.err
    assert ("Approve [a], approve + allow similar for 30 min [s], deny [d], edit [e] or quit [q]? s\n"
            in result.out)
    assert "| Grant:        s approves and lets calls of this run with the same to run unasked for 30 min" in result.out
    assert result.out.count("+-- Approval needed") == 1  # the second email was not asked about
    assert "  allowing similar calls for 30 min: calls of this run with the same to run unasked (grant grt_" in (
        result.out)
    assert "          allowed by grant grt_" in result.out
    assert [m["subject"] for m in sent(signoff)] == ["Your refund", "Your refund, again"]


def test_without_a_grant_on_offer_s_is_no_answer(signoff):
    model = script(signoff, EMAIL)

    result = signoff.here("run", "write to Ada", "--model", model, answers="s\nq\n")

    assert result.code == 3, result.out + result.err
    assert f"{PROMPT}s\n  please answer a, d, e, q\n" in result.out
    assert sent(signoff) == []


# -- what the terminal says of reminders, escalations and timeouts ---------------------------------------

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def told(method: str, *args: object, on_expiry: str = "end") -> str:
    out = io.StringIO()
    notifier = TerminalNotifier(Console(out, io.StringIO()), {})
    args_ = {"to": "ada@example.com"}
    approval = ApprovalRecord(
        approval_id="apr_1", run_id="run-1", step=1, tool="send_email", args=args_, key="run-1:1",
        digest=call_digest("send_email", args_, "run-1:1"), status="pending", requester="cli:ana",
        requested_at=NOW, expires_at=NOW + timedelta(minutes=10),
        asked={"rule": "mail", "policy": "0" * 16, "approvers": ["U0LEE"], "quorum": 1, "ttl_seconds": 600,
               "allow_self_approval": False, "on_expiry": on_expiry})
    state = new_state("run-1", Budget(max_steps=8).to_json())
    run = RunRecord(run_id="run-1", goal="write", requester="cli:ana", origin={}, model="scripted:demo",
                    status="awaiting_approval", state=state, version=1, created_at=NOW, updated_at=NOW)
    getattr(notifier, method)(run, approval, *args)
    return out.getvalue()


def test_reminders_escalations_and_timeouts_are_said_in_the_terminal():
    assert told("approval_reminded", []) == ("  reminder: the approval for send_email (run-1:1) still waits for 1 approval "
                                         "from U0LEE; it expires 12:10:00 UTC\n")
    assert told("approval_escalated", ["U0ADA", "S0OPS"], ["U0ADA"]) == (
        "  escalated: nobody decided in time, so U0ADA and S0OPS may now decide the approval for send_email (run-1:1)\n")
    assert told("approval_expired", ALONE) == "  the approval for send_email (run-1:1) expired; nothing was executed\n"
    assert told("approval_expired", ALONE, on_expiry="continue") == (
        "  the approval for send_email (run-1:1) expired; nothing was executed: the model is told no one decided "
        "within 10 min; the call was not made, and the run goes on\n")


QUICK = """\
rules:
  - name: quick
    tool: send_email
    ttl: 2s
"""


def test_resume_offers_to_request_again_a_call_nobody_decided_in_time_and_runs_it_once_approved(signoff):
    (signoff.cwd / "policy.yaml").write_text(QUICK)
    model = script(signoff, EMAIL)
    paused = signoff.here("run", "write to Ada", "--model", model, "--policy", "policy.yaml", "--quiet",
                          answers="q\n")
    run_id = paused.out.split()[0]
    assert paused.code == 3, paused.out + paused.err
    time.sleep(2.5)  # nobody decided within its 2 s
    resumed = signoff.here("runs", "resume", run_id, "--policy", "policy.yaml", answers="a\na\n")

    assert resumed.code == 0, resumed.out + resumed.err
    assert "  nobody decided send_email (key " in resumed.out
    assert "Request it again (a fresh approval) [a] or quit [q]? a\n" in resumed.out
    assert resumed.out.count("+-- Approval needed: send_email") == 2  # the expired request, then the fresh one
    assert [m["subject"] for m in sent(signoff)] == ["Your refund"]  # once
    assert [e["type"] for e in story(signoff, run_id)["events"]].count("requested_again") == 1
