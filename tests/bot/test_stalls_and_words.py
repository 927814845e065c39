"""A run going round in circles is stopped and shown with what a person can do; a call of unknown
outcome is shown in full beside its Retry; and a goal may say anything, the word "payload" included."""

from __future__ import annotations

import json

from bot_fakes import final, tool_call
from slack_harness import buttons

from signoff.bot.slack.blocks import (
    APPROVE_ACTION,
    CLOSE_ACTION,
    EXTEND_ACTION,
    RECONCILE_ABORT_ACTION,
    RECONCILE_DONE_ACTION,
    VIEW_ARGS_ACTION,
)


def test_a_stalled_run_is_shown_with_let_it_go_on_and_close(make_signoff, slack):
    signoff = make_signoff(SIGNOFF_MAX_STEPS="20", SIGNOFF_STALL_AFTER="2")
    signoff.script.decisions = [tool_call("lookup_order", order_id="42")] * 3 + [final("The order is fine.")]
    signoff.command("Check order 42")
    run = signoff.only_run()
    assert run.status == "stalled" and run.state["steps"] == 3
    notice = slack.thread("C0RUNS", run.origin["ts"])[-1]
    assert buttons(notice) == [EXTEND_ACTION, CLOSE_ACTION]
    assert "Stalled" in json.dumps(notice["blocks"]) and "repeated earlier calls" in json.dumps(notice["blocks"])
    signoff.click(notice, EXTEND_ACTION, user="U0LEAD")
    assert signoff.run(run.run_id).status == "done"


def test_a_goal_that_mentions_a_payload_starts_a_run(signoff, slack):
    signoff.script.decisions = [final("The webhook payload is fine.")]
    reply = signoff.command("check the webhook payload of order 42")
    assert "Started run" in reply.text, reply.text
    assert signoff.only_run().goal == "check the webhook payload of order 42"


def test_a_call_of_unknown_outcome_is_shown_in_full_beside_its_retry(signoff, slack):
    signoff.script.decisions = [tool_call("slow_refund", order_id="42\nto: attacker", amount_usd=5.0), final("ok")]
    signoff.command("Refund order 42")
    signoff.click(signoff.approval_message(), APPROVE_ACTION, user="U0LEAD")
    run = signoff.only_run()
    assert run.status == "needs_reconciliation"
    notice = json.dumps(slack.thread("C0RUNS", run.origin["ts"])[-1]["blocks"])
    assert 'order_id: \\"42\\\\nto: attacker\\"' in notice and "amount_usd: 5.0" in notice
    assert "in full" in notice


def test_retry_is_not_offered_beside_a_call_too_long_to_show(signoff, slack):
    signoff.script.decisions = [tool_call("slow_refund", order_id="4" * 7000, amount_usd=5.0), final("ok")]
    signoff.command("Refund the long order")
    signoff.click(signoff.approval_message(), VIEW_ARGS_ACTION, user="U0LEAD")
    signoff.click(slack.modal(), APPROVE_ACTION, user="U0LEAD")  # approved where it is shown in full
    run = signoff.only_run()
    assert run.status == "needs_reconciliation"
    notice = slack.thread("C0RUNS", run.origin["ts"])[-1]
    assert buttons(notice) == [RECONCILE_DONE_ACTION, RECONCILE_ABORT_ACTION]
    assert "signoff runs resume" in json.dumps(notice["blocks"])
