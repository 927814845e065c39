"""A run going round in circles is stopped and shown with what a person can do; and a goal may say
anything, the word "payload" included."""

from __future__ import annotations

import json

from bot_fakes import final, tool_call
from slack_harness import buttons

from bot.blocks import CLOSE_ACTION, EXTEND_ACTION


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
