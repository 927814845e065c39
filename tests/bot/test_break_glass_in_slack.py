"""Break-glass as people meet it in Slack, over signed HTTP with a real database: the requester of a
refund its rule offers break-glass for approves it alone with a reason, it runs once, the security
channel is told loudly and a review card asks the rule's approvers; Confirm and Flag work once
(replays and the breaker's own click change nothing); the reminder and the overdue notice are made
once each, also with two replicas sweeping; a rule without break-glass never offers it, and a forged
break-glass for one is refused."""

from __future__ import annotations

import json
from urllib.parse import urlencode

import pytest
from bot_fakes import final, tool_call
from slack_harness import Signoff, buttons

from signoff.bot.slack.blocks import (
    APPROVE_ACTION,
    BREAK_GLASS_ACTION,
    BREAK_GLASS_MODAL,
    GLASS_CONFIRM_ACTION,
    GLASS_FLAG_ACTION,
    GLASS_REASON_BLOCK,
    GLASS_REASON_INPUT,
)
from signoff.runtime.records import RunRecord

POLICY = """\
defaults:
  approvers: [U0LEAD]
rules:
  - name: big-refunds
    tool: issue_refund
    when: "args.amount_usd > 500"
    approvers: [U0LEAD, U0SRE]
    quorum: 2
    break_glass: {reason_min_chars: 20, review_within: 4h, notify: [C0SECURITY]}
  - name: refunds
    tool: issue_refund
    approvers: [U0LEAD]
"""
REASON = "customer is escalating to the CEO and both leads are on a plane"


@pytest.fixture
def policy_env(tmp_path) -> dict[str, str]:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY, encoding="utf-8")
    return {"SIGNOFF_POLICY": str(path)}


@pytest.fixture
def signoff(make_signoff, policy_env) -> Signoff:
    return make_signoff(**policy_env)


def propose(signoff: Signoff, amount: float) -> RunRecord:
    signoff.script.decisions = [tool_call("issue_refund", order_id="42", amount_usd=amount), final("Refunded.")]
    assert signoff.command("Refund order 42", user="U0ASKER").status == 200
    return signoff.runner.store.list_runs(limit=1)[0]


def submit_glass(signoff: Signoff, view: dict, user: str, reason: str) -> None:
    payload = {"type": "view_submission", "team": {"id": "T0TEST"}, "user": {"id": user}, "api_app_id": "A0SIGNOFF",
               "token": "legacy", "trigger_id": "9.9.trigger", "response_urls": [],
               "view": {**view, "id": "V9", "state": {"values": {GLASS_REASON_BLOCK: {GLASS_REASON_INPUT: {
                   "type": "plain_text_input", "value": reason}}}}}}
    signoff.post(urlencode({"payload": json.dumps(payload)}), "application/x-www-form-urlencoded")


def posted_to(slack, channel: str) -> list[dict]:
    return [c for c in slack.calls_to("chat.postMessage") if c.get("channel") == channel]


def review_card(signoff: Signoff, slack, approval_id: str) -> dict:
    approval = signoff.runner.get_approval(approval_id)
    assert approval is not None and approval.glass_message is not None, "no review card was recorded"
    return slack.message(approval.glass_message["channel"], approval.glass_message["ts"])


def test_the_requester_breaks_the_glass_it_runs_once_and_the_security_channel_is_told(signoff, slack, ledger) -> None:
    run = propose(signoff, 900.0)
    card = signoff.approval_message()
    assert BREAK_GLASS_ACTION in buttons(card) and APPROVE_ACTION in buttons(card)
    signoff.click(card, BREAK_GLASS_ACTION, "U0ASKER")
    form = slack.last("views.open")["view"]
    assert form["callback_id"] == BREAK_GLASS_MODAL
    submit_glass(signoff, form, "U0ASKER", "too short")  # Slack's min_length aside, the server counts too
    assert ledger.total == 0 and "in at least 20 characters" in " ".join(signoff.ephemerals("U0ASKER"))
    submit_glass(signoff, form, "U0ASKER", REASON)
    submit_glass(signoff, form, "U0ASKER", REASON)  # the form sent twice
    assert ledger.calls == {f"{run.run_id}:1": 1}
    approval = signoff.runner.store.approval_for_key(f"{run.run_id}:1")
    assert approval is not None and approval.glass is not None and approval.glass["reason"] == REASON
    told = posted_to(slack, "C0SECURITY")
    assert len(told) == 1 and REASON in json.dumps(told[0]) and "<@U0ASKER>" in json.dumps(told[0])
    review = review_card(signoff, slack, approval.approval_id)
    assert buttons(review) == [GLASS_CONFIRM_ACTION, GLASS_FLAG_ACTION]
    assert [e["type"] for e in signoff.runner.timeline(run.run_id) if e["type"].startswith("break_glass")] == [
        "break_glass_told"]


