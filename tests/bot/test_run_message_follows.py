"""The run's message in its channel follows the run, over signed HTTP with a real database: working
while it works, waiting for whom while it waits for a person (with its budget then), working again
after a decision, and its ending; one `chat.update` per change, not one per step."""

from __future__ import annotations

import json
from typing import Any

from bot_fakes import final, tool_call

from signoff.bot.slack.blocks import APPROVE_ACTION


def run_message_versions(slack, run) -> list[dict[str, Any]]:
    """Every version of the run's message Slack was given, the post first."""
    channel, ts = run.origin["channel"], run.origin["ts"]
    posted = next(c for c in slack.calls_to("chat.postMessage") if "Run for" in json.dumps(c.get("blocks")))
    return [posted, *(c for c in slack.calls_to("chat.update") if (c["channel"], c["ts"]) == (channel, ts))]


def status_line(message: dict[str, Any]) -> str:
    context = next(b for b in message["blocks"] if b["type"] == "context")
    return " ".join(e["text"] for e in context["elements"])


def test_the_run_message_says_working_then_whom_it_waits_for_then_working_again_then_done(make_signoff, slack):
    signoff = make_signoff(SIGNOFF_APPROVERS="U0LEAD")
    signoff.script.decisions = [tool_call("lookup_order", order_id="42"),
                                tool_call("issue_refund", order_id="42", amount_usd=20.0), final("Refunded.")]
    assert signoff.command("Refund order 42").status == 200
    run = signoff.only_run()
    posted, working, waiting = run_message_versions(slack, run)  # one update per change, not per step
    # Posted as the worker takes the run, before its first step is saved: it is being worked on.
    assert ":gear: *working*" in status_line(posted) and "(working)" in posted["text"]
    assert ":gear: *working*" in status_line(working) and "budget: steps 1/8" in status_line(working)
    assert "(working)" in working["text"]
    assert ":raised_hand: *awaiting approval*" in status_line(waiting) and "budget: steps 2/8" in status_line(waiting)
    assert "(awaiting approval)" in waiting["text"]
    said = json.dumps(waiting["blocks"])
    assert "*Waiting for approval* of `issue_refund`: 1 approval from <@U0LEAD>" in said  # as the card names them

    assert signoff.click(signoff.approval_message(), APPROVE_ACTION, "U0LEAD").status == 200
    signoff.settle()
    *_, going_on, done = run_message_versions(slack, run)
    assert len(run_message_versions(slack, run)) == 5
    assert ":gear: *working*" in status_line(going_on) and "budget: steps 2/8" in status_line(going_on)
    assert "Waiting for" not in json.dumps(going_on["blocks"])
    assert ":white_check_mark: *done*" in status_line(done) and "budget: steps 3/8" in status_line(done)
    assert "(done)" in done["text"] and "*Done.* The answer is in the thread." in json.dumps(done["blocks"])
    assert slack.message(run.origin["channel"], run.origin["ts"])["blocks"] == done["blocks"]


def test_a_run_waiting_on_a_turns_calls_names_each_and_says_working_once_all_are_decided(make_signoff, slack):
    signoff = make_signoff(SIGNOFF_APPROVERS="U0LEAD")
    signoff.script.decisions = [{"calls": [{**tool_call("issue_refund", order_id="42", amount_usd=20.0), "call_id": "a"},
                                           {**tool_call("issue_refund", order_id="43", amount_usd=30.0), "call_id": "b"}]},
                                final("Refunded both.")]
    assert signoff.command("Refund orders 42 and 43").status == 200
    run = signoff.only_run()
    waiting = run_message_versions(slack, run)[-1]
    said = json.dumps(waiting["blocks"])
    assert "*awaiting approval*" in status_line(waiting)
    assert "*Waiting for approval* of each of:" in said and said.count("1 approval from <@U0LEAD>") == 2

    card = signoff.approval_message()
    approves = [b for b in card["blocks"] if b["type"] == "actions" and b["elements"][0]["action_id"] == APPROVE_ACTION]
    assert signoff.click({**card, "blocks": [approves[0]]}, APPROVE_ACTION, "U0LEAD").status == 200
    signoff.settle()
    assert run_message_versions(slack, run)[-1] == waiting  # one call still waits: nothing changed
    assert signoff.click({**card, "blocks": [approves[1]]}, APPROVE_ACTION, "U0LEAD").status == 200
    signoff.settle()
    *_, going_on, done = run_message_versions(slack, run)
    assert "*working*" in status_line(going_on) and "*done*" in status_line(done)
