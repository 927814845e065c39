"""Process death: a `signoff serve` killed at every failpoint of a step and of an approval, on SQLite
and PostgreSQL, then restarted without the failpoint; and one plain SIGKILL in the middle of a run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from scenarios.drive import APPROVER, REQUESTER, Driver, has_ended, posted_approval, started_run
from scenarios.outcome import Outcome, observed
from scenarios.serve import Serve, click_body
from scenarios.world import World, wait_until
from signoff.bot.slack.blocks import APPROVE_ACTION
from signoff.runtime.failpoints import POINTS
from signoff.runtime.records import ApprovalRecord, RunRecord

NOTE = {"tool": "send_note", "args": {"to": "ada@example.com", "text": "Your refund is on its way."}}
CREDIT = {"tool": "apply_credit", "args": {"account": "A-1001", "amount": 42}}
LOOKUP = {"tool": "lookup", "args": {"query": "order A-1001"}}
FINAL = {"final": "Noted and credited."}

TOOL_POINTS = ("after_ledger_row", "after_tool")
"""Points inside a side effect's execution: crashed once with each kind of tool."""
SWEEP_POINTS = ("after_sweep",)
"""Points a run of this script never reaches (no reminder, no break-glass): `owed.py` crashes there."""


def script(first: str) -> list[dict[str, Any]]:
    """Look up, then both side effects, the one named `first` first."""
    effects = [NOTE, CREDIT] if first == "send_note" else [CREDIT, NOTE]
    return [LOOKUP, *effects, FINAL]


@dataclass(frozen=True)
class CrashCase:
    point: str
    kind: str
    first: str = "send_note"

    @property
    def name(self) -> str:
        tool = "" if self.point not in TOOL_POINTS else f"/{'once' if self.first == 'send_note' else 'idem'}"
        return f"crash/{self.point}{tool}/{self.kind}"


def cases(kinds: tuple[str, ...], both_tools: bool = True) -> list[CrashCase]:
    found = []
    for kind in kinds:
        for point in (p for p in POINTS if p not in SWEEP_POINTS):
            found.append(CrashCase(point, kind))
            if both_tools and point in TOOL_POINTS:
                found.append(CrashCase(point, kind, first="apply_credit"))
    return found


class Lives:
    """The serve processes of one scenario, one after another; a dead one is replaced by a clean one."""

    def __init__(self, world: World, failpoint: str | None) -> None:
        self.world = world
        env = {"SIGNOFF_FAILPOINTS": f"{failpoint}=exit"} if failpoint else {}
        self.current: Serve = world.start(**env)
        self.current.watch_for_death()
        self.deaths = 0

    def pick(self) -> Serve:
        return self.current

    def tick(self) -> None:
        if self.current.died.is_set():
            self.deaths += 1
            self.current = self.world.start()
            self.current.watch_for_death()


def run_crash(case: CrashCase, timeout: float = 60.0) -> Outcome:
    outcome = Outcome(case.name, "crash", runs=1)
    with observed(outcome, lambda: World(case.kind, script(case.first))) as world:
        lives = Lives(world, case.point)
        driver = Driver(world, pick=lives.pick)
        run_id = driver.start(f"crash test at {case.point}: note Ada and credit her account")
        settled = driver.settle([run_id], timeout, on_tick=lives.tick)
        outcome.faults = lives.deaths
        outcome.expect(lives.deaths == 1, f"the failpoint {case.point} should kill serve once; it did {lives.deaths}")
        outcome.expect(settled, f"the run did not settle within {timeout:g}s")
        _expect_story(outcome, world, run_id, case)
    return outcome


def _expect_story(outcome: Outcome, world: World, run_id: str, case: CrashCase) -> None:
    run = world.db.store.get_run(run_id, history=False)
    outcome.expect(run is not None and run.status == "done", f"the run ended {run.status if run else None}, not done")
    types = [e["type"] for e in world.db.store.timeline(run_id)]
    if case.point in TOOL_POINTS:
        reconciled = "needs_reconciliation" in types
        if case.first == "send_note":
            outcome.expect(reconciled, "a non-idempotent call left without an outcome must go to reconciliation")
        else:
            outcome.expect(not reconciled and "execution_retried" in types,
                           "an idempotent call left without an outcome must be retried with its key")
        outcome.notes.append(f"story: {', '.join(t for t in types if t not in ('decision',))}")
    _expect_told_once(outcome, world, run)


