"""Previews on the card, end to end over signed HTTP with a real database: the card shows what the
call will do, its digest is in the approval the buttons carry, a preview that changed before the
call started voids the approval and a fresh card shows both, and a failing preview is said."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from bot_fakes import Ledger, final, tool_call

from signoff.bot.slack.blocks import APPROVE_ACTION
from signoff.tools.base import Tool
from tests.fakes.slack import block_kit_problems


class PreviewLedger(Ledger):
    """`issue_refund` with a preview of the order's refundable balance, taken again before it runs."""

    def __init__(self) -> None:
        super().__init__()
        self.refundable = 120.0
        self.failing = False

    def preview(self, args: dict[str, Any], key: str) -> dict[str, Any]:
        if self.failing:
            raise RuntimeError("the payments API is down")
        return {"order_id": args["order_id"], "refundable_now": self.refundable, "refund": args["amount_usd"]}

    def tools(self) -> dict[str, Tool]:
        tools = super().tools()
        tools["issue_refund"] = replace(tools["issue_refund"], preview=self.preview, preview_must_match=True)
        return tools


@pytest.fixture
def ledger() -> PreviewLedger:
    return PreviewLedger()


def refund_run(signoff) -> Any:
    signoff.script.decisions = [tool_call("issue_refund", order_id="42", amount_usd=20.0), final("Refunded.")]
    assert signoff.command("Refund $20 of order 42").status == 200
    return signoff.only_run()


def text_of(message: dict[str, Any]) -> str:
    return json.dumps(message["blocks"], ensure_ascii=False)


def test_the_card_shows_the_preview_and_a_changed_world_voids_the_approval_and_asks_again(signoff, slack, ledger):
    run = refund_run(signoff)
    card = signoff.approval_message()
    assert block_kit_problems(card["blocks"]) == []
    assert "*Preview*: what it will do" in text_of(card) and '\\"refundable_now\\": 120.0' in text_of(card)

    ledger.refundable = 5.0  # another refund landed between the approval and the dispatch
    assert signoff.click(card, APPROVE_ACTION, "U0LEAD").status == 200
    signoff.settle()
    assert ledger.total == 0  # nothing ran on the stale approval
    assert signoff.run(run.run_id).status == "awaiting_approval"
    cards = signoff.approval_messages()
    fresh = cards[-1]
    assert (fresh["channel"], fresh["ts"]) != (card["channel"], card["ts"])
    assert "The world changed since this call was approved" in text_of(fresh)
    assert '\\"refundable_now\\": 5.0' in text_of(fresh) and '\\"refundable_now\\": 120.0' in text_of(fresh)
    stale = slack.message(card["channel"], card["ts"])
    assert APPROVE_ACTION not in text_of(stale)  # the voided card keeps no live button

    assert signoff.click(fresh, APPROVE_ACTION, "U0LEAD").status == 200
    signoff.settle()
    assert signoff.run(run.run_id).status == "done" and dict(ledger.calls) == {f"{run.run_id}:1": 1}


def test_a_preview_that_fails_is_said_on_the_card_and_the_call_can_still_be_approved(signoff, ledger):
    ledger.failing = True
    run = refund_run(signoff)
    card = signoff.approval_message()
    assert ":warning: *No preview*: RuntimeError: the payments API is down" in text_of(card)
    assert signoff.click(card, APPROVE_ACTION, "U0LEAD").status == 200
    signoff.settle()
    assert signoff.run(run.run_id).status == "done" and ledger.total == 1


def test_a_decided_card_keeps_the_preview_and_budget_it_was_approved_on_when_redrawn_later(
        make_signoff, slack, ledger):
    signoff, other_replica = make_signoff(), make_signoff()
    signoff.script.decisions = [tool_call("issue_refund", order_id="42", amount_usd=20.0),
                                tool_call("lookup_order", order_id="42"), final("Refunded.")]
    assert signoff.command("Refund $20 of order 42").status == 200
    run = signoff.only_run()
    card = signoff.approval_message()
    preview = '\\"refundable_now\\": 120.0'
    assert "*Preview*: what it will do" in text_of(card) and preview in text_of(card)
    assert "budget used: steps 1/8" in text_of(card)

    slack.fail("chat.update", times=1000)  # Slack refuses every update as Lee approves: the card's redraw stays owed
    assert signoff.click(card, APPROVE_ACTION, "U0LEAD").status == 200
    signoff.settle()
    moved_on = signoff.run(run.run_id)  # the call ran and the run went on: its pending call cleared, its usage grown
    assert moved_on.status == "done" and moved_on.state["pending"] is None and moved_on.state["steps"] == 3
    store = signoff.runner.store
    approval = store.list_approvals(run_id=run.run_id)[0]
    assert approval.status == "consumed"
    assert APPROVE_ACTION in text_of(slack.message(card["channel"], card["ts"]))  # the card still offers Approve
    slack.heal("chat.update")

    # A replica that never saw it asked (or this one after a restart) sends the redraw owed, once its
    # backoff passed, drawn from what the approval keeps, not from the run as it is now.
    other_replica.clock.advance(minutes=6)
    other_replica.runner.recover(timedelta(0))
    redrawn = text_of(slack.message(card["channel"], card["ts"]))
    assert "*Approved* by <@U0LEAD>" in redrawn and APPROVE_ACTION not in redrawn
    assert "*Preview*: what it will do" in redrawn and preview in redrawn
    assert "budget used: steps 1/8" in redrawn and "steps 3/8" not in redrawn
    drawn = len(card_updates(slack, card))
    signoff.clock.advance(minutes=6)
    signoff.runner.recover(timedelta(0))
    assert len(card_updates(slack, card)) == drawn  # owed no more: drawn once


def card_updates(slack, card: dict) -> list[dict]:
    return [c for c in slack.calls_to("chat.update") if (c.get("channel"), c.get("ts")) == (card["channel"], card["ts"])]


def test_a_turns_card_keeps_each_calls_preview_and_its_budget_when_redrawn_after_the_run_went_on(signoff, slack):
    signoff.script.decisions = [{"calls": [{**tool_call("issue_refund", order_id="42", amount_usd=20.0),
                                            "call_id": "c-20"},
                                           {**tool_call("issue_refund", order_id="43", amount_usd=30.0),
                                            "call_id": "c-30"}]}, final("Refunded both.")]
    assert signoff.command("Refund orders 42 and 43").status == 200
    run = signoff.only_run()
    card = signoff.approval_message()
    asked = text_of(card)
    assert asked.count("*Preview*: what it will do") == 2 and "budget used: steps 1/8" in asked
    slack.fail("chat.update", times=1000)  # the card's redraws stay owed while the run goes on
    for block in [b for b in card["blocks"] if b["type"] == "actions"
                  and b["elements"][0]["action_id"] == APPROVE_ACTION][:2]:
        assert signoff.click({**card, "blocks": [block]}, APPROVE_ACTION, "U0LEAD").status == 200
        signoff.settle()
    assert signoff.run(run.run_id).status == "done" and signoff.run(run.run_id).state["batch"] is None
    assert APPROVE_ACTION in text_of(slack.message(card["channel"], card["ts"]))

    slack.heal("chat.update")
    signoff.clock.advance(minutes=6)
    signoff.runner.recover(timedelta(0))  # recovery sends the redraws the card of the turn is owed
    now = text_of(slack.message(card["channel"], card["ts"]))
    assert now.count("*Approved* by <@U0LEAD>") == 2
    assert now.count("*Preview*: what it will do") == 2 and "budget used: steps 1/8" in now
