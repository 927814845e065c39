"""Request again, across two replicas on one database: approvals with a 2-second TTL that nobody
decides, so each run ends `expired` keeping its call, and its requester asks again from the
expiry notice.

The request is raced as people race one: the requester's click delivered to both replicas at once
and replayed; the requester and an approver (whose click is not theirs to make) at once; and a run
asked again, left to expire again, and asked a third time. Each run must get exactly one fresh
approval per request taken, never two live at once, and its note must run once, with the key it
was first asked with, only after the fresh approval; no refused click may change anything.
"""

from __future__ import annotations

import random
import time
from typing import Any

from scenarios.drive import APPROVER, REQUESTER, has_ended, message_with, posted_approval, started_run
from scenarios.outcome import Outcome, observed
from scenarios.replicas import at_once, race_each_run
from scenarios.serve import Serve, click_body
from scenarios.world import World, wait_until
from signoff.bot.slack.blocks import APPROVE_ACTION, REQUEST_AGAIN_ACTION
from signoff.runtime.schema import TERMINAL

SCRIPT: list[dict[str, Any]] = [
    {"tool": "send_note", "args": {"to": "gus@example.com", "text": "Your replacement ships Monday."}},
    {"final": "Gus was told."},
]
RACES = ("double_click", "requester_and_approver", "expires_twice")
REQUESTER_ONLY = "only the person who started this run"
ALREADY = "already requested again"


def run_request_again(kind: str = "sqlite", runs: int = 3, seed: int = 17) -> Outcome:
    outcome = Outcome(f"expiry/request-again/2x/{kind}", "expiry", runs=runs)
    # Short enough to expire twice in a run, long enough that a loaded machine posts the fresh
    # approval and the poll below sees it pending before it expires again.
    env = {"SIGNOFF_APPROVAL_TTL": "4s"}
    with observed(outcome, lambda: World(kind, SCRIPT, env=env)) as world:
        race_each_run(world, outcome, RACES, runs, seed,
                      lambda serves, rng, index, race: _drive(world, serves, rng, outcome, index, race))
    return outcome


def _drive(world: World, serves: list[Serve], rng: random.Random, outcome: Outcome, index: int, race: str) -> str:
    a, b = rng.sample(serves, 2)
    run_id = started_run(a.command(f"again {index}: tell Gus his replacement ships", REQUESTER).text)
    label = f"{run_id} ({race})"
    requests = 1 if race != "expires_twice" else 2
    for asked in range(requests):
        fresh = _ask_again(world, (a, b), rng, outcome, run_id, race, asked)
        outcome.expect(_notes(world, run_id) == 0, f"{label}: the note ran before anyone approved it")
        if asked + 1 == requests:  # else left to expire again
            card = world.slack.message(fresh.message["channel"], fresh.message["ts"])
            rng.choice((a, b)).post(click_body(card, APPROVE_ACTION, APPROVER))
    wait_until(lambda: has_ended(world, run_id, TERMINAL), 30, interval=0.05, what=f"{run_id} to end")
    _settled(world, outcome, label, run_id, approvals=requests + 1)
    return race


