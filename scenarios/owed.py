"""What a sweep or a step owes people, when the process that made it dies, or Slack refuses it,
before anyone is told.

The requester of an urgent email breaks the glass through a `signoff serve` armed to die the moment
the break-glass's first follow-up (tell the security channel, post the review card) is stored.
That follow-up is made once, by that replica: before the outbox it was told from memory, so the
security channel never heard the glass was broken. A clean replica started after the death must
tell the channel once, post the review card, and run the approved email once.

Slack refuses every post while a run's slow lookup returns and its email is asked about. A call's
result was told once, from memory, and lost for good in such an outage; once Slack is back the
result must be told in the run's thread once, and the card posted once.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from scenarios.break_glass import POLICY, REASON, SECURITY, TO_CEO, URGENT, _submit
from scenarios.decisions_attacked import _pending_card, _ran, _world
from scenarios.drive import APPROVER, Driver, has_ended, pending_approval
from scenarios.outcome import Outcome, observed
from scenarios.slackfaults import OUTAGE, failed_calls
from scenarios.world import Policy, World, wait_until
from signoff.bot.slack.blocks import BREAK_GLASS_ACTION, GLASS_FLAG_ACTION
from signoff.runtime.records import RunRecord
from signoff.runtime.state import TERMINAL

OTHER_APPROVER = "U0ONCALL1"


def run_glass_told_after_the_sweeper_died(kind: str = "sqlite") -> Outcome:
    outcome = Outcome(f"crash/sweep-dies-before-telling/{kind}", "crash", runs=1)
    policy = Policy(approvers=frozenset({APPROVER, OTHER_APPROVER}), file=POLICY)
    with observed(outcome, lambda: _world(kind, [{"tool": "send_email", "args": TO_CEO}, {"final": "Told."}],
                                          policy)) as world:
        dying = world.start(SIGNOFF_FAILPOINTS="after_sweep=exit")
        dying.watch_for_death()
        run_id = Driver(world, pick=lambda: dying, requester=URGENT).start("tell the CEO now")
        approval, card = _pending_card(world, run_id)
        opened = len(world.slack.modals)
        dying.click(card, BREAK_GLASS_ACTION, URGENT, value=f"{approval.approval_id}:{approval.digest}")
        wait_until(lambda: len(world.slack.modals) > opened, 10, what="the break-glass form")
        with contextlib.suppress(OSError):  # the replica dies answering it, as it was armed to
            _submit(dying, world.slack.modal(), URGENT, REASON)
        outcome.expect(dying.died.wait(20), "the replica should die once the follow-up is stored")
        outcome.faults = 1
        told_before = [c for c in world.slack.calls_to("chat.postMessage") if c.get("channel") == SECURITY]
        outcome.expect(told_before == [], "the dying replica told the security channel before it died")

        world.start()  # a clean replica, as a restart brings up
        try:
            wait_until(lambda: has_ended(world, run_id, TERMINAL), 30, what=f"{run_id} to end")
            wait_until(lambda: _security_told(world), 30, what="the security channel told")
        except TimeoutError as exc:
            outcome.expectations.append(str(exc))
        told = _security_told(world)
        outcome.expect(len(told) == 1 and REASON in json.dumps(told[0]),
                       f"{SECURITY} was told {len(told)} times after the replica that owed it died")
        review = world.db.store.get_approval(approval.approval_id)
        outcome.expect(review is not None and review.glass_message is not None, "no review card was posted")
        cards = [c for c in world.slack.calls_to("chat.postMessage") if GLASS_FLAG_ACTION in json.dumps(c)]
        outcome.expect(len(cards) == 1, f"the review card was posted {len(cards)} times")
        outcome.expect(len(_ran(world, "send_email")) == 1, f"the email ran {len(_ran(world, 'send_email'))} times")
    return outcome


def _security_told(world: World) -> list[dict[str, Any]]:
    return [c for c in world.slack.calls_to("chat.postMessage")
            if c.get("channel") == SECURITY and GLASS_FLAG_ACTION not in json.dumps(c)]


def run_results_told_after_a_post_outage(kind: str = "sqlite") -> Outcome:
    outcome = Outcome(f"slack/step-told-after-a-post-outage/{kind}", "slack", runs=1)
    slow_lookup = {"tool": "lookup", "args": {"query": "order A-1001", "delay_s": 2.0}}
    note = {"tool": "send_note", "args": {"to": "ada@example.com", "text": "Your refund is on its way."}}
    with observed(outcome, lambda: World(kind, [slow_lookup, note, {"final": "Noted."}])) as world:
        serve = world.start()
        driver = Driver(world, pick=lambda: serve)
        run_id = driver.start("look the order up, then tell Ada")
        run = wait_until(lambda: _announced(world, run_id), 20, what="the run message")
        world.slack.fail("chat.postMessage", OUTAGE, status=500)
        approval = wait_until(lambda: pending_approval(world, run_id), 20, what="the approval while Slack is down")
        outcome.expect(approval.message is None, "the card claims a Slack message during the outage")
        outcome.faults = failed_calls(world.slack)
        world.slack.heal("chat.postMessage")
        outcome.expect(driver.settle([run_id], 60), "the run did not finish once Slack was back")
        thread = world.slack.thread(str(run.origin["channel"]), str(run.origin["ts"]))
        results = [m for m in thread if str(m.get("text") or "").startswith("lookup returned a result")]
        outcome.expect(len(results) == 1, f"the lookup's result was told {len(results)} times, not once")
        cards = [c for c in world.slack.calls if c.method == "chat.postMessage" and c.ok
                 and f"{approval.approval_id}:" in json.dumps(c.body)]
        outcome.expect(len(cards) == 1, f"the card was posted {len(cards)} times, not once")
    return outcome


def _announced(world: World, run_id: str) -> RunRecord | None:
    run = world.db.store.get_run(run_id, history=False)
    return run if run is not None and run.origin.get("ts") else None
