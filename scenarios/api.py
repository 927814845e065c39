"""The approval API attacked: a caller that dies between starting a call and reporting it, callers
racing to start one approval on two replicas, and one create replayed at once on both.

The callers here are the scenario itself, over HTTP, against real `signoff serve` processes; what
a caller runs is written to the world's effects log, as the scenario tools' effects are, so the
invariants check it as they check any side effect: approved (I1), once (I2), and the rest.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from scenarios.drive import APPROVER, Driver, message_with, messages_with
from scenarios.outcome import Outcome, observed
from scenarios.toolset import TOOLS, append_effect
from scenarios.world import World, wait_until
from signoff.bot.slack.blocks import APPROVE_ACTION, RECONCILE_DONE_ACTION, RECONCILE_RETRY_ACTION
from signoff.runtime.adapters.api_keys import SqlApiKeys
from signoff.runtime.api_keys import ApiKey, new_callback_secret, new_secret, secret_hash
from signoff.runtime.caller_runs import CallerCall

TOOL = "refund"
CALLER_TOOLS = [*TOOLS, CallerCall(tool=TOOL, args={}).as_tool()]
"""The world's tools as the invariants count effects: the caller's refunds are side effects, not
idempotent, so one run twice is a violation (I2)."""
SCRIPT = [{"final": "unused: the API's runs propose their own call"}]


def _key(world: World) -> str:
    """A key of the world's, made straight in its database (`signoff keys create` does the same)."""
    secret = new_secret()
    keys = SqlApiKeys(world.db.engine)
    keys.create_key(ApiKey(name="scenario", channel="C0RUNS", tools=("*",), requester=None,
                           created_at=world.db.store.now()), secret_hash(secret), new_callback_secret())
    return secret


class Caller:
    """A program asking for approvals over HTTP, as any client does."""

    def __init__(self, world: World, secret: str) -> None:
        self.world, self.headers = world, {"Authorization": f"Bearer {secret}"}

    def ask(self, serve: Any, key: str, amount: int, timeout: float = 900.0) -> httpx.Response:
        body = {"tool": TOOL, "args": {"order": key, "amount": amount}, "key": key, "timeout": timeout}
        return httpx.post(f"http://127.0.0.1:{serve.port}/v1/approvals", json=body, headers=self.headers, timeout=60)

    def start(self, serve: Any, approval_id: str) -> httpx.Response:
        return httpx.post(f"http://127.0.0.1:{serve.port}/v1/approvals/{approval_id}/start", headers=self.headers,
                          timeout=60)

    def report(self, serve: Any, approval_id: str, result: Any) -> httpx.Response:
        return httpx.post(f"http://127.0.0.1:{serve.port}/v1/approvals/{approval_id}/outcome",
                          json={"ok": True, "result": result}, headers=self.headers, timeout=60)

    def run(self, started: httpx.Response) -> None:
        """Make the call the start handed over: its effect, in the world's log."""
        body = started.json()
        append_effect(self.world.effects, TOOL, body["args"], body["key"])


def _approve(world: World, serve: Any, run_id: str) -> None:
    approval = wait_until(lambda: next(iter(world.db.store.list_approvals(run_id=run_id, limit=1)), None), 30,
                          what=f"the approval of {run_id}")
    card = wait_until(lambda: next(iter(messages_with(world, APPROVE_ACTION, f"{approval.approval_id}:")), None),
                      30, what=f"the card of {run_id}")
    serve.click(card, APPROVE_ACTION, APPROVER)
    wait_until(lambda: world.db.store.get_run(run_id, history=False).status == "awaiting_caller", 30,
               what=f"{run_id} handed to its caller")


