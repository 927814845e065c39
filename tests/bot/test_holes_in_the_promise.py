"""Holes found by attacking the approval features from outside, each closed where its rule lives,
and each shown here end to end over signed HTTP with a real database: a secret pressed through
Edit, an edit that would repeat a call that ran, a grant outliving the rule that made it, a signed
Approve all naming a call its card offered no Approve for, one number written two ways, and a rule
that a default would have widened.
"""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import parse_qsl, urlencode

import pytest
from bot_fakes import Ledger, final, tool_call
from pydantic import BaseModel
from slack_harness import Signoff, buttons

from signoff.bot.slack.blocks import APPROVE_ACTION, APPROVE_ALL_ACTION, APPROVE_SIMILAR_ACTION, EDIT_ACTION
from signoff.bot.slack.edit_form import EDIT_INPUT
from signoff.runtime.records import RunRecord
from signoff.tools.base import Tool

FORM = "application/x-www-form-urlencoded"
SECRET = "sk-live-Zq9secret7TOKEN"
OLD_IBAN, NEW_IBAN = "DE89370400440532013000", "GB29NWBK60161331926819"


class WireArgs(BaseModel):
    iban: str
    amount_usd: float


class EmailArgs(BaseModel):
    to: str
    body: str


class RefundArgs(BaseModel):
    order_id: str
    amount_usd: float | None = None
    """None: the whole order."""


class HoleLedger(Ledger):
    """Side effects of every shape the holes needed: a free-form call, a typed one with its own
    secret, an email, and a refund whose amount may be left out."""

    def record(self, args: dict[str, Any], key: str) -> dict[str, Any]:
        with self._lock:
            self.calls[key] += 1
            self.args.append(args)
        return {"done": True}

    def tools(self) -> dict[str, Tool]:
        made = [Tool("deploy", self.record, side_effect=True, description="Deploy anything (free-form arguments)."),
                Tool("wire", self.record, side_effect=True, args_model=WireArgs, redact=("iban",),
                     description="Wire money."),
                Tool("send_email", self.record, side_effect=True, args_model=EmailArgs, description="Send one email."),
                Tool("refund_order", self.record, side_effect=True, args_model=RefundArgs,
                     description="Refund part of an order, or all of it.")]
        return {**super().tools(), **{tool.name: tool for tool in made}}


@pytest.fixture
def ledger() -> HoleLedger:
    return HoleLedger()


def policy_env(tmp_path, text: str, name: str = "policy.yaml") -> dict[str, str]:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return {"SIGNOFF_POLICY": str(path)}


def start(signoff: Signoff, *decisions: dict[str, Any], goal: str = "Do it") -> RunRecord:
    """A run of U0ASKER's on `signoff` whose model says `decisions`; a fresh trigger id each time, so
    a second replica's run is not taken for a replay of the first's."""
    signoff.script.decisions = list(decisions)
    before = {r.run_id for r in signoff.runner.store.list_runs(limit=50)}
    body = dict(parse_qsl(signoff.command_body(goal)))
    body["trigger_id"] = f"{time.monotonic_ns()}.1.trigger"
    assert signoff.post(urlencode(body), FORM).status == 200
    [run] = [r for r in signoff.runner.store.list_runs(limit=50) if r.run_id not in before]
    return signoff.run(run.run_id)


