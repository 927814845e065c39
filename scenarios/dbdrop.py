"""The database going away mid-run: PostgreSQL drops every connection of the serve processes, again
and again, while runs step, wait and execute; and the server itself crashes and comes back. Runs
pause and continue; nothing is recorded twice or lost.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time

from sqlalchemy import func, select

from scenarios.drive import Driver, messages_with
from scenarios.outcome import Outcome, observed
from scenarios.pgserver import PrivateServer, Unavailable
from scenarios.serve import Serve
from scenarios.world import World, wait_until
from signoff.bot.slack.blocks import APPROVE_ACTION
from signoff.runtime.adapters.tables import notices

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
        driver.faults_until = time.monotonic() + chaos_s

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
        _let_recovery_repair_cards(world)
        outcome.faults = len(drops)
        outcome.notes.append(f"{len(drops)} drops killed {sum(drops)} connections; {driver.clicks} clicks sent")
        outcome.expect(drops, "no connection was ever dropped")
        outcome.expect(settled, "the runs did not all settle after the database came back")
        statuses = [r.status for r in (world.db.store.get_run(i, history=False) for i in run_ids) if r]
        outcome.expect(statuses.count("done") == runs, f"every run should finish; statuses: {sorted(statuses)}")
        outcome.expect(all(s.alive() for s in serves), "a replica died when its database connections dropped")
    return outcome


def run_server_crashes(runs: int = 8, replicas: int = 2, crashes: int = 2, down_s: float = 3.0,
                       seed: int = 5) -> Outcome:
    """Crash a private PostgreSQL server (no shutdown checkpoint) while runs are under way, click
    Approve while it is down, start it again; twice. Every run must still finish, each side effect once.
    """
    outcome = Outcome(f"database/server-crash/{replicas}x/postgres", "database", runs=runs)
    try:
        server = PrivateServer()
    except Unavailable as exc:
        outcome.skipped = str(exc)
        return outcome
    try:
        server.start()
        env = {"SIGNOFF_LEASE_SECONDS": "3"}
        with observed(outcome, lambda: World("postgres", SCRIPT, env=env, postgres_url=server.url)) as world:
            serves = [world.start() for _ in range(replicas)]
            rng = random.Random(seed)
            driver = Driver(world, pick=lambda: rng.choice(serves), reclick_after=3.0)
            run_ids = [driver.start(f"server crash test {i}: tell Alan and credit him") for i in range(runs)]
            answered: list[int] = []
            for n in range(crashes):
                # Runs go on until approval cards wait in Slack. Then the server dies under them: every
                # other time just after a burst of approvals, so that workers are mid-execution.
                wait_until(lambda: messages_with(world, APPROVE_ACTION), 30, what="an approval card in Slack")
                if n % 2 == 1:
                    approved = _click_what_slack_shows(world, rng.choice(serves), driver.approver)
                    outcome.notes.append(f"crash {n + 1} came {len(approved)} approvals into a burst")
                    time.sleep(rng.uniform(0.05, 0.3))
                server.crash()
                outcome.faults += 1
                try:
                    time.sleep(down_s / 2)
                    answered += _click_what_slack_shows(world, rng.choice(serves), driver.approver)
                    time.sleep(down_s / 2)
                finally:
                    server.start()
            settled = driver.settle(run_ids, 90)
            _let_recovery_repair_cards(world)
            outcome.races = len(answered)
            outcome.notes.append(f"{crashes} server crashes of {down_s:g}s; {len(answered)} clicks while it was "
                                 f"down, answered {sorted(set(answered))}; {driver.clicks} clicks in all")
            outcome.expect(all(status == 200 for status in answered),
                           "a click while the database was down was not acknowledged")
            outcome.expect(settled, "the runs did not all settle after the server came back")
            statuses = [r.status for r in (world.db.store.get_run(i, history=False) for i in run_ids) if r]
            outcome.expect(statuses.count("done") == runs, f"every run should finish; statuses: {sorted(statuses)}")
            outcome.expect(all(s.alive() for s in serves), "a replica died when its database server crashed")
    finally:
        server.destroy()
    return outcome


def _click_what_slack_shows(world: World, serve: Serve, user: str) -> list[int]:
    """Press every Approve button Slack shows (the database cannot be asked): their HTTP statuses."""
    statuses = []
    for message in messages_with(world, APPROVE_ACTION):
        try:
            statuses.append(serve.click(message, APPROVE_ACTION, user).status)
        except OSError as exc:
            statuses.append(-1)
            world.untold.append(f"a click while the database was down got no answer: {exc}")
    return statuses


def _let_recovery_repair_cards(world: World) -> None:
    """An update of a card may have been lost to the outage after the decision was saved; the
    recovery job repairs it on its next passes. Give it those passes (bounded), then I6 judges."""
    with contextlib.suppress(TimeoutError):
        wait_until(lambda: not _redraws_owed(world), 15, interval=0.2)


def _redraws_owed(world: World) -> int:
    """The card redraws the outbox still owes (sent by recovery once Slack and the database are back)."""
    with world.db.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(notices).where(notices.c.kind == "redraw")).scalar_one())
