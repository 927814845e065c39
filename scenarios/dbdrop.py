"""The database going away mid-run: PostgreSQL drops every connection of the serve processes, again
and again, while runs step, wait and execute. Runs pause and continue; nothing is recorded twice
or lost.
"""

from __future__ import annotations

import random
import threading
import time

from scenarios.drive import Driver
from scenarios.outcome import Outcome, observed
from scenarios.world import World

SCRIPT = [
    {"tool": "lookup", "args": {"query": "order A-3003"}},
    {"tool": "send_note", "args": {"to": "alan@example.com", "text": "We are on it."}},
    {"tool": "lookup", "args": {"query": "refund policy"}},
    {"tool": "apply_credit", "args": {"account": "A-3003", "amount": 7}},
    {"final": "Alan was told and credited."},
]


def run_connection_drops(runs: int = 16, replicas: int = 2, chaos_s: float = 12.0, seed: int = 3) -> Outcome:
    outcome = Outcome(f"database/connection-drops/{replicas}x/postgres", "database", runs=runs)
    with observed(outcome, lambda: World("postgres", SCRIPT, env={"SIGNOFF_LEASE_SECONDS": "3"})) as world:
        serves = [world.start() for _ in range(replicas)]
        rng = random.Random(seed)
        driver = Driver(world, pick=lambda: rng.choice(serves), reclick_after=3.0)
        run_ids = [driver.start(f"drop test {i}: tell Alan and credit him") for i in range(runs)]
        drops: list[int] = []
        stop = threading.Event()

        def chaos() -> None:
            end = time.monotonic() + chaos_s
            while time.monotonic() < end and not stop.is_set():
                time.sleep(rng.uniform(0.1, 0.4))
                killed = world.db.terminate("serve")
                if killed:
                    drops.append(killed)

        dropper = threading.Thread(target=chaos, name="drop-connections")
        dropper.start()
        settled = driver.settle(run_ids, chaos_s + 60)
        stop.set()
        dropper.join()
        outcome.faults = len(drops)
        outcome.notes.append(f"{len(drops)} drops killed {sum(drops)} connections; {driver.clicks} clicks sent")
        outcome.expect(drops, "no connection was ever dropped")
        outcome.expect(settled, "the runs did not all settle after the database came back")
        statuses = [r.status for r in (world.db.store.get_run(i, history=False) for i in run_ids) if r]
        outcome.expect(statuses.count("done") == runs, f"every run should finish; statuses: {sorted(statuses)}")
        outcome.expect(all(s.alive() for s in serves), "a replica died when its database connections dropped")
    return outcome
