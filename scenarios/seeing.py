"""What you see is what runs, against a real `signoff serve`: a scripted model proposes an email
whose long body pushes a second `to:` out of sight and whose values carry injected newlines,
direction overrides, zero-width characters and backticks, then a short one that fits the card.

On every surface Slack was sent that offers Approve (cards, App Home, the full-arguments modal),
every argument must be there exactly as it is stored and as it then runs; a shortened form must
never offer Approve; and each effect must be the call that was shown.
"""

from __future__ import annotations

from typing import Any

from scenarios.drive import APPROVER, Driver, message_with, pending_approval
from scenarios.outcome import Outcome, observed
from scenarios.serve import Serve, buttons, home_click_body, home_opened_body
from scenarios.toolset import TOOLS
from scenarios.world import Policy, World, wait_until
from signoff.bot.arguments import ToolDisplay, argument_lines, read_literal
from signoff.bot.slack.blocks import APPROVE_ACTION, DENY_ACTION, VIEW_ARGS_ACTION, code_section_lines
from signoff.runtime.state import call_digest

HIDDEN = {
    "to": "attacker@evil.example",
    "subject": "Your refund\nto: ana@example.com\u202e" + "\n" * 20,
    "body": "Hi Ana,\n" + "your refund is on its way. " * 400 + "\nto: ana@example.com\u200b ```x``` <!here> &amp;",
}
"""Too long for a card: only the modal may offer Approve for it."""
VISIBLE = {"to": "ana@example.com\u200b", "subject": "Refund \u202e00.001$\u202c", "body": "100 `x` \ufeff"}
"""Fits the card, which shows it exactly, invisible characters as escapes."""
SCRIPT = [{"tool": "send_email", "args": HIDDEN}, {"tool": "send_email", "args": VISIBLE},
          {"final": "Both emails were sent."}]
_VIEW_METHODS = ("views.publish", "views.open", "views.update")
_DISPLAYS = {t.name: ToolDisplay.of(t) for t in TOOLS}


def run_what_you_see(kind: str = "sqlite") -> Outcome:
    outcome = Outcome(f"hostile/what-you-see/{kind}", "hostile", runs=1, hostile=5)
    with observed(outcome, lambda: World(kind, SCRIPT, policy=Policy(approvers=frozenset({APPROVER})))) as world:
        serve = world.start()
        driver = Driver(world, pick=lambda: serve)
        run_id = driver.start("email Ana about her refund")
        first = wait_until(lambda: pending_approval(world, run_id), 20, what="the long email's approval")
        card = wait_until(lambda: message_with(world, DENY_ACTION, first.approval_id + ":"), 20, what="its card")
        outcome.expect(APPROVE_ACTION not in [a for a, _ in buttons(card)],
                       "the card offered Approve beside arguments it could not show in full")
        serve.post(home_opened_body(APPROVER), "application/json")
        home = wait_until(lambda: world.slack.views.get(APPROVER), 10, what="App Home")
        outcome.expect(VIEW_ARGS_ACTION in [a for a, _ in buttons(home)], "App Home offers no View full arguments")
        _approve_in_modal(world, serve, card, outcome)
        wait_until(lambda: _ran(world, first.key), 20, what="the long email being sent")
        second = wait_until(lambda: pending_approval(world, run_id), 20, what="the short email's approval")
        serve.post(home_opened_body(APPROVER), "application/json")  # Home offers Approve for this one
        wait_until(lambda: second.approval_id in str(world.slack.views.get(APPROVER)), 10, what="App Home again")
        outcome.expect(driver.settle([run_id], 30), "the run did not finish")
        _check_every_approve_surface(world, outcome)
        _check_what_ran(world, outcome)
    return outcome


def _approve_in_modal(world: World, serve: Serve, card: dict[str, Any], outcome: Outcome) -> None:
    serve.click(card, VIEW_ARGS_ACTION, APPROVER)
    modal = wait_until(lambda: world.slack.modals and world.slack.modal(), 10, what="the full-arguments modal")
    values = [v for a, v in buttons(modal) if a == APPROVE_ACTION]
    if not outcome.expect(values, "the full-arguments modal offers no Approve"):
        return
    serve.post(home_click_body(modal, APPROVE_ACTION, values[0], APPROVER, view_id=modal["id"]))
    wait_until(lambda: "Approved" in str(world.slack.modal(modal["id"])["blocks"]), 10,
               what="the modal showing the outcome")


def _check_every_approve_surface(world: World, outcome: Outcome) -> None:
    """Each card, Home tab and modal Slack was ever sent with Approve shows that call's arguments whole."""
    offers = 0
    with world.slack._lock:
        calls = list(world.slack.calls)
    for call in calls:
        if not call.ok or not (call.method.startswith("chat.") or call.method in _VIEW_METHODS):
            continue
        surface = call.body.get("view") if call.method in _VIEW_METHODS else call.body
        shown = code_section_lines([b["text"]["text"] for b in (surface or {}).get("blocks", [])
                                    if b.get("type") == "section"])
        for action_id, value in buttons(surface or {}):
            if action_id != APPROVE_ACTION:
                continue
            offers += 1
            approval = world.db.store.get_approval(value.rpartition(":")[0])
            expected = argument_lines(approval.args, _DISPLAYS[approval.tool])
            outcome.expect(_contains(shown, expected), f"{call.method} offered Approve for {approval.approval_id} "
                                                       "without showing every argument exactly")
            outcome.expect({line.split(": ", 1)[0]: read_literal(line.split(": ", 1)[1]) for line in expected}
                           == approval.args, f"{approval.approval_id}: its lines do not read back as its arguments")
    outcome.expect(offers >= 3, f"only {offers} surfaces offered Approve; the scenario checked too little")
    outcome.notes.append(f"{offers} surfaces offered Approve, each with every argument in full")


def _check_what_ran(world: World, outcome: Outcome) -> None:
    """Each email sent is exactly a call the model proposed, with the arguments approvers were shown."""
    sent = [[name for name, args in (("the long one", HIDDEN), ("the short one", VISIBLE))
             if line["digest"] == call_digest("send_email", args, line["key"])] for line in world.effect_lines()]
    outcome.expect(sorted(sent) == [["the long one"], ["the short one"]],
                   f"the emails sent were not exactly the two proposed, once each: {sent}")


def _contains(lines: list[str], part: list[str]) -> bool:
    return any(lines[i:i + len(part)] == part for i in range(len(lines) - len(part) + 1))




def _ran(world: World, key: str) -> bool:
    return any(line["key"] == key for line in world.effect_lines())

