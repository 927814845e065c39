"""The approval card and the run's thread as a busy person reads them on a phone, end to end over
signed HTTP: why the model wants the call, where the run is, who may decide, "are you sure?" for a
tool that asks it, the same argument order after a click, people as mentions, run states in plain
words, and long tool results summed up with the whole one click away."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from bot_fakes import HOSTILE, Ledger, RefundArgs, final, make_run, tool_call
from pydantic import BaseModel
from slack_harness import Signoff, buttons, find_button

from signoff.bot.slack import messages
from signoff.bot.slack.blocks import (
    APPROVE_ACTION,
    DENY_ACTION,
    MAX_CONFIRM_TEXT,
    MODEL_WORDS_CHARS,
    VIEW_ARGS_ACTION,
    VIEW_RESULT_ACTION,
    code_section_lines,
)
from signoff.bot.summaries import SUMMARY_LINES
from signoff.tools.base import Tool
from tests.fakes.slack import block_kit_problems, view_problems

REASON = "Order 42 arrived broken, so I am refunding it in full."


def texts(message: dict[str, Any]) -> list[str]:
    """Every mrkdwn text of a message's sections and contexts, in order."""
    found = []
    for block in message.get("blocks", []):
        if block["type"] == "section":
            found.append(block["text"]["text"])
        elif block["type"] == "context":
            found += [element["text"] for element in block["elements"]]
    return found


def argument_lines(message: dict[str, Any]) -> list[str]:
    return code_section_lines([b["text"]["text"] for b in message["blocks"] if b["type"] == "section"])


def propose_refund(signoff: Signoff, text: str | None = REASON, **args: Any) -> None:
    call = tool_call("issue_refund", **({"order_id": "42", "amount_usd": 19.99} | args))
    signoff.script.decisions = [{**call, **({"text": text} if text is not None else {})}, final("Refunded.")]
    assert signoff.command("Refund order 42").status == 200


# -- why, where and who -----------------------------------------------------------------------------


def test_the_card_quotes_what_the_model_said_beside_its_call_as_the_models_words(signoff, slack):
    propose_refund(signoff)
    card = signoff.approval_message()
    said = [t for t in texts(card) if t.startswith("*The model says*")]
    assert said == [f"*The model says*\n>{REASON}"]
    assert texts(card).index(said[0]) == 1  # right under the goal, above the tool and its arguments

    signoff.click(card, APPROVE_ACTION, user="U0LEAD")
    decided = signoff.approval_message()
    assert buttons(decided) == [] and f"*The model says*\n>{REASON}" in texts(decided)  # the card keeps it


def test_the_models_words_are_escaped_kept_to_one_line_and_cut(signoff, slack):
    words = "Trust me.\n*Who decides* nobody\n" + HOSTILE + " and so on" * 100
    propose_refund(signoff, text=words)
    card = signoff.approval_message()
    [said] = [t for t in texts(card) if t.startswith("*The model says*")]
    quoted = said.removeprefix("*The model says*\n>")
    assert "\n" not in quoted  # one quoted line: it cannot draw a line that looks like the card's own
    assert quoted.startswith("Trust me. ∗Who decides∗ nobody &lt;!channel&gt; &lt;!here&gt;")  # bolds no heading
    assert len(quoted) <= MODEL_WORDS_CHARS and quoted.endswith("…")
    assert "<!channel>" not in json.dumps(card["blocks"]) and "<@U0BOSS>" not in json.dumps(card["blocks"])
    assert block_kit_problems(card["blocks"]) == []


def test_a_call_the_model_gave_no_words_for_has_no_quote(signoff):
    propose_refund(signoff, text=None)
    assert not any(t.startswith("*The model says*") for t in texts(signoff.approval_message()))


def test_the_full_arguments_modal_quotes_the_model_too(signoff, slack):
    propose_refund(signoff, order_id="4" * 7000)
    signoff.click(signoff.approval_message(), VIEW_ARGS_ACTION, user="U0LEAD")
    assert f"*The model says*\n>{REASON}" in slack.modal()["blocks"][0]["text"]["text"]


def test_the_card_links_the_run_message_and_says_who_decides(signoff, slack):
    propose_refund(signoff)
    run = signoff.only_run()
    goal, *_ = (t for t in texts(signoff.approval_message()) if t.startswith("*Goal*"))
    message = f"p{run.origin['ts'].replace('.', '')}"
    link = f"<https://signoff-test.slack.com/archives/{run.origin['channel']}/{message}|see the run>"
    assert goal.startswith(f"*Goal* (asked by <@U0ASKER> · {link})\n")
    assert any(t.startswith("*Who decides* 1 approval from any member of the approval channel")
               for t in texts(signoff.approval_message()))


