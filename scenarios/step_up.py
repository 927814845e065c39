"""Step-up attacked from Slack: a rule that says `step_up` can be approved only from the web
console with a fresh sign-in, so every Slack path to an approve must be refused, through a running
`signoff serve`, over signed HTTP.

- An old card's bound Approve, posted before the rule said `step_up` and pressed after serve
  restarted with it: the rule now asks more, so the old button no longer approves.
- A forged Approve, a forged Approve all and a forged Approve + allow similar for a call whose card
  offered none of them, each sent twice.

Each is refused and the clicker is told where to approve; nothing runs; a Deny from Slack still
decides (step-up guards approving, not refusing), and both runs end with nothing sent.
"""

from __future__ import annotations

import time
from typing import Any

from scenarios.decisions_attacked import _pending_card, _ran, _told, _value, _world
from scenarios.drive import APPROVER, Driver, has_ended, message_with
from scenarios.outcome import Outcome, observed
from scenarios.serve import buttons
from scenarios.world import Policy, World, wait_until
from signoff.bot.slack.blocks import (
    APPROVE_ACTION,
    APPROVE_ALL_ACTION,
    APPROVE_SIMILAR_ACTION,
    OPEN_PAGE_ACTION,
)
from signoff.runtime.state import TERMINAL

ASKED_BY_LEAD = """\
rules:
  - name: sends
    tool: send_email
    approvers: [U0LEAD]
"""
STEPPED_UP = ASKED_BY_LEAD + "    step_up: 10m\n"
CONSOLE_URL = "https://signoff.example.com"
CONSOLE = {"SIGNOFF_OIDC_ISSUER": "https://issuer.example.com", "SIGNOFF_OIDC_CLIENT_ID": "signoff",
           "SIGNOFF_OIDC_CLIENT_SECRET": "console-secret-for-the-scenario", "SIGNOFF_PUBLIC_URL": CONSOLE_URL}
"""The console on, as step_up needs; its issuer is never reached, since nobody signs in here."""
EMAIL = {"to": "ana@example.com", "subject": "Refund", "body": "Your refund is on its way."}
SCRIPT = [{"tool": "send_email", "args": EMAIL}, {"final": "Ana was told."}]
REFUSED = "needs a sign-in no older than 10 min"


def run_step_up_slack_clicks(kind: str = "sqlite") -> Outcome:
    outcome = Outcome(f"hostile/step-up-slack-clicks/{kind}", "hostile", runs=2, hostile=7)
    policy = Policy(approvers=frozenset({APPROVER}), file=ASKED_BY_LEAD)
    with observed(outcome, lambda: _world(kind, SCRIPT, policy)) as world:
        serve = world.start()
        before = Driver(world, pick=lambda: serve).start("tell Ana")
        old, old_card = _pending_card(world, before)
        outcome.expect(APPROVE_ACTION in dict(buttons(old_card)), "the card posted before step_up offered no Approve")

        serve.stop()
        stepped = world.dir / "stepped-up.yaml"
        stepped.write_text(STEPPED_UP, encoding="utf-8")
        serve = world.start(SIGNOFF_POLICY=str(stepped), **CONSOLE)
        world.policy = Policy(approvers=policy.approvers, file=STEPPED_UP, earlier=(policy,))
        serve.click(old_card, APPROVE_ACTION, APPROVER, value=_value(old_card, APPROVE_ACTION, old))
        outcome.expect(_told(world, APPROVER, REFUSED), "the old card's Approve was not refused for want of a sign-in")

        after = Driver(world, pick=lambda: serve).start("tell Ana again")
        new, card = _step_up_card(world, after)
        offered = dict(buttons(card))
        outcome.expect(not {APPROVE_ACTION, APPROVE_ALL_ACTION, APPROVE_SIMILAR_ACTION} & set(offered),
                       f"the step-up card offered {sorted(offered)}")
        bound = f"{new.approval_id}:{new.digest}"
        for action in (APPROVE_ACTION, APPROVE_ALL_ACTION, APPROVE_SIMILAR_ACTION):
            for _ in range(2):  # the forged click, and the same request replayed
                serve.click(card, action, APPROVER, value=bound)
        outcome.expect(_told(world, APPROVER, f"{CONSOLE_URL}/ui/approvals/{new.approval_id}"),
                       "the refused clicker was not told the approval's page")
        time.sleep(0.5)  # room for a wrongly approved email to start
        outcome.expect(not _ran(world, "send_email"), "an email ran without a fresh sign-in")
        for approval in (old, new):
            still = world.db.store.get_approval(approval.approval_id)
            outcome.expect(still is not None and still.status == "pending",
                           f"{approval.approval_id} is {still and still.status}, not pending")
            serve.deny(approval.approval_id, approval.digest, APPROVER, "not from Slack")
        for run_id in (before, after):
            outcome.expect(_ended(world, run_id), f"{run_id} did not end once its call was denied from Slack")
        outcome.expect(not _ran(world, "send_email"), "a denied email ran")
    return outcome


def _step_up_card(world: World, run_id: str) -> tuple[Any, dict[str, Any]]:
    """The run's pending approval and its card, which links to the approval's page instead of an Approve."""
    def found() -> tuple[Any, dict[str, Any]] | None:
        for approval in world.db.store.list_approvals(run_id=run_id, status="pending", limit=10):
            card = message_with(world, OPEN_PAGE_ACTION, approval.approval_id)
            if card is not None:
                return approval, card
        return None
    card: tuple[Any, dict[str, Any]] = wait_until(found, 20, what=f"{run_id}'s step-up card")
    return card


def _ended(world: World, run_id: str) -> bool:
    try:
        wait_until(lambda: has_ended(world, run_id, TERMINAL), 20, what=f"{run_id} to end")
        return True
    except TimeoutError:
        return False