def inputs(view: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {block["label"]["text"]: block for block in view["blocks"] if block["type"] == "input"}


def submit_edit(signoff: Signoff, view: dict[str, Any], user: str, **typed: str) -> Any:
    """Submit the edit modal as Slack would: each input as it was filled in, but for `typed`."""
    values = {block["block_id"]: {EDIT_INPUT: {"type": block["element"]["type"],
                                               "value": typed.get(label, block["element"].get("initial_value"))}}
              for label, block in inputs(view).items()}
    payload = {"type": "view_submission", "team": {"id": "T0TEST"}, "user": {"id": user}, "api_app_id": "A0SIGNOFF",
               "token": "legacy", "trigger_id": f"{time.monotonic_ns()}.4.trigger", "response_urls": [],
               "view": {**view, "state": {"values": values}}}
    return signoff.post(urlencode({"payload": json.dumps(payload)}), FORM)


def everything_kept(signoff: Signoff, run_id: str, slack: Any) -> str:
    """All a reader of the run could see: its events, its state, every Slack call made."""
    run = signoff.run(run_id)
    return json.dumps([signoff.runner.timeline(run_id), run.state, [c for m in ("chat.postMessage", "chat.update")
                                                                     for c in slack.calls_to(m)]])


def click_value(signoff: Signoff, message: dict[str, Any], action_id: str, value: str, user: str) -> None:
    """A signed click on `action_id` carrying `value`, whatever the message offered."""
    body = signoff.click_body({**message, "blocks": [{"type": "actions", "elements": [
        {"action_id": action_id, "value": value, "text": {"type": "plain_text", "text": "x"}}]}]}, action_id, user)
    assert signoff.post(body, FORM).status == 200


# -- a secret pressed through Edit --------------------------------------------------------------------


def test_a_free_form_calls_secret_is_not_in_its_edit_form_and_is_kept_unless_retyped(make_signoff, slack, ledger):
    signoff = make_signoff()
    run = start(signoff, tool_call("deploy", op="deploy", api_key=SECRET), final("Deployed."))
    signoff.click(signoff.approval_message(), EDIT_ACTION, user="U0LEAD")
    view = slack.modal()
    assert SECRET not in json.dumps(view)
    [box] = inputs(view).values()
    shown = json.loads(box["element"]["initial_value"])
    assert shown["op"] == "deploy" and shown["api_key"].startswith("[redacted: ")
    assert "fingerprint" in box["hint"]["text"]

    edited = dict(shown, op="rollback")
    assert submit_edit(signoff, view, "U0LEAD", **{"Arguments (JSON)": json.dumps(edited)}).status == 200
    fresh = signoff.approval_message()
    signoff.click(fresh, APPROVE_ACTION, user="U0OPS")
    assert ledger.args == [{"op": "rollback", "api_key": SECRET}]  # the secret ran as it was, never shown
    assert signoff.run(run.run_id).status == "done"
    kept = json.dumps([signoff.runner.timeline(run.run_id), [c for m in ("chat.postMessage", "chat.update")
                                                              for c in slack.calls_to(m)]])
    assert SECRET not in kept


def test_an_edited_secret_is_shown_told_and_audited_by_its_fingerprints_only(make_signoff, slack, ledger):
    signoff = make_signoff()
    run = start(signoff, tool_call("wire", iban=OLD_IBAN, amount_usd=10.0), final("Wired."))
    signoff.click(signoff.approval_message(), EDIT_ACTION, user="U0LEAD")
    view = slack.modal()
    assert OLD_IBAN not in json.dumps(view)
    assert submit_edit(signoff, view, "U0LEAD", iban=NEW_IBAN).status == 200

    fresh = signoff.approval_message()
    card = json.dumps(fresh["blocks"])
    assert "iban: changed [redacted: 22 chars, #" in card
    signoff.click(fresh, APPROVE_ACTION, user="U0OPS")
    assert ledger.args == [{"iban": NEW_IBAN, "amount_usd": 10.0}]
    [edited] = [e for e in signoff.runner.timeline(run.run_id) if e["type"] == "call_edited"]
    [recorded] = [e for e in signoff.runner.timeline(run.run_id) if e["type"] == "command_recorded"]
    assert edited["changes"][0].startswith("iban: changed [redacted: 22 chars, #")
    assert recorded["args"]["iban"] == "[redacted]" and recorded["args"]["amount_usd"] == 10.0
    [told] = [e for e in signoff.run(run.run_id).state["history"] if e["role"] == "tool"]
    assert "iban: changed [redacted" in told["edited"]
    # Where a secret may live in the clear: the arguments that run (the state's own record of the call).
    everywhere = json.dumps([signoff.runner.timeline(run.run_id), told,
                             [c for m in ("chat.postMessage", "chat.update", "views.open") for c in slack.calls_to(m)]])
    assert OLD_IBAN not in everywhere and NEW_IBAN not in everywhere


# -- an edit that would repeat a call that ran ---------------------------------------------------------

TWO_EMAILS = {"calls": [{**tool_call("send_email", to="ana@example.com", body="refund"), "call_id": "c-ana"},
                        {**tool_call("send_email", to="bob@example.com", body="refund"), "call_id": "c-bob"}]}


def test_an_edit_that_would_repeat_a_side_effect_the_run_settled_is_refused_in_the_form(make_signoff, slack, ledger):
    signoff = make_signoff()
    run = start(signoff, TWO_EMAILS, final("Both told."))
    card = signoff.approval_message()
    ana, bob = (find_value(card, APPROVE_ACTION, n) for n in (0, 1))
    click_value(signoff, card, APPROVE_ACTION, ana, "U0LEAD")
    assert dict(ledger.calls) == {f"{run.run_id}:1.1": 1}

    card = signoff.approval_message()
    click_value(signoff, card, EDIT_ACTION, find_value(card, EDIT_ACTION, 0), "U0LEAD")
    view = slack.modal()
    refused = submit_edit(signoff, view, "U0LEAD", to="ana@example.com").json()
    assert refused["response_action"] == "errors"
    [error] = refused["errors"].values()
    assert "would repeat" in error and f"{run.run_id}:1.1" in error

    click_value(signoff, signoff.approval_message(), APPROVE_ACTION, bob, "U0OPS")
    assert dict(ledger.calls) == {f"{run.run_id}:1.1": 1, f"{run.run_id}:1.2": 1}
    assert [a["to"] for a in ledger.args] == ["ana@example.com", "bob@example.com"]


def test_an_edit_that_would_repeat_another_call_of_its_turn_is_refused_too(make_signoff, slack, ledger):
    signoff = make_signoff()
    start(signoff, TWO_EMAILS, final("Both told."))
    card = signoff.approval_message()
    click_value(signoff, card, EDIT_ACTION, find_value(card, EDIT_ACTION, 1), "U0LEAD")
    refused = submit_edit(signoff, slack.modal(), "U0LEAD", to="ana@example.com").json()
    assert refused["response_action"] == "errors" and "already proposed in this turn" in json.dumps(refused)


def find_value(card: dict[str, Any], action_id: str, index: int) -> str:
    found = [e["value"] for b in card["blocks"] if b.get("type") == "actions" for e in b["elements"]
             if e["action_id"] == action_id]
    return found[index]


# -- a grant outliving the rule that made it -----------------------------------------------------------

GRANT_BY_LEAD = """\
rules:
  - name: sends
    tool: send_email
    approvers: [U0LEAD]
    grant: {for: 30m, same: [to], scope: requester}
"""
GRANT_BY_OPS = GRANT_BY_LEAD.replace("[U0LEAD]", "[U0OPS]")
GRANT_NARROWED = GRANT_BY_LEAD.replace("same: [to], scope: requester", "same: [to, body], scope: run")
GRANT_SHORTER = GRANT_BY_LEAD.replace("for: 30m", "for: 10m")


@pytest.mark.parametrize(("changed", "why"), [
    (GRANT_BY_OPS, "U0LEAD may no longer approve this call"),
    (GRANT_NARROWED, "now holds body to the approved value"),
    (GRANT_SHORTER, "now grants for 10 min at most"),
])
def test_a_grant_is_used_only_while_the_rule_in_force_would_still_make_it(make_signoff, tmp_path, database_url,
                                                                          slack, ledger, changed, why):
    first = make_signoff(database_url, **policy_env(tmp_path, GRANT_BY_LEAD))
    run = start(first, tool_call("send_email", to="ana@example.com", body="one"), final("Sent."))
    first.click(first.approval_message(), APPROVE_SIMILAR_ACTION, user="U0LEAD")
    assert dict(ledger.calls) == {f"{run.run_id}:1": 1}
    covered = start(first, tool_call("send_email", to="ana@example.com", body="two"), final("Sent."))
    assert covered.status == "done" and ledger.calls[f"{covered.run_id}:1"] == 1  # the grant in use

    restarted = make_signoff(database_url, **policy_env(tmp_path, changed, "changed.yaml"))  # the policy changed
    later = start(restarted, tool_call("send_email", to="ana@example.com", body="three"), final("Sent."))
    assert later.status == "awaiting_approval" and f"{later.run_id}:1" not in ledger.calls
    [not_applied] = [e for e in restarted.runner.timeline(later.run_id) if e["type"] == "grant_not_applied"]
    assert why in not_applied["reason"] and not_applied["rule"] == "sends"
    assert [e for e in restarted.runner.timeline(later.run_id) if e["type"] == "call_allowed_by_grant"] == []


# -- Approve all naming a call its card offered no Approve for ----------------------------------------


def test_a_signed_approve_all_approves_only_what_the_card_offered_approve_for(make_signoff, slack, ledger):
    signoff = make_signoff()
    long_body = "word " * 2000  # too long to show in full on a card of several calls
    run = start(signoff, {"calls": [{**tool_call("send_email", to="ana@example.com", body="short"), "call_id": "a"},
                                    {**tool_call("send_email", to="bob@example.com", body=long_body), "call_id": "b"}]},
                final("Sent."))
    card = signoff.approval_message()
    assert APPROVE_ALL_ACTION not in buttons(card)  # one call fits beside Approve: nothing to approve all of
    approvals = sorted(signoff.runner.store.list_approvals(run_id=run.run_id, limit=5), key=lambda a: a.key)
    forged = ",".join(f"{a.approval_id}:{a.digest}" for a in approvals)
    click_value(signoff, card, APPROVE_ALL_ACTION, forged, "U0LEAD")
    assert dict(ledger.calls) == {f"{run.run_id}:1.1": 1}
    assert any("too long to show in full" in text for text in signoff.ephemerals("U0LEAD"))
    assert signoff.runner.get_approval(approvals[1].approval_id).status == "pending"


# -- one number written two ways ------------------------------------------------------------------------


def test_one_and_one_point_oh_in_one_turn_are_one_call_asked_about_once(make_signoff, slack, ledger):
    signoff = make_signoff()
    run = start(signoff, {"calls": [{**tool_call("deploy", n=1), "call_id": "a"},
                                    {**tool_call("deploy", n=1.0), "call_id": "b"}]}, final("Deployed."))
    approvals = signoff.runner.store.list_approvals(run_id=run.run_id, limit=5)
    assert [a.key for a in approvals] == [f"{run.run_id}:1.1"]
    second = signoff.run(run.run_id).state["batch"]["calls"][1]  # told to the model once the turn is settled
    assert "already proposed in this reply" in second["outcome"]["error"]


# -- a rule a default would have widened -----------------------------------------------------------------

WHOLE_ORDERS_ASK_THE_CFO = """\
rules:
  - name: whole-orders
    tool: refund_order
    when: "!has(args.amount_usd)"
    approvers: [U0CFO]
  - name: small-refunds
    tool: refund_order
    when: "double(args.amount_usd) <= 50.0"
    decision: allow
"""


def test_the_rules_see_what_the_model_sent_not_the_tools_defaults(make_signoff, tmp_path, slack, ledger):
    signoff = make_signoff(**policy_env(tmp_path, WHOLE_ORDERS_ASK_THE_CFO))
    small = start(signoff, tool_call("refund_order", order_id="A-1", amount_usd=20.0), final("Done."))
    assert small.status == "done" and ledger.calls[f"{small.run_id}:1"] == 1
    whole = start(signoff, tool_call("refund_order", order_id="A-2"), final("Done."))
    assert whole.status == "awaiting_approval" and f"{whole.run_id}:1" not in ledger.calls
    approval = signoff.runner.pending_approval(whole.run_id)
    assert approval is not None and approval.asked is not None
    assert approval.asked["rule"] == "whole-orders" and approval.asked["approvers"] == ["U0CFO"]
    assert approval.args == {"order_id": "A-2", "amount_usd": None}  # what runs, and what the card shows
    signoff.click(signoff.approval_message(), APPROVE_ACTION, user="U0OPS")  # not the rule's approver
    assert f"{whole.run_id}:1" not in ledger.calls
    signoff.click(signoff.approval_message(), APPROVE_ACTION, user="U0CFO")  # the click sees what the rule saw
    assert ledger.calls[f"{whole.run_id}:1"] == 1