def run_caller_dies(kind: str = "sqlite") -> Outcome:
    """The caller starts the call, makes it, and dies before reporting: once the call's time limit
    passes, a person is asked whether it took effect, and says it did; it never runs again."""
    outcome = Outcome(f"api/caller-dies-after-start/{kind}", "api", runs=1, faults=1)
    with observed(outcome, lambda: World(kind, SCRIPT, tools=CALLER_TOOLS)) as world:
        serve = world.start()
        caller = Caller(world, _key(world))
        asked = caller.ask(serve, "A-1", 40, timeout=2.0)
        outcome.expect(asked.status_code == 201, f"the ask answered {asked.status_code}: {asked.text[:200]}")
        run_id = asked.json()["id"]
        _approve(world, serve, run_id)
        started = caller.start(serve, run_id)
        outcome.expect(started.status_code == 200, f"the start answered {started.status_code}")
        caller.run(started)  # ... and the caller dies here, before it reports
        wait_until(lambda: world.db.store.get_run(run_id, history=False).status == "needs_reconciliation", 30,
                   what="the lost call put to a person")
        wait_until(lambda: message_with(world, RECONCILE_DONE_ACTION, run_id), 30, what="the reconcile card")
        outcome.expect(message_with(world, RECONCILE_RETRY_ACTION, run_id) is None,
                       "the card offers to retry a call its caller runs, which Signoff never runs itself")
        again = caller.start(serve, run_id)
        outcome.expect(again.status_code == 409, f"a start after the caller died answered {again.status_code}")
        settled = Driver(world, pick=lambda: serve).settle([run_id], 60)
        outcome.expect(settled, "the person's answer did not settle the run")
        late = caller.report(serve, run_id, {"late": True})
        outcome.expect(late.status_code == 409, f"a report after the person answered got {late.status_code}")
    return outcome


def run_racing_starts(runs: int = 6) -> Outcome:
    """Each approved call, started by two callers at once on two replicas: one start wins, the
    other is refused, and the call runs once."""
    outcome = Outcome("api/racing-starts/2x/postgres", "api", runs=runs)
    with observed(outcome, lambda: World("postgres", SCRIPT, tools=CALLER_TOOLS)) as world:
        serves = [world.start(), world.start()]
        caller = Caller(world, _key(world))
        run_ids = [caller.ask(serves[i % 2], f"R-{i}", 50 + i).json()["id"] for i in range(runs)]
        for i, run_id in enumerate(run_ids):
            _approve(world, serves[i % 2], run_id)
        with ThreadPoolExecutor(max_workers=4) as pool:
            for run_id in run_ids:
                barrier = threading.Barrier(2)

                def race(serve: Any, run_id: str = run_id, barrier: threading.Barrier = barrier) -> httpx.Response:
                    barrier.wait()
                    return caller.start(serve, run_id)

                answers = list(pool.map(race, serves))
                outcome.races += 1
                codes = sorted(a.status_code for a in answers)
                outcome.expect(codes == [200, 409], f"{run_id}: two racing starts answered {codes}")
                for answer in answers:
                    if answer.status_code == 200:
                        caller.run(answer)
                        caller.report(serves[0], run_id, {"refunded": True})
        done = [world.db.store.get_run(r, history=False).status for r in run_ids]
        outcome.expect(done == ["done"] * runs, f"every run should end once reported: {done}")
    return outcome


def run_replayed_create(copies: int = 6) -> Outcome:
    """One ask sent `copies` times at once, half to each replica (a client retrying a timeout):
    one approval, one card, every answer naming it; the same key with other content is refused."""
    outcome = Outcome("api/replayed-create/2x/postgres", "api", runs=1, hostile=1)
    with observed(outcome, lambda: World("postgres", SCRIPT, tools=CALLER_TOOLS)) as world:
        serves = [world.start(), world.start()]
        caller = Caller(world, _key(world))
        barrier = threading.Barrier(copies)

        def ask(i: int) -> httpx.Response:
            barrier.wait()
            return caller.ask(serves[i % 2], "same-key", 70)

        with ThreadPoolExecutor(max_workers=copies) as pool:
            answers = list(pool.map(ask, range(copies)))
        outcome.races = copies
        ids = {a.json().get("id") for a in answers if a.status_code in (200, 201)}
        codes = sorted(a.status_code for a in answers)
        outcome.expect(len(ids) == 1, f"the replayed ask made {len(ids)} approvals: {codes}")
        outcome.expect(codes.count(201) == 1 and codes.count(200) == copies - 1, f"answers {codes}")
        outcome.expect(len(world.db.store.list_runs(limit=100)) == 1, "more than one run was recorded")
        other = caller.ask(serves[0], "same-key", 7000)
        outcome.expect(other.status_code == 409, f"other content under the same key answered {other.status_code}")
        run_id = ids.pop() if ids else ""
        if run_id:
            _approve(world, serves[1], run_id)
            started = caller.start(serves[0], run_id)
            caller.run(started)
            caller.report(serves[1], run_id, {"refunded": True})
    return outcome
