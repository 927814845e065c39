"""Previews on the card, end to end over signed HTTP with a real database: the card shows what the
call will do, its digest is in the approval the buttons carry, a preview that changed before the
call started voids the approval and a fresh card shows both, and a failing preview is said."""

from __future__ import annotations

import json
from dataclasses import replace
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