def _expect_told_once(outcome: Outcome, world: World, run: RunRecord | None) -> None:
    """What the run's steps owed people reached them once each, whoever was alive to tell it: the
    lookup's result and the run's answer in its thread, and one card per approval."""
    ref = run.origin if run is not None else {}
    thread = world.slack.thread(str(ref.get("channel")), str(ref.get("ts"))) if ref.get("ts") else []
    texts = [str(message.get("text") or "") for message in thread]
    results = sum(1 for text in texts if text.startswith("lookup returned a result"))
    outcome.expect(results == 1, f"the lookup's result was told {results} times in the run's thread, not once")
    for approval in world.db.store.list_approvals(run_id=run.run_id if run else "", limit=20):
        cards = sum(1 for call in world.slack.calls if call.method == "chat.postMessage" and call.ok
                    and f"{approval.approval_id}:" in str(call.body))
        outcome.expect(cards == 1, f"approval {approval.approval_id} has {cards} cards, not one")


def run_sigkill(kind: str, timeout: float = 60.0) -> Outcome:
    """SIGKILL a replica while a run is inside a slow tool call, restart, and let recovery finish it."""
    outcome = Outcome(f"crash/sigkill-mid-run/{kind}", "crash", runs=1)
    slow = {"tool": "lookup", "args": {"query": "slow archive", "delay_s": 3.0}}
    with observed(outcome, lambda: World(kind, [slow, NOTE, CREDIT, FINAL])) as world:
        lives = Lives(world, None)
        driver = Driver(world, pick=lives.pick)
        run_id = driver.start("read the slow archive, then note Ada and credit her")
        wait_until(lambda: _running(world, run_id), 20, what="the run running its slow tool")
        time.sleep(0.5)
        run = world.db.store.get_run(run_id, history=False)
        outcome.expect(run is not None and run.status == "running" and run.lease_owner,
                       "the run should be running under a lease when the replica is killed")
        lives.current.kill()
        outcome.faults = 1
        settled = driver.settle([run_id], timeout, on_tick=lives.tick)
        outcome.expect(settled, f"the run did not settle within {timeout:g}s")
        _expect_story(outcome, world, run_id, CrashCase("sigkill", kind))
    return outcome


def _decided(world: World, approval_id: str) -> ApprovalRecord | None:
    approval = world.db.store.get_approval(approval_id)
    return approval if approval is not None and approval.status != "pending" else None


def _running(world: World, run_id: str) -> bool:
    run = world.db.store.get_run(run_id, history=False)
    return run is not None and run.status == "running"


def run_decider_dies(kind: str, timeout: float = 60.0) -> Outcome:
    """Two replicas. The one that takes an Approve click dies just after its decision, which also
    took the run's lease for it: the other replica must leave the run alone while that lease lives,
    then finish it once, with the call's first key, when it lapses."""
    outcome = Outcome(f"crash/clicking-replica-dies-holding-the-run/{kind}", "crash", runs=1)
    with observed(outcome, lambda: World(kind, [NOTE, FINAL])) as world:
        clicked = world.start(SIGNOFF_FAILPOINTS="after_approval_recorded=exit")
        clicked.watch_for_death()
        other = world.start()
        run_id = started_run(other.command("note Ada that her refund is on its way", REQUESTER).text)
        approval = wait_until(lambda: posted_approval(world, run_id), 20, interval=0.1, what="the approval's card")
        message = world.slack.message(approval.message["channel"], approval.message["ts"])
        clicked.post(click_body(message, APPROVE_ACTION, APPROVER))
        # Read as soon as the decision is stored: its lease lasts 2 s, after which the other replica's
        # recovery may take the run over, or hold it for an errand and let go of it.
        decided = wait_until(lambda: _decided(world, approval.approval_id), 20, interval=0.02,
                             what="the decision stored")
        held = world.db.store.get_run(run_id, history=False)
        outcome.expect(clicked.died.wait(20), "the clicked replica should die at after_approval_recorded")
        outcome.faults = 1
        outcome.expect(decided.status == "approved", "the decision should be stored")
        if held is not None and held.status == "awaiting_approval":  # not yet taken over once the lease lapsed
            outcome.expect(bool(held.lease_owner), "the dead replica's decision should hold the run for it")
        try:
            wait_until(lambda: has_ended(world, run_id), timeout, interval=0.1, what=f"{run_id} to end")
        except TimeoutError as exc:
            outcome.expectations.append(str(exc))
        run = world.db.store.get_run(run_id, history=False)
        outcome.expect(run is not None and run.status == "done", f"the run ended {run.status if run else None}")
        keys = [row["key"] for row in world.db.store.executions(run_id)]
        outcome.expect(keys == [approval.key], f"the call should run once with its key {approval.key}: {keys}")
    return outcome
