"""A model turn of several calls in Slack, end to end over signed HTTP with a real database: one card
for the turn, each call with its own buttons (a click decides that call alone) and where it stands,
and Approve all for the calls the clicker may approve; decisions in any order, on any replica, and
each call runs once, with its own key.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from bot_fakes import final, tool_call
from slack_harness import Signoff, buttons
from test_decide_better import submit_edit

from signoff.bot.slack.blocks import APPROVE_ACTION, APPROVE_ALL_ACTION, DENY_ACTION, EDIT_ACTION
from tests.fakes.slack import block_kit_problems

TURN = {"calls": [{**tool_call("lookup_order", order_id="42"), "call_id": "c-look"},
                  {**tool_call("issue_refund", order_id="42", amount_usd=20.0), "call_id": "c-20"},
                  {**tool_call("issue_refund", order_id="43", amount_usd=30.0), "call_id": "c-30"}],
        "text": "Reading order 42, and refunding both."}


def batch_run(*replicas: Signoff) -> tuple[Any, dict[str, Any]]:
    for replica in replicas:
        replica.script.decisions = [TURN, final("Refunded both.")]
    assert replicas[0].command("Refund orders 42 and 43").status == 200
    run = replicas[0].only_run()
    cards = replicas[0].approval_messages()
    assert len({(c["channel"], c["ts"]) for c in cards}) == 1, "one card for the turn"
    return run, cards[-1]


def card_text(message: dict[str, Any]) -> str:
    return json.dumps(message["blocks"], ensure_ascii=False)


def call_buttons(message: dict[str, Any], action_id: str) -> list[dict[str, Any]]:
    return [e for b in message["blocks"] if b.get("type") == "actions" for e in b["elements"]
            if e["action_id"] == action_id]


def click_value(signoff: Signoff, message: dict[str, Any], action_id: str, value: str, user: str) -> None:
    """Press the button `action_id` whose value is `value`: one call's, on a card that has several."""
    body = signoff.click_body({**message, "blocks": [{"type": "actions", "elements": [
        {"action_id": action_id, "value": value, "text": {"type": "plain_text", "text": "x"}}]}]}, action_id, user)
    assert signoff.post(body, "application/x-www-form-urlencoded").status == 200


def test_one_card_shows_each_call_with_its_own_buttons_and_a_click_decides_that_call_alone(signoff, slack, ledger):
    run, card = batch_run(signoff)
    assert block_kit_problems(card["blocks"]) == []
    text = card_text(card)
    assert "Approve 2 calls?" in text and f"{run.run_id}:1.2" in text and f"{run.run_id}:1.3" in text
    assert "Reading order 42, and refunding both." in text  # what the model said, once
    approves = call_buttons(card, APPROVE_ACTION)
    pending = sorted(signoff.runner.store.list_approvals(status="pending", run_id=run.run_id), key=lambda a: a.key)
    assert [b["value"] for b in approves] == [f"{a.approval_id}:{a.digest}" for a in pending]
    assert len(call_buttons(card, DENY_ACTION)) == 2 and APPROVE_ALL_ACTION in buttons(card)
    assert call_buttons(card, APPROVE_ALL_ACTION)[0]["confirm"]  # one click deciding several asks first

    click_value(signoff, card, APPROVE_ACTION, approves[1]["value"], "U0LEAD")  # the 30 first
    signoff.settle()
    assert dict(ledger.calls) == {f"{run.run_id}:1.3": 1}
    assert signoff.run(run.run_id).status == "awaiting_approval"  # the model waits for the other
    now = slack.message(card["channel"], card["ts"])
    assert len(call_buttons(now, APPROVE_ACTION)) == 1 and "Approved" in card_text(now)
    assert APPROVE_ALL_ACTION not in buttons(now)  # one call left: its own button does

    click_value(signoff, now, DENY_ACTION, approves[0]["value"], "U0LEAD")  # opens the reason form
    view = slack.calls_to("views.open")[-1]["view"]
    signoff.submit_deny(view, "U0LEAD", "not this one")
    signoff.settle()
    assert signoff.run(run.run_id).status == "done"
    assert dict(ledger.calls) == {f"{run.run_id}:1.3": 1}
    told = [e for e in signoff.run(run.run_id).state["history"] if e["role"] == "tool"]
    assert [(e["call_id"], "result" if "result" in e else e["error_kind"]) for e in told] == [
        ("c-look", "result"), ("c-20", "denied"), ("c-30", "result")]
    assert call_buttons(slack.message(card["channel"], card["ts"]), APPROVE_ACTION) == []


