"""Several replicas on one PostgreSQL: hundreds of runs, clicks sent to random replicas, duplicated,
and raced (approve against approve, deny, cancel and expiry), many at once.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from scenarios.drive import APPROVER, REQUESTER, has_ended, posted_approval, started_run
from scenarios.outcome import Outcome, observed
from scenarios.serve import Serve, click_body
from scenarios.world import World, wait_until
from signoff.bot.slack.blocks import APPROVE_ACTION

SCRIPT = [
    {"tool": "lookup", "args": {"query": "order A-2002"}},
    {"tool": "send_note", "args": {"to": "grace@example.com", "text": "Your order ships today."}},
    {"final": "Grace was told."},
]
SECOND_APPROVER = "U0ONCALL1"
RACES = ("single", "duplicate", "approve_approve", "approve_deny", "approve_cancel")


@dataclass
class Fleet:
    """The replicas and the bookkeeping shared by the threads that drive runs through them."""

    serves: list[Serve]
    rng: random.Random
    races: Counter[str] = field(default_factory=Counter)
    results: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def pick(self, exclude: Serve | None = None) -> Serve:
        with self.lock:
            choices = [s for s in self.serves if s is not exclude] or self.serves
            return self.rng.choice(choices)

    def note(self, race: str, result: str) -> None:
        with self.lock:
            self.races[race] += 1
            self.results[f"{race}: {result}"] += 1

    def problem(self, text: str) -> None:
        with self.lock:
            self.problems.append(text)


Race = Callable[[list[Serve], random.Random, int, str], str]
"""(the replicas, the scenario's random source, the run's index, its race) -> what it came to."""


def race_each_run(world: World, outcome: Outcome, races: Sequence[str], runs: int, seed: int, race: Race) -> None:
    """Two replicas of `world`; run i, one at a time, goes through `races[i % len(races)]`, and what
    each came to is tallied in the outcome's notes (a run that timed out is an unmet expectation)."""
    serves = at_once(world.start, world.start)
    rng, results = random.Random(seed), Counter[str]()
    for index in range(runs):
        name = races[index % len(races)]
        try:
            results[race(serves, rng, index, name)] += 1
        except TimeoutError as exc:
            outcome.expectations.append(f"run {index} ({name}): {exc}")
        outcome.races += 1
    outcome.notes += [f"{k}: {v}" for k, v in sorted(results.items())]