def _ask_again(world: World, pair: tuple[Serve, Serve], rng: random.Random, outcome: Outcome, run_id: str,
               race: str, asked: int) -> Any:
    """Press Request again on the run's `asked`+1-th expiry notice as `race` says; its fresh approval."""
    a, b = pair
    label = f"{run_id} ({race})"
    notice = _expired_notice(world, run_id, asked)
    body = click_body(notice, REQUEST_AGAIN_ACTION, REQUESTER)
    told = len(_answers(world, REQUESTER))
    match race:
        case "double_click":  # one signed click on both replicas at once, and replayed to one
            stamp = int(time.time())
            at_once(lambda: a.post(body, timestamp=stamp), lambda: b.post(body, timestamp=stamp))
            b.post(body, timestamp=stamp)
            outcome.hostile += 2
            said = wait_until(lambda: _answers(world, REQUESTER)[told:] or None, 10, what="the replays' answers")
            outcome.expect(any(ALREADY in text for text in said),
                           f"{label}: a replayed Request again was told {said!r}, not that it was done already")
        case "requester_and_approver":
            before = len(_answers(world, APPROVER))
            at_once(lambda: a.post(body), lambda: b.post(click_body(notice, REQUEST_AGAIN_ACTION, APPROVER)),
                    delays=(rng.uniform(0, 0.05), rng.uniform(0, 0.05)))
            outcome.hostile += 1
            said = wait_until(lambda: _answers(world, APPROVER)[before:] or None, 10, what="the approver's refusal")
            outcome.expect(any(REQUESTER_ONLY in text for text in said),
                           f"{label}: the approver's Request again was told {said!r}, not that it is not theirs")
        case _:
            a.post(body)
    # Generous: under a loaded CI machine the worker that asks afresh may wait its turn behind others.
    return wait_until(lambda: _fresh_approval(world, run_id, asked + 2), 60, what=f"{run_id}'s fresh approval")


def _expired_notice(world: World, run_id: str, expiries: int) -> dict[str, Any]:
    """The newest notice offering Request again for `run_id`, once it has expired `expiries` + 1 times."""
    def found() -> dict[str, Any] | None:
        run = world.db.store.get_run(run_id, history=False)
        expired = [a for a in world.db.store.list_approvals(run_id=run_id, limit=20) if a.status == "expired"]
        if run is None or run.status != "expired" or len(expired) < expiries + 1:
            return None
        return message_with(world, REQUEST_AGAIN_ACTION, f"{run_id}:")
    notice: dict[str, Any] = wait_until(found, 20, interval=0.1, what=f"{run_id}'s expiry notice")
    return notice


def _fresh_approval(world: World, run_id: str, count: int) -> Any:
    """The run's newest approval, posted and pending, once it has `count` approvals."""
    approvals = world.db.store.list_approvals(run_id=run_id, limit=20)
    latest = posted_approval(world, run_id)
    if len(approvals) < count or latest is None or latest.status != "pending":
        return None
    return latest


def _answers(world: World, user: str) -> list[str]:
    return [str(c.get("text") or "").lower() for c in world.slack.calls_to("chat.postEphemeral")
            if c.get("user") == user] + [str(r.get("text") or "").lower() for r in world.slack.responses
                                         if r.get("response_type") == "ephemeral"]


def _notes(world: World, run_id: str) -> int:
    return sum(1 for line in world.effect_lines()
               if line.get("tool") == "send_note" and str(line.get("key", "")).startswith(f"{run_id}:"))


def _settled(world: World, outcome: Outcome, label: str, run_id: str, approvals: int) -> None:
    """Done, its note run once with the key of its first asking, after one approval per asking."""
    store = world.db.store
    run = store.get_run(run_id)
    outcome.expect(run is not None and run.status == "done", f"{label} ended {run.status if run else None}, not done")
    keys = [line.get("key") for line in world.effect_lines() if str(line.get("key", "")).startswith(f"{run_id}:")]
    outcome.expect(keys == [f"{run_id}:1"], f"{label}: the note ran with keys {keys}, not once with {run_id}:1")
    statuses = sorted(a.status for a in store.list_approvals(run_id=run_id, limit=20))
    expected = sorted(["consumed"] + ["expired"] * (approvals - 1))
    outcome.expect(statuses == expected, f"{label}: its approvals are {statuses}, not {expected}")
    again = [e for e in store.timeline(run_id) if e["type"] == "requested_again"]
    outcome.expect(len(again) == approvals - 1 and all(e.get("by") == REQUESTER for e in again),
                   f"{label}: {len(again)} requests again were taken ({[e.get('by') for e in again]}), "
                   f"not {approvals - 1} of {REQUESTER}'s")
