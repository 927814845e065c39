"""A model turn of several calls, across two replicas on one database: a read and two notes in one
reply, so each run's card holds two calls, each with its own buttons, and Approve all.

Each turn is decided as people race one: Approve all on one replica against a Deny of the second
note on the other; the second note approved first, its signed click delivered to both replicas and
replayed, then the first; and Approve all delivered twice at once. Each note must run once at most,
with its own key, only after its own approval, never after a deny; and the model must hear all
three outcomes, in the order it asked, once both notes are settled.
"""

from __future__ import annotations

import random
import time
from typing import Any

from scenarios.drive import APPROVER, REQUESTER, has_ended, started_run
from scenarios.outcome import Outcome, observed
from scenarios.replicas import at_once, race_each_run
from scenarios.serve import Serve, click_body
from scenarios.world import World, wait_until
from signoff.bot.slack.blocks import APPROVE_ACTION, APPROVE_ALL_ACTION
from signoff.runtime.schema import TERMINAL

TURN: dict[str, Any] = {
    "calls": [{"tool": "lookup", "args": {"query": "order A-4004"}, "call_id": "b-look"},
              {"tool": "send_note", "args": {"to": "ivy@example.com", "text": "Your refund is approved."},
               "call_id": "b-ivy"},
              {"tool": "send_note", "args": {"to": "jon@example.com", "text": "Yours is approved too."},
               "call_id": "b-jon"}],
    "text": "Reading the order, and telling both.",
}
SCRIPT: list[dict[str, Any]] = [TURN, {"final": "Both were told."}]
RACES = ("approve_all_vs_deny", "second_first_replayed", "approve_all_twice", "approve_all_vs_deny")
OTHER_APPROVER = "U0ONCALL1"
"""An approver beside U0LEAD: a member of the runs channel, so allowed by the built-in policy."""


def run_batches(kind: str = "sqlite", runs: int = 6, seed: int = 23) -> Outcome:
    outcome = Outcome(f"batch/approve-all-races/2x/{kind}", "batch", runs=runs)
    with observed(outcome, lambda: World(kind, SCRIPT)) as world:
        race_each_run(world, outcome, RACES, runs, seed,
                      lambda serves, rng, index, race: f"{race}: {_drive(world, serves, rng, outcome, index, race)}")
    return outcome


def _drive(world: World, serves: list[Serve], rng: random.Random, outcome: Outcome, index: int, race: str) -> str:
    a, b = rng.sample(serves, 2)
    run_id = started_run(a.command(f"batch {index}: tell Ivy and Jon", REQUESTER).text)
    label = f"{run_id} ({race})"
    wait_until(lambda: len(_pending(world, run_id)) == 2 and all(a.message for a in _pending(world, run_id)), 20,
               what=f"{run_id}'s card")
    ivy, jon = _pending(world, run_id)
    card = world.slack.message(ivy.message["channel"], ivy.message["ts"])
    outcome.expect(jon.message == ivy.message, f"{label}: the two calls are not on one card")
    approve_all = click_body(card, APPROVE_ALL_ACTION, APPROVER)
    match race:
        case "approve_all_vs_deny":
            at_once(lambda: a.post(approve_all), lambda: b.deny(jon.approval_id, jon.digest, OTHER_APPROVER, "no"),
                    delays=(rng.uniform(0, 0.05), rng.uniform(0, 0.05)))
        case "second_first_replayed":
            body, stamp = click_body(card, APPROVE_ACTION, APPROVER, value=f"{jon.approval_id}:{jon.digest}"), \
                int(time.time())
            at_once(lambda: a.post(body, timestamp=stamp), lambda: b.post(body, timestamp=stamp))
            a.post(body, timestamp=stamp)
            outcome.hostile += 2
            wait_until(lambda: _notes(world, jon.key) == 1, 20, what=f"{jon.key} to run")
            outcome.expect(_notes(world, ivy.key) == 0, f"{label}: Ivy's note ran on Jon's approval")
            b.post(click_body(card, APPROVE_ACTION, APPROVER, value=f"{ivy.approval_id}:{ivy.digest}"))
        case _:
            stamp = int(time.time())
            at_once(lambda: a.post(approve_all, timestamp=stamp), lambda: b.post(approve_all, timestamp=stamp))
            outcome.hostile += 1
    wait_until(lambda: has_ended(world, run_id, TERMINAL), 30, interval=0.05, what=f"{run_id} to end")
    return _settled(world, outcome, label, run_id, ivy, jon)


def _pending(world: World, run_id: str) -> list[Any]:
    return sorted(world.db.store.list_approvals(status="pending", run_id=run_id, limit=10), key=lambda a: a.key)


def _notes(world: World, key: str) -> int:
    return sum(1 for line in world.effect_lines() if line.get("tool") == "send_note" and line.get("key") == key)


def _settled(world: World, outcome: Outcome, label: str, run_id: str, ivy: Any, jon: Any) -> str:
    """Done; each note ran once if its approval was used, never otherwise; the model heard all three."""
    store = world.db.store
    run = store.get_run(run_id)
    outcome.expect(run is not None and run.status == "done", f"{label} ended {run.status if run else None}")
    became = []
    for approval in (ivy, jon):
        now = store.get_approval(approval.approval_id)
        ran = _notes(world, approval.key)
        expected = 1 if now is not None and now.status == "consumed" else 0
        outcome.expect(ran == expected, f"{label}: {approval.key} ran {ran} times; its approval is "
                                        f"{now.status if now else None}")
        became.append(now.status if now else "missing")
    told = [e for e in (run.state["history"] if run else []) if e.get("role") == "tool"]
    outcome.expect([e.get("call_id") for e in told] == ["b-look", "b-ivy", "b-jon"],
                   f"{label}: the model heard {[e.get('call_id') for e in told]}, not every call in order")
    return "/".join(became)