def at_once(*actions: Callable[[], Any], delays: Sequence[float] = ()) -> list[Any]:
    """Fire `actions` from threads released by one barrier; action i first waits `delays[i]` seconds.

    Small random delays let either side of a race win: without them the side handled inline
    (a slash command) nearly always beats the one handled after its ack (a click).
    """
    barrier = threading.Barrier(len(actions))
    results: list[Any] = [None] * len(actions)
    waits = list(delays) + [0.0] * (len(actions) - len(delays))

    def fire(i: int) -> None:
        barrier.wait()
        time.sleep(waits[i])
        results[i] = actions[i]()

    threads = [threading.Thread(target=fire, args=(i,)) for i in range(len(actions))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def drive_one(world: World, fleet: Fleet, index: int, race: str, timeout: float = 60.0) -> str | None:
    """Start one run on a random replica, race on its approval, and wait for it to end."""
    first = fleet.pick()
    reply = first.command(f"run {index}: tell Grace her order ships", REQUESTER)
    run_id = started_run(reply.text)
    try:
        approval = wait_until(lambda: posted_approval(world, run_id), timeout, interval=0.1, what=f"{run_id}'s approval")
    except TimeoutError as exc:
        fleet.problem(str(exc))
        return run_id
    message = world.slack.message(approval.message["channel"], approval.message["ts"])
    a = fleet.pick()
    b = fleet.pick(exclude=a)
    approve = click_body(message, APPROVE_ACTION, APPROVER)
    rng = random.Random(fleet.rng.random())
    match race:
        case "single":
            a.post(approve)
        case "duplicate":  # Slack's retry, or a replayed request: the very same signed body, twice or thrice
            copies = [fleet.pick() for _ in range(fleet.rng.choice((2, 3)))]
            at_once(*[lambda s=s: s.post(approve) for s in copies])
        case "approve_approve":
            other = click_body(message, APPROVE_ACTION, SECOND_APPROVER)
            at_once(lambda: a.post(approve), lambda: b.post(other), delays=(rng.uniform(0, 0.05),))
        case "approve_deny":
            at_once(lambda: a.post(approve),
                    lambda: b.deny(approval.approval_id, approval.digest, SECOND_APPROVER, "not today"),
                    delays=(0.0, rng.uniform(0, 0.05)))
        case "approve_cancel":
            at_once(lambda: a.post(approve), lambda: b.command(f"cancel {run_id}", REQUESTER),
                    delays=(0.0, rng.uniform(0, 0.3)))
    try:
        wait_until(lambda: has_ended(world, run_id), timeout, interval=0.1, what=f"{run_id} to end")
    except TimeoutError as exc:
        fleet.problem(str(exc))
    final = world.db.store.get_approval(approval.approval_id)
    run = world.db.store.get_run(run_id, history=False)
    fleet.note(race, f"approval {final.status if final else None}, run {run.status if run else None}")
    return run_id






def run_replicas(runs: int = 200, replicas: int = 3, in_flight: int = 12, seed: int = 7) -> Outcome:
    outcome = Outcome(f"replicas/{replicas}x-races/postgres", "replicas", runs=runs)
    with observed(outcome, lambda: World("postgres", SCRIPT, env={"SIGNOFF_LEASE_SECONDS": "3"})) as world:
        fleet = Fleet(_start_fleet(world, replicas), random.Random(seed))
        with ThreadPoolExecutor(in_flight) as pool:
            list(pool.map(lambda i: drive_one(world, fleet, i, RACES[i % len(RACES)]), range(runs)))
        outcome.races = sum(n for race, n in fleet.races.items() if race != "single")
        outcome.expect(not fleet.problems, "; ".join(fleet.problems[:5]))
        outcome.expect(sum(fleet.races.values()) == runs, f"only {sum(fleet.races.values())} of {runs} runs finished")
        outcome.notes += [f"{k}: {v}" for k, v in sorted(fleet.results.items())]
    return outcome


def run_expiry_races(runs: int = 24, replicas: int = 3, seed: int = 11) -> Outcome:
    """Approvals with a 2-second TTL, approved (on two replicas at once) right around the deadline."""
    outcome = Outcome(f"replicas/{replicas}x-approve-vs-expiry/postgres", "replicas", runs=runs)
    env = {"SIGNOFF_APPROVAL_TTL": "2s", "SIGNOFF_LEASE_SECONDS": "3"}
    with observed(outcome, lambda: World("postgres", SCRIPT, env=env)) as world:
        fleet = Fleet(_start_fleet(world, replicas), random.Random(seed))

        def race(i: int) -> None:
            run_id = started_run(fleet.pick().command(f"expiry race {i}", REQUESTER).text)
            approval = wait_until(lambda: posted_approval(world, run_id), 30, interval=0.05, what="the approval")
            message = world.slack.message(approval.message["channel"], approval.message["ts"])
            body = click_body(message, APPROVE_ACTION, APPROVER)
            offset = fleet.rng.uniform(-1.0, 0.3)
            wait = (approval.expires_at - datetime.now(UTC)).total_seconds() + offset
            time.sleep(max(wait, 0))
            at_once(lambda: fleet.pick().post(body), lambda: fleet.pick().post(body))
            wait_until(lambda: has_ended(world, run_id), 30, interval=0.1, what=f"{run_id} to end")
            final = world.db.store.get_approval(approval.approval_id)
            fleet.note("approve_expiry", f"{'early' if offset < 0 else 'late'} click, approval "
                                         f"{final.status if final else None}")

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(race, range(runs)))
        outcome.races = runs
        outcome.notes += [f"{k}: {v}" for k, v in sorted(fleet.results.items())]
        won = sum(v for k, v in fleet.results.items() if "consumed" in k)
        outcome.expect(0 < won < runs, f"the races should go both ways; the click won {won} of {runs}")
    return outcome


def _start_fleet(world: World, replicas: int) -> list[Serve]:
    with ThreadPoolExecutor(replicas) as pool:
        return list(pool.map(lambda _: world.start(), range(replicas)))