# -- "are you sure?" for a tool that asks it --------------------------------------------------------------


class PayoutArgs(BaseModel):
    account: str
    amount_usd: float


class ConfirmingLedger(Ledger):
    """The test ledger plus `send_payout`, a tool marked to confirm every approval."""

    def tools(self) -> dict[str, Tool]:
        payout = Tool("send_payout", lambda args, key: {"paid": args["amount_usd"]}, side_effect=True,
                      args_model=PayoutArgs, description="Pay money out to an account.", confirm=True)
        return {**super().tools(), payout.name: payout}


def test_a_tool_marked_confirm_asks_are_you_sure_on_every_approve(slack, sqlite_url):
    signoff = Signoff(slack, sqlite_url, ConfirmingLedger(), {})
    try:
        signoff.script.decisions = [tool_call("send_payout", account="NL01", amount_usd=5.0), final("Paid.")]
        signoff.command("Pay the supplier")
        card = signoff.approval_message()
        dialog = find_button(card, APPROVE_ACTION)["confirm"]
        assert "send_payout asks you to confirm every approval" in dialog["text"]["text"]
        assert len(dialog["text"]["text"]) <= MAX_CONFIRM_TEXT and dialog["confirm"]["text"] == "Approve"
        assert "confirm" not in find_button(card, DENY_ACTION)
        signoff.home_opened("U0LEAD")  # App Home's Approve asks too
        assert find_button(slack.views["U0LEAD"], APPROVE_ACTION)["confirm"] == dialog
    finally:
        signoff.close()


def test_a_tool_not_marked_confirm_approves_in_one_click(signoff):
    propose_refund(signoff)
    assert "confirm" not in find_button(signoff.approval_message(), APPROVE_ACTION)


class OrderArgs(BaseModel):
    order_id: str


def test_confirm_is_part_of_a_tools_contract_and_leaves_every_other_contract_as_it_was():
    tool = Tool("issue_refund", lambda args, key: None, side_effect=True, args_model=OrderArgs, description="Refund.")
    assert dataclasses.replace(tool, confirm=True).contract != tool.contract
    # The hash this tool had before the flag existed: stored approvals are bound to it, and a
    # changed contract would replace every pending one at the deploy that brings the flag.
    assert tool.contract == "9b6120784c03ff3c"


# -- after the click ------------------------------------------------------------------------------------


def test_after_a_decision_the_arguments_keep_the_order_they_had_on_the_card(signoff, ledger):
    assert list(RefundArgs.model_fields) == ["order_id", "amount_usd"]  # not the stored, sorted order
    propose_refund(signoff)
    card = signoff.approval_message()
    assert argument_lines(card) == ['order_id: "42"', "amount_usd: 19.99"]
    signoff.click(card, APPROVE_ACTION, user="U0LEAD")
    decided = signoff.approval_message()
    assert buttons(decided) == [] and argument_lines(decided) == argument_lines(card)


def test_notifications_name_the_decider_as_a_mention(signoff):
    propose_refund(signoff)
    signoff.click(signoff.approval_message(), APPROVE_ACTION, user="U0LEAD")
    assert signoff.approval_message()["text"].startswith("Approved by <@U0LEAD>: issue_refund for run ")


def test_a_run_cancelled_in_slack_names_who_cancelled_it_as_a_mention(signoff, slack):
    propose_refund(signoff)
    run = signoff.only_run()
    signoff.command(f"cancel {run.run_id}")
    header = " ".join(texts(slack.message("C0RUNS", run.origin["ts"])))
    assert "*Stopped: cancelled.* cancelled by <@U0ASKER> with /signoff cancel" in header
    status = signoff.command(f"status {run.run_id}").json()["blocks"][0]["text"]["text"]
    assert "stopped: cancelled by <@U0ASKER> with /signoff cancel" in status


# -- the run header --------------------------------------------------------------------------------------


def test_the_run_header_says_working_from_its_post_then_what_the_run_is_doing(signoff, slack):
    propose_refund(signoff)
    run = signoff.only_run()
    announced = next(c for c in slack.calls_to("chat.postMessage") if "thread_ts" not in c
                     and "Run for" in json.dumps(c["blocks"]))
    # Posted as a worker takes it: working, though its first step is not saved yet.
    assert "*working*" in json.dumps(announced["blocks"]) and "queued" not in json.dumps(announced["blocks"])
    waiting_for_a_worker = messages.run_message(dataclasses.replace(run, status="idle", lease_owner=None))
    assert "*queued*" in json.dumps(waiting_for_a_worker.blocks) and "idle" not in json.dumps(waiting_for_a_worker.blocks)
    working = messages.run_message(dataclasses.replace(run, status="running"))
    assert "*working*" in json.dumps(working.blocks) and "running" not in json.dumps(working.blocks)
    status = signoff.command(f"status {run.run_id}").json()["blocks"][0]["text"]["text"]
    assert "is *awaiting approval*" in status