def test_approve_all_decides_each_call_the_clicker_may_approve_and_says_what_became_of_each(
        signoff, slack, ledger):
    run, card = batch_run(signoff)
    assert signoff.click(card, APPROVE_ALL_ACTION, "U0ASKER").status == 200  # the requester: not theirs
    assert ledger.total == 0 and signoff.run(run.run_id).status == "awaiting_approval"
    assert "you started this run" in signoff.ephemerals()[-1]
    assert "• `issue_refund`: Not done" in signoff.ephemerals()[-1]  # each refusal names its call
    assert signoff.click(card, APPROVE_ALL_ACTION, "U0LEAD").status == 200
    signoff.settle()
    assert dict(ledger.calls) == {f"{run.run_id}:1.2": 1, f"{run.run_id}:1.3": 1}
    assert signoff.run(run.run_id).status == "done"
    said = signoff.ephemerals()[-1]
    assert said.count("approved; it runs now") == 2
    again = signoff.click(card, APPROVE_ALL_ACTION, "U0LEAD")  # a replayed click changes nothing
    assert again.status == 200 and sum(ledger.calls.values()) == 2


def test_approve_all_racing_a_deny_on_another_replica_never_runs_a_denied_call(
        make_signoff, database_url, slack, ledger):
    first, second = make_signoff(database_url), make_signoff(database_url)
    run, card = batch_run(first, second)
    deny_value = call_buttons(card, DENY_ACTION)[1]["value"]
    approval_id, digest = deny_value.split(":")
    barrier = threading.Barrier(2)

    def approve_all() -> None:
        barrier.wait()
        first.post(first.click_body(card, APPROVE_ALL_ACTION, "U0LEAD"), "application/x-www-form-urlencoded")

    def deny() -> None:
        barrier.wait()
        second.runner.decide(approval_id, digest, "U0OPS", approved=False, note="no")
        second.runner.execute(run.run_id)

    threads = [threading.Thread(target=approve_all), threading.Thread(target=deny)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    first.settle()
    second.settle()
    for replica in (first, second):
        replica.runner.execute(run.run_id)
    assert first.run(run.run_id).status == "done"
    denied = first.runner.get_approval(approval_id)
    key = f"{run.run_id}:1.3"
    assert ledger.calls[f"{run.run_id}:1.2"] == 1
    assert ledger.calls[key] == (1 if denied.status == "consumed" else 0)  # once if the approval won; never if the deny did
    assert denied.status in ("consumed", "denied")


def test_an_edit_of_one_call_redraws_the_turns_card_and_that_call_runs_as_edited(signoff, slack, ledger):
    run, card = batch_run(signoff)
    edit_30 = call_buttons(card, EDIT_ACTION)[1]["value"]
    click_value(signoff, card, EDIT_ACTION, edit_30, "U0LEAD")
    view = slack.modal()
    assert submit_edit(signoff, view, "U0LEAD", amount_usd="25.0").status == 200
    signoff.settle()
    cards = {(c["channel"], c["ts"]) for c in signoff.approval_messages()}
    assert cards == {(card["channel"], card["ts"])}  # still the one card of the turn
    now = slack.message(card["channel"], card["ts"])
    assert ":pencil2: *Edited* by <@U0LEAD>" in card_text(now) and len(call_buttons(now, APPROVE_ACTION)) == 2
    pending = sorted(signoff.runner.store.list_approvals(status="pending", run_id=run.run_id), key=lambda a: a.key)
    assert [a.args["amount_usd"] for a in pending] == [20.0, 25.0]
    assert signoff.click(now, APPROVE_ALL_ACTION, "U0LEAD").status == 200
    signoff.settle()
    assert dict(ledger.calls) == {f"{run.run_id}:1.2": 1, f"{run.run_id}:1.3": 1}
    assert sorted(a["amount_usd"] for a in ledger.args) == [20.0, 25.0]