def test_confirm_and_flag_count_once_and_never_from_the_one_who_broke_it(signoff, slack, ledger) -> None:
    run = propose(signoff, 900.0)
    signoff.click(signoff.approval_message(), BREAK_GLASS_ACTION, "U0LEAD")  # one approver of a quorum of 2, alone
    submit_glass(signoff, slack.last("views.open")["view"], "U0LEAD", REASON)
    assert ledger.calls == {f"{run.run_id}:1": 1}
    approval = signoff.runner.store.approval_for_key(f"{run.run_id}:1")
    assert approval is not None
    card = review_card(signoff, slack, approval.approval_id)
    signoff.click(card, GLASS_CONFIRM_ACTION, "U0LEAD")
    assert "someone else reviews it" in " ".join(signoff.ephemerals("U0LEAD"))
    signoff.click(card, GLASS_FLAG_ACTION, "U0STRANGER")
    assert signoff.runner.get_approval(approval.approval_id).glass_review is None
    signoff.click(card, GLASS_FLAG_ACTION, "U0SRE")
    signoff.click(card, GLASS_CONFIRM_ACTION, "U0SRE")  # a second click, and a replay of the old card
    reviewed = signoff.runner.get_approval(approval.approval_id)
    assert reviewed.glass_review is not None and reviewed.glass_review["verdict"] == "flagged"
    assert "Already reviewed: flagged by <@U0SRE>" in " ".join(signoff.ephemerals("U0SRE"))
    assert buttons(review_card(signoff, slack, approval.approval_id)) == []
    flagged = [c for c in posted_to(slack, "C0SECURITY") if "flagged" in json.dumps(c)]
    assert len(flagged) == 1
    assert sum(e["type"] == "break_glass_reviewed" for e in signoff.runner.timeline(run.run_id)) == 1


def test_an_unreviewed_break_glass_is_reminded_half_way_and_told_overdue_once_across_replicas(
        make_signoff, policy_env, database_url, slack, ledger) -> None:
    first, second = make_signoff(database_url, **policy_env), make_signoff(database_url, **policy_env)
    run = propose(first, 900.0)
    first.click(first.approval_message(), BREAK_GLASS_ACTION, "U0ASKER")
    submit_glass(first, slack.last("views.open")["view"], "U0ASKER", REASON)
    approval = first.runner.store.approval_for_key(f"{run.run_id}:1")
    assert approval is not None
    for hours in (1, 1.5, 0, 2, 0, 1):  # to 1h, 2.5h (half way: remind), 4.5h (overdue), 5.5h
        for replica in (first, second):
            replica.clock.advance(hours=hours)
        first.runner.glass_due()
        second.runner.glass_due()
    kinds = [e["type"] for e in first.runner.timeline(run.run_id) if e["type"].startswith("break_glass")]
    assert kinds == ["break_glass_told", "break_glass_review_reminded", "break_glass_review_overdue"]
    overdue = [c for c in posted_to(slack, "C0SECURITY") if "Overdue" in json.dumps(c)]
    assert len(overdue) == 1


def test_a_rule_without_break_glass_never_offers_it_and_a_forged_one_is_refused(signoff, slack, ledger) -> None:
    run = propose(signoff, 120.0)
    card = signoff.approval_message()
    assert BREAK_GLASS_ACTION not in buttons(card)
    approval = signoff.runner.store.approval_for_key(f"{run.run_id}:1")
    assert approval is not None
    forged = {**card, "blocks": [*card["blocks"], {"type": "actions", "block_id": "x", "elements": [
        {"type": "button", "action_id": BREAK_GLASS_ACTION, "text": {"type": "plain_text", "text": "Break glass"},
         "value": f"{approval.approval_id}:{approval.digest}"}]}]}
    signoff.click(forged, BREAK_GLASS_ACTION, "U0ASKER")
    assert slack.attempts("views.open") == 0
    assert "offers no break-glass" in " ".join(signoff.ephemerals("U0ASKER"))
    view = {"type": "modal", "callback_id": BREAK_GLASS_MODAL,
            "private_metadata": json.dumps({"approval": approval.approval_id, "digest": approval.digest})}
    submit_glass(signoff, view, "U0ASKER", REASON)  # the form forged too
    assert ledger.total == 0 and signoff.runner.get_approval(approval.approval_id).status == "pending"
    assert not posted_to(slack, "C0SECURITY")


def test_a_break_glass_receipt_says_who_broke_it_and_why(make_signoff, policy_env, tmp_path, slack, ledger) -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from signoff.bot.words import receipt_words
    from signoff.receipts import private_key_pem, receipt_problem

    key = Ed25519PrivateKey.generate()
    path = tmp_path / "signing.pem"
    path.write_bytes(private_key_pem(key))
    signoff = make_signoff(**policy_env, SIGNOFF_SIGNING_KEY=str(path))
    run = propose(signoff, 900.0)
    signoff.click(signoff.approval_message(), BREAK_GLASS_ACTION, "U0ASKER")
    submit_glass(signoff, slack.last("views.open")["view"], "U0ASKER", REASON)
    approval = signoff.runner.store.approval_for_key(f"{run.run_id}:1")
    assert approval is not None
    receipt = signoff.runner.store.receipt_of(approval_id=approval.approval_id)
    assert receipt is not None and receipt_problem(receipt, [key.public_key()]) is None
    assert receipt["receipt"]["break_glass"]["by"] == "U0ASKER"
    assert receipt["receipt"]["break_glass"]["reason"] == REASON
    assert [v["user"] for v in receipt["receipt"]["decided_by"]] == ["U0ASKER"]
    [told] = posted_to(slack, "C0SECURITY")
    assert receipt_words(receipt) in json.dumps(told, ensure_ascii=False), "the security channel is told the receipt"