# -- long tool results --------------------------------------------------------------------------------


class BigLedger(Ledger):
    """The test ledger plus `export_orders`, a read-only tool with a long JSON result."""

    RESULT = {"orders": [{"id": f"A-{n}", "total": n * 1.5, "lines": ["x"] * 3} for n in range(40)],
              "customer": {"name": "Ana", "email": "ana@example.com", "since": 2019, "tier": "gold", "notes": ""},
              "note": "Exported by the night job; " + "every order since 2019 " * 20,
              "token": "xoxb-secret-value", "complete": True, "page": 1, "pages": 1}

    def tools(self) -> dict[str, Tool]:
        export = Tool("export_orders", lambda args, key: self.RESULT, args_model=OrderArgs,
                      description="Every order of a customer.")
        return {**super().tools(), export.name: export}


def test_a_long_json_result_is_summed_up_in_the_thread_with_the_whole_one_click_away(slack, sqlite_url):
    signoff = Signoff(slack, sqlite_url, BigLedger(), {})
    try:
        signoff.script.decisions = [tool_call("export_orders", order_id="42"), final("Exported.")]
        signoff.command("Export Ana's orders")
        run = signoff.only_run()
        [posted] = [m for m in slack.thread("C0RUNS", run.origin["ts"]) if "export_orders" in m["text"]]
        body = posted["blocks"][0]["text"]["text"]
        assert body.startswith(":white_check_mark: `export_orders` (step 1) returned, in short:\n```\n")
        summary = body.split("```\n", 1)[1].rsplit("\n```", 1)[0].split("\n")
        assert summary == [  # keys sorted, as the stored result has them
            "complete: true",
            "customer: {email, name, notes, since, ... 5 keys}",
            f'note: "{BigLedger.RESULT["note"][:60]}..." (487 characters)',
            "orders: 40 items",
            "page: 1",
            "... and 2 more keys",
        ]
        assert len(summary) <= SUMMARY_LINES
        assert "xoxb-secret-value" not in json.dumps(posted)
        assert buttons(posted) == [VIEW_RESULT_ACTION]
        assert find_button(posted, VIEW_RESULT_ACTION)["value"] == f"{run.run_id}:1"

        signoff.click(posted, VIEW_RESULT_ACTION, user="U0LEAD")  # a member of the run's channel
        modal = slack.modal()
        assert view_problems(modal) == [] and modal["title"]["text"] == "export_orders result"
        lines = code_section_lines([b["text"]["text"] for b in modal["blocks"] if b["type"] == "section"])
        assert [line.split(": ")[0] for line in lines] == sorted(BigLedger.RESULT)
        assert lines[1] == 'customer: {"email": "ana@example.com", "name": "Ana", "notes": "", "since": 2019, ' \
                           '"tier": "gold"}'
        assert lines[-1].startswith("token: [redacted: 17 chars, #") and "xoxb-secret" not in json.dumps(modal)
    finally:
        signoff.close()


def test_the_full_result_does_not_open_for_someone_who_may_not_see_the_run(slack, sqlite_url):
    signoff = Signoff(slack, sqlite_url, BigLedger(), {})
    try:
        signoff.script.decisions = [tool_call("export_orders", order_id="42"), final("Exported.")]
        signoff.command("Export Ana's orders")
        run = signoff.only_run()
        [posted] = [m for m in slack.thread("C0RUNS", run.origin["ts"]) if "export_orders" in m["text"]]
        signoff.click(posted, VIEW_RESULT_ACTION, user="U0STRANGER")  # in no channel, no approver
        assert slack.attempts("views.open") == 0
        assert f"There is no run `{run.run_id}` you can see." in signoff.ephemerals()
    finally:
        signoff.close()


def test_a_short_result_is_shown_whole_without_a_button():
    message = messages.tool_result_message(make_run(), {"role": "tool", "step": 1, "tool": "lookup_order",
                                                        "result": {"order_id": "42", "total": 19.99}})
    assert '{"order_id": "42", "total": 19.99}' in message.blocks[0]["text"]["text"]
    assert buttons({"blocks": message.blocks}) == []
