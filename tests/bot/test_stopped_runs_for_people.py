"""A stopped run as people meet it in Slack, end to end over signed HTTP: the notice says in numbers
what ran out and what Extend adds, a press updates both copies of the notice (thread and DM) and
then shows where the run went, a requester is told why they may not extend their own run, a call
of unknown outcome is named with its arguments and, once marked done, is said to be so; and
`/signoff status` and `cancel` without a run mean the person's latest."""

from __future__ import annotations

import json
from typing import Any

from bot_fakes import make_approval, make_run, tool_call
from slack_harness import Signoff, buttons, find_button

from signoff.bot.arguments import ToolDisplay
from signoff.bot.slack import command_replies, messages
from signoff.bot.slack.argument_blocks import CARD_SECTIONS, shown_arguments
from signoff.bot.slack.blocks import APPROVE_ACTION, EXTEND_ACTION, RECONCILE_DONE_ACTION
from signoff.bot.slack.commands import NO_RUNS, NOTHING_TO_CANCEL
from signoff.bot.words import extension_words, limit_reached
from signoff.runtime.state import DEFAULT_REDACT_KEYS


def lookups(count: int) -> list[dict[str, Any]]:
    return [tool_call("lookup_order", order_id=str(n)) for n in range(count)]


def texts(message: dict[str, Any]) -> str:
    return json.dumps(message.get("blocks", []), ensure_ascii=False)


def exhausted_run(make_signoff, steps: str = "2") -> tuple[Signoff, Any]:
    """A run that ran out of its steps, its notice in its thread and in the requester's DM."""
    signoff = make_signoff(SIGNOFF_MAX_STEPS=steps, SIGNOFF_EXTEND_STEPS="4")
    signoff.script.decisions = lookups(50)  # it would look things up for as long as it is let
    signoff.command("Check every order")
    run = signoff.only_run()
    assert run.status == "budget_exhausted"
    return signoff, run


def notices(signoff: Signoff, slack, run) -> tuple[dict[str, Any], dict[str, Any]]:
    """The run's latest stopped notice: its copy in the thread and its copy in the requester's DM."""
    return slack.thread("C0RUNS", run.origin["ts"])[-1], slack.messages_in(slack.dm_channel(run.requester))[-1]


# -- out of budget -----------------------------------------------------------------------------------


def test_the_notice_says_in_numbers_what_ran_out_and_what_extend_adds(make_signoff, slack):
    signoff, run = exhausted_run(make_signoff)
    in_thread, in_dm = notices(signoff, slack, run)
    for notice in (in_thread, in_dm):
        assert "*Out of budget:* The run used all 2 of its steps." in texts(notice)
        assert "max_steps" not in texts(notice)
        assert find_button(notice, EXTEND_ACTION)["text"]["text"] == "Extend (+4 steps)"
    assert "The run used all 2 of its steps." in in_dm["text"]  # the notification says it too


def test_a_press_on_one_copy_updates_both_and_then_shows_where_the_run_went(make_signoff, slack):
    signoff, run = exhausted_run(make_signoff)
    in_thread, in_dm = notices(signoff, slack, run)
    signoff.click(in_thread, EXTEND_ACTION, user="U0LEAD")
    run = signoff.run(run.run_id)
    assert run.status == "budget_exhausted" and run.budget["max_steps"] == 6  # extended, and out again
    for copy in (in_thread, in_dm):
        now = slack.message(copy["channel"], copy["ts"])
        assert buttons(now) == [], copy["channel"]
        assert "Extended by <@U0LEAD>; the run continues." in texts(now)
        assert "now *budget exhausted*: The run used all 6 of its steps." in texts(now)
    newest, _ = notices(signoff, slack, run)  # the new notice is the live one
    assert buttons(newest) == [EXTEND_ACTION, "signoff.close"] and newest["ts"] != in_thread["ts"]


def test_the_requester_pressing_extend_is_told_someone_else_has_to_extend_it(make_signoff, slack):
    signoff, run = exhausted_run(make_signoff)
    _, in_dm = notices(signoff, slack, run)
    signoff.click(in_dm, EXTEND_ACTION, user="U0ASKER")
    assert signoff.run(run.run_id).budget["max_steps"] == 2
    assert "Not done: you started this run, so someone else has to extend its budget" in signoff.ephemerals()
    assert buttons(slack.message(in_dm["channel"], in_dm["ts"])) == [EXTEND_ACTION, "signoff.close"]


def test_every_limit_is_said_with_its_numbers():
    assert limit_reached("max_steps", 8, 8) == "The run used all 8 of its steps."
    assert limit_reached("max_steps", 1, 1) == "The run used its only step."
    assert limit_reached("max_tool_calls", 5, 5) == "The run used all 5 of its tool calls."
    assert limit_reached("max_tokens", 10_240, 10_000) == "The run used 10,240 of its 10,000 tokens."
    assert limit_reached("max_cost_usd", 1.0234, 1.0) == "The run spent $1.02 of its $1.00."
    assert limit_reached("max_seconds", 612.4, 600) == "The run ran for 612 of its 600 seconds."


def test_extend_says_what_it_adds_for_each_limit():
    assert extension_words("max_steps", 3) == "+3 steps"
    assert extension_words("max_tool_calls", 1) == "+1 tool call"
    assert extension_words("max_cost_usd", 4) == "+50% cost"
    assert extension_words("max_seconds", 4) == "+50% time"
    run = make_run(status="budget_exhausted", state={"stop": {"reason": "max_cost_usd reached", "budget": "max_cost_usd",
                                                              "limits": {"max_cost_usd": {"used": 1.01, "limit": 1.0}}}})
    message = messages.stopped_message(run, extend_steps=4)
    assert find_button({"blocks": message.blocks}, EXTEND_ACTION)["text"]["text"] == "Extend (+50% cost)"
    assert "The run spent $1.01 of its $1.00." in texts({"blocks": message.blocks})


