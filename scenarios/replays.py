"""Replayed and stale stopped-run buttons against a running `signoff serve`: the same signed click sent
again inside Slack's 5-minute window, and a press on an old copy of a message, change nothing and say
who acted first.

One run covers both kinds of button. Its notes go through a gateway that loses each first attempt, so
each needs a person's Retry (`needs_reconciliation`); then it runs out of steps and needs Extend.
"""

from __future__ import annotations

import time
from typing import Any

from scenarios.drive import (
    APPROVER,
    REQUESTER,
    approval_message,
    messages_with,
    pending_approval,
    started_run,
)
from scenarios.hostile import Probe
from scenarios.outcome import Outcome, observed
from scenarios.serve import Reply, click_body
from scenarios.world import World, wait_until
from signoff.bot.slack.blocks import APPROVE_ACTION, CLOSE_ACTION, EXTEND_ACTION, RECONCILE_RETRY_ACTION

NOTES = [{"tool": "lost_first_note", "args": {"to": name, "text": "Your refund is on its way."}}
         for name in ("ada@example.com", "bob@example.com")]
SCRIPT = [*NOTES, *[{"tool": "lookup", "args": {"query": f"order {n}"}} for n in range(12)], {"final": "Done."}]
STEPS, EXTEND_BY = 3, 2


def run_replayed_buttons(kind: str = "sqlite") -> Outcome:
    outcome = Outcome(f"hostile/replayed-run-buttons/{kind}", "hostile", runs=1)
    env = {"SIGNOFF_MAX_STEPS": str(STEPS), "SIGNOFF_EXTEND_STEPS": str(EXTEND_BY)}
    with observed(outcome, lambda: World(kind, SCRIPT, env=env)) as world:
        serve = world.start()
        probe = Probe(world, serve, outcome)
        run_id = started_run(serve.command("Tell Ada and Bob, then check the orders", REQUESTER).text)
        _approve_lost_note(probe, run_id, 0)
        first = _retry(probe, run_id, 0)
        _approve_lost_note(probe, run_id, 1)
        _replay(probe, first, "replayed reconcile Retry", "already retried")
        outcome.expect(_status(world, run_id) == "needs_reconciliation",
                       "a replayed Retry retried the next call, which nobody had looked at")
        second = _retry(probe, run_id, 1)
        wait_until(lambda: _status(world, run_id) == "budget_exhausted", 20, what="the run running out of steps")
        _replay(probe, second, "replayed reconcile Retry of the second call", "already retried")
        _extends(probe, run_id)
        outcome.expect(len(world.effect_lines()) == 2, f"each note must be sent once: {world.effect_lines()}")
    return outcome


def _approve_lost_note(probe: Probe, run_id: str, index: int) -> None:
    """Approve note `index`; its first attempt is lost, so the run stops for a person."""
    world = probe.world
    approval = wait_until(lambda: pending_approval(world, run_id), 20, what=f"note {index}'s approval")
    message = wait_until(lambda: approval_message(world, approval.approval_id), 10, what="the approval card")
    probe.serve.click(message, APPROVE_ACTION, APPROVER)
    wait_until(lambda: _status(world, run_id) == "needs_reconciliation" and _newest(
        world, RECONCILE_RETRY_ACTION, run_id), 20, what=f"note {index} waiting for reconciliation")


def _retry(probe: Probe, run_id: str, index: int) -> tuple[str, int]:
    """Press Retry once on the lost note `index`; the click's signed body and timestamp, to replay."""
    world = probe.world
    message = _newest(world, RECONCILE_RETRY_ACTION, run_id)
    assert message is not None
    body, stamp = click_body(message, RECONCILE_RETRY_ACTION, APPROVER), int(time.time())
    probe.serve.post(body, timestamp=stamp)
    wait_until(lambda: len(world.effect_lines()) == index + 1, 20, what=f"note {index} sent on Retry")
    return body, stamp


def _replay(probe: Probe, click: tuple[str, int], label: str, phrase: str) -> None:
    body, stamp = click
    for n in range(3):
        probe.send(f"{label} ({n + 1})", lambda: probe.serve.post(body, timestamp=stamp), _acked,
                   "a replayed click is acknowledged and does nothing")
    probe.told(label, APPROVER, phrase)


def _extends(probe: Probe, run_id: str) -> None:
    """Extend once, replay it three times, press Extend and Close on the requester's older copy."""
    world, serve, outcome = probe.world, probe.serve, probe.outcome
    in_thread = wait_until(lambda: _newest(world, EXTEND_ACTION, run_id, channel="C0RUNS"), 10, what="Extend")
    in_dm = wait_until(lambda: _newest(world, EXTEND_ACTION, run_id, dm=True), 10, what="Extend in the DM")
    body, stamp = click_body(in_thread, EXTEND_ACTION, APPROVER), int(time.time())
    serve.post(body, timestamp=stamp)
    limit = STEPS + EXTEND_BY
    wait_until(lambda: _steps(world, run_id) == limit and _status(world, run_id) == "budget_exhausted", 20,
               what="the extended run running out again")
    _replay(probe, (body, stamp), "replayed Extend", "already extended")
    for action, user in ((EXTEND_ACTION, "U0ONCALL1"), (CLOSE_ACTION, REQUESTER)):
        probe.send(f"{action} on an old copy", lambda a=action, u=user: serve.click(in_dm, a, u), _acked,
                   "a press on an old copy of the message does nothing")
        probe.told(f"{action} on an old copy", user, "already extended")
    time.sleep(0.5)
    run = world.db.store.get_run(run_id, history=False)
    outcome.expect(run is not None and run.budget["max_steps"] == limit and run.status == "budget_exhausted",
                   f"one Extend must add {EXTEND_BY} steps once: {run and (run.status, run.budget)}")
    outcome.expect(_steps(world, run_id) == limit, f"the run took {_steps(world, run_id)} steps, not {limit}")
    copy = world.slack.message(in_dm["channel"], in_dm["ts"])
    outcome.expect(not [b for b in copy.get("blocks", []) if b.get("type") == "actions"],
                   "the old copy still shows buttons after a press was refused on it")


def _acked(reply: Reply) -> bool:
    return reply.status == 200


def _newest(world: World, action_id: str, run_id: str, *, channel: str | None = None,
            dm: bool = False) -> dict[str, Any] | None:
    found = [m for m in messages_with(world, action_id, f"{run_id}:")
             if (channel is None or m["channel"] == channel) and (not dm or m["channel"].startswith("D"))]
    return found[-1] if found else None




def _status(world: World, run_id: str) -> str | None:
    run = world.db.store.get_run(run_id, history=False)
    return run.status if run is not None else None


def _steps(world: World, run_id: str) -> int:
    run = world.db.store.get_run(run_id, history=False)
    return int(run.state.get("steps", 0)) if run is not None else 0
