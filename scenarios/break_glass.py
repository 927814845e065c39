"""Break-glass attacked through a running `signoff serve`, over signed HTTP.

- A rule that offers none: a forged Break glass click and a forged form naming its call are each
  refused; the call waits for its approvers.
- A rule of two approvers that offers it (for one requester's calls): that requester breaks the glass and the form is sent three
  times (a double submit, a replay): the call runs once and the security channel is told once. On
  the review card, the breaker's own Confirm and a stranger's Flag change nothing; an approver's Flag
  stands, and a replayed Confirm after it changes nothing either.

The invariants read each call that ran against the world's policy: a break-glass counts only where
the rule offers it, by the requester or an approver, with a reason as long as the rule asks.
"""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import urlencode

from scenarios.decisions_attacked import _pending_card, _ran, _told, _world
from scenarios.drive import APPROVER, REQUESTER, Driver, has_ended, message_with
from scenarios.outcome import Outcome, observed
from scenarios.serve import Serve, buttons, next_trigger
from scenarios.world import Policy, World, wait_until
from signoff.bot.slack.blocks import (
    BREAK_GLASS_ACTION,
    BREAK_GLASS_MODAL,
    GLASS_CONFIRM_ACTION,
    GLASS_FLAG_ACTION,
    GLASS_REASON_BLOCK,
    GLASS_REASON_INPUT,
)
from signoff.runtime.state import TERMINAL

OTHER_APPROVER = "U0ONCALL1"
URGENT = "U0INCIDENT"
"""Whose calls the break-glass rule covers; everyone else's wait for the approvers."""
SECURITY = "C0SECURITY"
POLICY = f"""\
rules:
  - name: big-notes
    tool: send_email
    when: "requester == '{URGENT}'"
    approvers: [{APPROVER}, {OTHER_APPROVER}]
    quorum: 2
    break_glass: {{reason_min_chars: 20, review_within: 4h, notify: [{SECURITY}]}}
  - name: notes
    tool: send_email
    approvers: [{APPROVER}, {OTHER_APPROVER}]
"""
REASON = "the CEO asked for this in the incident call, both leads are out"
TO_CEO = {"to": "ceo@example.com", "subject": "Incident", "body": "Payments are back."}


def run_break_glass(kind: str = "sqlite") -> Outcome:
    outcome = Outcome(f"hostile/break-glass/{kind}", "hostile", runs=2, hostile=8)
    policy = Policy(approvers=frozenset({APPROVER, OTHER_APPROVER}), file=POLICY)
    script: list[dict[str, Any]] = [{"tool": "send_email", "args": TO_CEO}, {"final": "Told."}]
    with observed(outcome, lambda: _world(kind, script, policy)) as world:
        serve = world.start()
        plain = Driver(world, pick=lambda: serve).start("tell the CEO")
        approval, card = _pending_card(world, plain)
        outcome.expect(BREAK_GLASS_ACTION not in dict(buttons(card)), "a rule without break_glass offered it")
        bound = f"{approval.approval_id}:{approval.digest}"
        serve.click(card, BREAK_GLASS_ACTION, REQUESTER, value=bound)
        outcome.expect(_told(world, REQUESTER, "offers no break-glass"), "the forged Break glass was not refused")
        _submit(serve, {"type": "modal", "callback_id": BREAK_GLASS_MODAL,
                        "private_metadata": json.dumps({"approval": approval.approval_id, "digest": approval.digest})},
                REQUESTER, REASON)
        time.sleep(0.5)  # room for a wrongly approved email to start
        outcome.expect(not _ran(world, "send_email"), "a forged break-glass ran a call its rule offers none for")
        serve.deny(approval.approval_id, approval.digest, APPROVER, "not now")

        urgent = Driver(world, pick=lambda: serve, requester=URGENT).start("tell the CEO now")
        approval, card = _pending_card(world, urgent)
        opened = len(world.slack.modals)
        serve.click(card, BREAK_GLASS_ACTION, URGENT, value=f"{approval.approval_id}:{approval.digest}")
        wait_until(lambda: len(world.slack.modals) > opened, 10, what="the break-glass form")
        form = world.slack.modal()
        for _ in range(3):
            _submit(serve, form, URGENT, REASON)
        outcome.expect(_ended(world, urgent), f"{urgent} did not end after the glass was broken")
        outcome.expect(len(_ran(world, "send_email")) == 1, f"emails ran {len(_ran(world, 'send_email'))} times")
        told = [c for c in world.slack.calls_to("chat.postMessage") if c.get("channel") == SECURITY]
        outcome.expect(len(told) == 1 and REASON in json.dumps(told[0]), f"{SECURITY} was told {len(told)} times")

        review = wait_until(lambda: message_with(world, GLASS_FLAG_ACTION, approval.approval_id), 10,
                            what="the review card")
        serve.click(review, GLASS_CONFIRM_ACTION, URGENT, value=f"{approval.approval_id}:{approval.digest}")
        serve.click(review, GLASS_FLAG_ACTION, "U0STRANGER", value=f"{approval.approval_id}:{approval.digest}")
        outcome.expect(_review_of(world, approval.approval_id) is None,
                       "the breaker's own Confirm or a stranger's Flag was taken as the review")
        serve.click(review, GLASS_FLAG_ACTION, APPROVER, value=f"{approval.approval_id}:{approval.digest}")
        serve.click(review, GLASS_CONFIRM_ACTION, OTHER_APPROVER, value=f"{approval.approval_id}:{approval.digest}")
        wait_until(lambda: _review_of(world, approval.approval_id), 10, what="the review")
        time.sleep(0.3)
        reviewed = _review_of(world, approval.approval_id) or {}
        outcome.expect(reviewed.get("verdict") == "flagged" and reviewed.get("by") == APPROVER,
                       f"the review is {reviewed}, not U0LEAD's flag")
        reviews = [e for e in world.db.store.timeline(urgent) if e["type"] == "break_glass_reviewed"]
        outcome.expect(len(reviews) == 1, f"{len(reviews)} reviews were recorded")
    return outcome


def _submit(serve: Serve, view: dict[str, Any], user: str, reason: str) -> None:
    payload = {"type": "view_submission", "team": {"id": "T0TEST"}, "user": {"id": user}, "api_app_id": "A0SIGNOFF",
               "token": "legacy", "trigger_id": f"{next_trigger()}.5.trigger", "response_urls": [],
               "view": {**view, "state": {"values": {GLASS_REASON_BLOCK: {GLASS_REASON_INPUT: {
                   "type": "plain_text_input", "value": reason}}}}}}
    serve.post(urlencode({"payload": json.dumps(payload)}))


def _review_of(world: World, approval_id: str) -> dict[str, Any] | None:
    approval = world.db.store.get_approval(approval_id)
    return approval.glass_review if approval is not None else None


def _ended(world: World, run_id: str) -> bool:
    try:
        wait_until(lambda: has_ended(world, run_id, TERMINAL), 20, what=f"{run_id} to end")
        return True
    except TimeoutError:
        return False
