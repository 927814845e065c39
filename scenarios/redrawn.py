"""A card brought in line by the replica that never saw it decided. U0LEAD presses Approve + allow
similar on one replica while Slack refuses every `chat.update`; that replica gives up on the card,
and dies. Slack comes back, and the other replica's recovery, which knows of the decision only what
the database holds, redraws the card: the approve, the grant it made ("allowing similar calls for
30 min") and the decision's signed receipt, with no button left. The call ran once.

What a card shows besides its approval is read by the runner from the database and handed to the
notifier, which reads nothing (`runtime.cards`): the same card whichever replica draws it.
"""

from __future__ import annotations

import json
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from scenarios.drive import APPROVER, Driver, approval_message, has_ended, pending_approval
from scenarios.outcome import Outcome, observed
from scenarios.serve import buttons
from scenarios.slackfaults import OUTAGE, failed_calls, slack_is_back
from scenarios.world import Policy, World, wait_until
from signoff.bot.slack.blocks import APPROVE_SIMILAR_ACTION
from signoff.receipts import fingerprint, private_key_pem

NOTE = {"tool": "send_note", "args": {"to": "ada@example.com", "text": "Your refund is on its way."}}
SCRIPT: list[dict[str, Any]] = [NOTE, {"final": "Ada was told."}]
NOTES_BY_LEAD = f"""\
rules:
  - name: notes
    tool: send_note
    approvers: [{APPROVER}]
    grant: {{for: 30m, same: [to], scope: requester}}
"""
GAVE_UP_AFTER = 4
"""`chat.update` attempts the notifier makes before it gives up (its default)."""


def run_card_redrawn(kind: str = "sqlite") -> Outcome:
    outcome = Outcome(f"slack/card-redrawn-by-the-other-replica/{kind}", "slack", runs=1)
    policy = Policy(approvers=frozenset({APPROVER}), file=NOTES_BY_LEAD)
    with observed(outcome, lambda: World(kind, SCRIPT, policy=policy)) as world:
        (world.dir / "signing.pem").write_bytes(private_key_pem(Ed25519PrivateKey.generate()))
        world.env["SIGNOFF_SIGNING_KEY"] = str(world.dir / "signing.pem")
        clicked, other = world.start(), world.start()
        run_id = Driver(world, pick=lambda: clicked).start("note Ada that her refund is on its way")
        approval = wait_until(lambda: pending_approval(world, run_id), 20, what="the approval")
        card = wait_until(lambda: approval_message(world, approval.approval_id), 20, what="the approval's card")
        world.slack.fail("chat.update", OUTAGE, status=500)
        clicked.click(card, APPROVE_SIMILAR_ACTION, APPROVER)
        wait_until(lambda: has_ended(world, run_id), 30, what=f"{run_id} to end")
        wait_until(lambda: _updates_of(world, card["ts"]) >= GAVE_UP_AFTER, 20,
                   what="the clicked replica giving up on the card")
        clicked.stop()
        outcome.faults = failed_calls(world.slack) + 1  # Slack's refusals, and the replica gone
        slack_is_back(world.slack, "chat.update")
        shown = wait_until(lambda: _decided(world, card), 30, what="the other replica redrawing the card")
        receipt = world.db.store.receipt_of(approval_id=approval.approval_id)
        outcome.expect(receipt is not None, "the decision should have its receipt")
        drawn = json.dumps(shown.get("blocks"), ensure_ascii=False)
        outcome.expect(shown["text"].startswith(f"Approved by <@{APPROVER}>, allowing similar calls for 30 min"),
                       f"the redrawn card should show the grant its approve made: {shown['text']!r}")
        outcome.expect(receipt is None or f"receipt {fingerprint(receipt)}" in drawn,
                       "the redrawn card should show the decision's receipt")
        sent = [line for line in world.effect_lines() if line.get("tool") == "send_note"]
        outcome.expect(len(sent) == 1, f"the note should be sent once: {sent}")
        outcome.notes.append(f"card updates tried: {_updates_of(world, card['ts'])}; the other replica is up: "
                             f"{other.alive()}")
    return outcome


def _updates_of(world: World, ts: str) -> int:
    with world.slack._lock:
        return sum(1 for c in world.slack.calls if c.method == "chat.update" and c.body.get("ts") == ts)


def _decided(world: World, card: dict[str, Any]) -> dict[str, Any] | None:
    """The card as Slack shows it, once its buttons are gone."""
    shown = world.slack.message(card["channel"], card["ts"])
    return shown if not buttons(shown) else None