# -- a call of unknown outcome ------------------------------------------------------------------------


def test_a_call_of_unknown_outcome_is_named_and_once_marked_done_the_thread_says_so(signoff, slack, ledger):
    signoff.script.decisions = [tool_call("slow_refund", order_id="42", amount_usd=5.0), {"final": "Refund sent."}]
    signoff.command("Refund order 42")
    signoff.click(signoff.approval_message(), APPROVE_ACTION, user="U0LEAD")
    run = signoff.only_run()
    assert run.status == "needs_reconciliation"
    in_thread, in_dm = notices(signoff, slack, run)
    for notice in (in_thread, in_dm):
        shown = texts(notice)
        assert f"Call `slow_refund` with key `{run.run_id}:1` may or may not have taken effect" in shown
        assert 'order_id: \\"42\\"\\namount_usd: 5.0' in shown  # its arguments, in the tool's order
        assert f"Did slow_refund ({run.run_id}:1) take effect?" in notice["text"]

    signoff.click(in_dm, RECONCILE_DONE_ACTION, user="U0LEAD")
    run = signoff.run(run.run_id)
    assert run.status == "done" and ledger.total == 1  # settled as it was, not run again
    thread = slack.thread("C0RUNS", run.origin["ts"])
    said = [m for m in thread if "marked done" in m["text"]]
    assert [m["text"] for m in said] == ["slow_refund marked done by <@U0LEAD>"]
    assert ("`slow_refund` (step 1) *marked done* by <@U0LEAD>: they checked that it took effect, so it is "
            "not run again.") in texts(said[0])
    assert not any("returned" in m["text"] and "slow_refund" in m["text"] for m in thread)
    assert "null" not in texts(said[0])
    for copy in (in_thread, in_dm):
        now = slack.message(copy["channel"], copy["ts"])
        assert buttons(now) == [] and "Marked done by <@U0LEAD>; the run continues." in texts(now)
        assert "now *done*" in texts(now)


def test_the_reconciliation_notice_redacts_secrets_as_the_card_does():
    args = {"order_id": "42", "pin": "4321", "password": "hunter2"}
    run = make_run(status="needs_reconciliation", state={
        "stop": {"reason": "timed out", "tool": "issue_refund", "key": "run-0123456789:2"},
        "pending": {"tool": "issue_refund", "args": args, "key": "run-0123456789:2", "step": 2, "call_id": "c2"}})
    display = ToolDisplay(secret_names=DEFAULT_REDACT_KEYS | {"pin"})
    notice = texts({"blocks": messages.stopped_message(run, display=display).blocks})
    card = texts({"blocks": shown_arguments(run, make_approval(args=args), display, CARD_SECTIONS).sections})
    assert "4321" not in notice and "hunter2" not in notice
    assert "pin: [redacted: 4 chars, #" in notice and card.split("```")[1] in notice  # the card's very lines


# -- /signoff status and cancel without a run ---------------------------------------------------------


def test_status_and_cancel_without_a_run_mean_the_persons_latest(signoff, slack):
    assert signoff.command("status").json()["text"] == NO_RUNS
    signoff.script.decisions = [tool_call("issue_refund", order_id="42", amount_usd=5.0), {"final": "Refunded."}]
    signoff.command("Refund order 42")
    first = signoff.only_run()
    signoff.clock.advance(seconds=5)
    signoff.script.decisions = [{"final": "Nothing to do."}]
    signoff.command("Check order 43")
    second = next(r for r in signoff.runner.runs_for("U0ASKER") if r.run_id != first.run_id)
    assert second.status == "done"

    status = signoff.command("status").json()["blocks"][0]["text"]["text"]
    assert f"Run `{second.run_id}` is *done*" in status  # the latest, whatever it is
    cancelled = signoff.command("cancel").json()["text"]  # the latest that has not ended
    assert cancelled == f"Cancelling run `{first.run_id}`; nothing pending will be executed."
    assert signoff.run(first.run_id).status == "cancelled"
    assert signoff.command("cancel").json()["text"] == NOTHING_TO_CANCEL
    assert signoff.command("status", user="U0LEAD").json()["text"] == NO_RUNS  # only one's own runs


def test_counts_of_one_are_said_in_the_singular():
    run, approval = make_run(), make_approval()
    assert command_replies.list_message([run], [(run, approval)]).text == "1 approval waiting on you; 1 recent run"
    assert command_replies.list_message([run, run], []).text == "0 approvals waiting on you; 2 recent runs"


def test_a_notice_pressed_reads_queued_until_a_worker_takes_the_request():
    run = make_run(status="budget_exhausted", command={"op": "extend", "by": "U0LEAD"},
                   state={"stop": {"reason": "max_steps reached", "budget": "max_steps"}})
    context = messages.run_closed_message(run, "Extended by <@U0LEAD>; the run continues.").blocks[-1]
    assert context["elements"][0]["text"].startswith(":hourglass_flowing_sand: now *queued* · run `")


def test_only_the_person_who_stopped_a_run_is_made_a_mention_never_an_id_in_the_text():
    run = make_run(status="cancelled", state={"stop": {"reason": "closed by U0ALICE; ask U0BOSS <@U0BOSS>",
                                                       "by": "U0ALICE"}})
    header = texts({"blocks": messages.run_message(run).blocks})
    assert "closed by <@U0ALICE>; ask U0BOSS &lt;@U0BOSS&gt;" in header
