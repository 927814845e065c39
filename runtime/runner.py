"""The runner: the one place that sequences I/O around the pure agent loop.

load -> claim lease -> step -> save (state, history, events, ledger, approval in one transaction)
-> notify. Side effects go through the execution ledger: the approval is consumed and a
"started" row written before the tool runs, and the outcome is saved with the step after it.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from signoff.runtime import approval_commands
from signoff.runtime.agent import Policy
from signoff.runtime.approval import bound_to, expiry_event, has_voted, offers_grant, with_rule
from signoff.runtime.approval_events import as_events
from signoff.runtime.batches import MAX_BATCH_CALLS
from signoff.runtime.budget import Budget
from signoff.runtime.caller_runs import MODEL as CALLER_MODEL
from signoff.runtime.caller_runs import CallerCall, CallerDoor, NotStarted, Started
from signoff.runtime.cards import Card
from signoff.runtime.deciders import MaySee
from signoff.runtime.digests import batch_place
from signoff.runtime.errors import IncompatibleState
from signoff.runtime.events import run_created
from signoff.runtime.glass_requests import GlassRequests
from signoff.runtime.notices import Announce
from signoff.runtime.people import MayApprove
from signoff.runtime.ports import Store
from signoff.runtime.records import (
    ApprovalRecord,
    Counted,
    Decided,
    DecisionOutcome,
    Expired,
    Mismatch,
    Missing,
    NotAllowed,
    Nudged,
    RunRecord,
    StepUpNeeded,
)
from signoff.runtime.relay import RECOVER_AFTER, Relay
from signoff.runtime.run_requests import RunRequests
from signoff.runtime.runner_config import RunnerConfig
from signoff.runtime.state import new_state
from signoff.runtime.step_up import SignIn, step_up_refusal
from signoff.runtime.telling import Teller, skip_unreadable
from signoff.runtime.telling_ports import Notifier, Observer
from signoff.runtime.worker import Worker
from signoff.tools.base import Tool

log = logging.getLogger("signoff.runner")

MAX_GOAL_CHARS = 4000


class Runner(RunRequests, GlassRequests):
    """Starts, continues and settles runs; every method is safe to call from several threads and replicas."""

    def __init__(self, store: Store, tools: dict[str, Tool], policies: Callable[[str], Policy],
                 config: RunnerConfig | None = None, notifier: Notifier | None = None,
                 may_approve: MayApprove | None = None, may_see: MaySee | None = None,
                 observer: Observer | None = None) -> None:
        self.store = store
        self.tools = tools
        self.policies = policies
        self.config = config or RunnerConfig()
        self.teller = Teller(store, notifier, failpoints=self.config.failpoints,
                             worker_id=self.config.worker_id, lease=self.config.lease, observer=observer)
        self.may_approve: MayApprove = may_approve or (lambda user, run, approvers: None)
        self.may_see = may_see or (lambda user, run: False)
        self.relay = Relay(store, self.teller, self.to_tell)
        self.worker = Worker(store, tools, policies, self.config, self.teller, self.relay, time.monotonic,
                             self.may_approve)
        self.callers = CallerDoor(self.worker)

    # -- starting and driving runs ---------------------------------------------------------

    def start_run(self, goal: str, requester: str, origin: dict[str, Any] | None = None,
                  model: str | None = None, budget: Budget | None = None,
                  request_id: str | None = None, drive: bool = False) -> RunRecord:
        """Record a new run (status idle); `execute` runs it.

        With a `request_id` (e.g. Slack's trigger_id) a replayed request returns the run it
        started the first time, on whichever replica it lands. `drive`: the caller executes the
        run next (`execute(run_id)`), so it is created held for this runner; one left unused holds
        the run until it expires (`RunnerConfig.lease`).
        """
        return self._record_run(goal, requester, origin, model, budget, request_id, drive)[0]

    def _record_run(self, goal: str, requester: str, origin: dict[str, Any] | None, model: str | None,
                    budget: Budget | None, request_id: str | None, drive: bool) -> tuple[RunRecord, bool]:
        """`start_run`'s run, and whether this call made it (False: a replayed request's)."""
        goal = (goal or "").strip()
        if not goal:
            raise ValueError("the goal is empty")
        if len(goal) > MAX_GOAL_CHARS:
            raise ValueError(f"the goal is {len(goal)} characters; the limit is {MAX_GOAL_CHARS}")
        run_id = "run-" + secrets.token_hex(5)
        state = new_state(run_id, (budget or self.config.budget).to_json())
        lease = self.worker.new_owner() if drive else None
        model = model or self.config.model
        owed = (Announce(),) if self.teller.tells and model != CALLER_MODEL else ()  # a caller's: once it asks someone
        run = self.store.create_run(state, goal=goal, requester=requester, origin=origin or {}, model=model,
                                    request_id=request_id, lease_to=lease, lease=self.config.lease, notices=owed)
        if lease is not None and run.run_id == run_id:  # a replayed request's earlier run is not ours to drive
            self.worker.took(run_id, lease)
        if run.run_id == run_id:  # not a replayed request's earlier run: nothing was written for that
            self.teller.observe(run, [{**run_created(goal, requester, run.origin, run.model), "run_id": run_id}])
        return run, run.run_id == run_id

    def ask_for_caller(self, call: CallerCall, goal: str, requester: str, origin: dict[str, Any] | None = None,
                       request_id: str | None = None) -> tuple[RunRecord, bool]:
        """Record a run of the one call a program outside Signoff asks to make, and decide it now
        as any run's call is decided: run unasked as a rule says (handed to the caller), refused,
        or asked about (the card posted). The caller then starts it (`start_call`) and reports what
        came of it (`report_call`). `request_id`: a replayed request gets the run it made first
        (and False: it made none now)."""
        origin = {**(origin or {}), "caller": call.model_dump(mode="json")}
        run, made = self._record_run(goal, requester, origin, CALLER_MODEL, None, request_id, drive=True)
        if made:
            self.execute(run.run_id)
        return self.store.get_run(run.run_id) or run, made

    def start_call(self, run_id: str) -> Started | NotStarted:
        """The caller starts the call its run handed it: exactly once (see `caller_runs.CallerDoor`)."""
        return self.callers.start(run_id)

    def report_call(self, run_id: str, ok: bool, result: Any = None, error: str = "",
                    seconds: float = 0.0) -> str | None:
        """What came of the started call, as its caller says; the run's status after (None: the
        run is held by another pass, or gone)."""
        return self.callers.report(run_id, ok, result, error, seconds)

    def execute(self, run_id: str) -> str | None:
        """Run until the run pauses or ends; None if another worker holds it or it has ended.

        A run a decision or a new run of this runner took the lease of (`decide(drive=True)`,
        `start_run(drive=True)`) is driven under that lease, once, instead of a claim: the caller
        says only which run to drive, and never handles a lease."""
        return self.worker.execute(run_id)

    # -- people's decisions ----------------------------------------------------------------

    def decide(self, approval_id: str, digest: str, user: str, approved: bool, note: str = "",
               grant: bool = False, drive: bool = False, show: bool = True,
               signed_in: SignIn | None = None, glass: str | None = None) -> DecisionOutcome:
        """Record one person's decision on one approval; the caller then runs `execute(run_id)`.

        `grant`: approve and allow similar calls, as the approval's rule offers (refused where it
        offers none). `drive`: the caller goes on to drive the run (`execute(run_id)`), so the
        decision also takes the run's lease for this runner in its own transaction (`Decided.lease` says it did); one left unused holds the run
        until it expires (`RunnerConfig.lease`). `show=False` leaves bringing the card in line to
        the caller (`show_decision`), which hands the run to a worker first: the tool then does not
        wait for the message service.

        `signed_in`: the sign-in the web console verified for this person (None: the decision comes
        from elsewhere, a Slack click or the terminal). An approve under a rule with `step_up` needs
        one no older than it says, whatever surface it comes from (`StepUpNeeded` otherwise), and
        its event records that sign-in; a deny needs none. `glass`: the reason `user` gives for breaking the glass: an approve that decides alone where
        the rule offers it and they may (`breaker_refusal`); its follow-ups start at once."""
        checked = self._decidable(approval_id, digest, user, approved, grant, signed_in, glass)
        if not isinstance(checked, tuple):
            return checked
        run, approval, stepped_up = checked
        lease = self.worker.new_owner() if drive else None
        outcome = approval_commands.decide(self.store, approval_id, approved=approved, user=user, note=note,
                                           digest=digest, grant=grant, lease_to=lease, lease=self.config.lease,
                                           step_up=stepped_up, glass=glass, signer=self.config.signer,
                                           start_within=self.config.dispatch_window)
        if lease is not None and isinstance(outcome, Decided) and outcome.lease == lease:
            self.worker.took(approval.run_id, lease)
        if isinstance(outcome, Decided | Counted | Expired):  # what the decision's transaction wrote
            self.teller.observe(run, as_events(outcome.written))
        if isinstance(outcome, Decided):
            self.config.failpoints.hit("after_approval_recorded")
        if show:
            self.show_decision(outcome)
        if glass is not None and isinstance(outcome, Decided):
            self.glass_due()  # tell its channels now, not at the next sweep
        return outcome

    def _decidable(self, approval_id: str, digest: str, user: str, approved: bool, grant: bool,
                   signed_in: SignIn | None,
                   glass: str | None) -> tuple[RunRecord, ApprovalRecord, dict[str, Any] | None] | DecisionOutcome:
        """What a decision is made on (the run, the approval, the sign-in it records), or why it is
        refused before it is counted: the approval's own rules are the store's to apply (`vote`)."""
        approval = self.store.get_approval(approval_id)
        if approval is None:
            return Missing("approval")
        if not bound_to(approval, digest):
            return Mismatch("this button no longer matches the request it was posted with")
        run = self.store.get_run(approval.run_id, history=False)
        if run is None:
            return Missing("run")
        if glass is not None and not approved:
            return NotAllowed("only an approve breaks the glass")
        now = self.policy_now(run, approval)  # once, for who may, break-glass and step-up alike
        reason = (self.approval_refusal(user, run, approval, now) if glass is None
                  else self.breaker_refusal(user, run, approval, glass, now))
        if reason:
            return NotAllowed(reason)
        if grant and not (approved and offers_grant(approval)):
            return NotAllowed("this call's rule offers no grant: approve it alone")
        step_up = self.step_up_needed(run, approval, now) if approved else None
        refusal = step_up_refusal(step_up, signed_in, self.store.now())
        if refusal:
            return StepUpNeeded(with_rule(refusal, approval.rule) or refusal, approval_id=approval_id)
        stepped_up = signed_in.to_json(step_up) if step_up is not None and signed_in is not None else None
        return run, approval, stepped_up

    def show_decision(self, outcome: DecisionOutcome) -> None:
        """Redraw the approval's card as a decision left it (decided, counted, found expired): the
        redraw its transaction owes (`notices.card_redraws`); nothing for a decision that changed
        nothing. Should this never happen (a crash), the next sweep or `recover` sends it."""
        if isinstance(outcome, Decided | Counted | Expired):
            self.relay.send_owed(outcome.approval.run_id)

    def card_of(self, run: RunRecord, approval: ApprovalRecord) -> Card:
        """What `approval`'s card shows besides it (`Teller.card_of`), for an edge redrawing it."""
        return self.teller.card_of(run, approval)

    def running_call(self, run_id: str) -> tuple[str, str] | None:
        """(tool, key) of the run's side effect that is running now (started, no outcome yet)."""
        return self.store.running_call(run_id)

    # -- the clock's jobs --------------------------------------------------------------------

    def expire_due(self, end_run: Callable[[str], Any] | None = None) -> list[ApprovalRecord]:
        """Expire every overdue approval, tell people, and end those runs as expired.

        `end_run(run_id)` ends each run; by default here and now (`execute`), while a server
        hands them to its worker pool so one sweep of thousands does not hold the clock.
        """
        expired = approval_commands.expire_due(self.store)
        for approval in expired:
            try:
                run = self.store.get_run(approval.run_id, history=False)
            except IncompatibleState as exc:
                skip_unreadable(approval.run_id, exc)
                continue
            if run is not None:
                self.teller.observe(run, [expiry_event(approval).as_event()])  # as the sweep's transaction wrote it
            self.relay.send_owed(approval.run_id)  # its card redrawn "expired, not executed"
            (end_run or self.execute)(approval.run_id)
        return expired

    def nudge_due(self) -> list[Nudged]:
        """Remind the people of approvals half way (or as their rule says) to expiry, and add and
        tell the escalation's people, each once; the schedule is the database's."""
        made = approval_commands.nudge_due(self.store)
        if made:
            self.config.failpoints.hit("after_sweep")
        for nudge in made:
            try:
                run = self.store.get_run(nudge.approval.run_id, history=False)
            except IncompatibleState as exc:
                skip_unreadable(nudge.approval.run_id, exc)
                continue
            if run is None:
                continue
            self.teller.observe(run, as_events(nudge.written))
        self.relay.send_owed()  # what the sweep owes people, kept with it (a crash before this loses none)
        return made

    def recover(self, min_age: timedelta = RECOVER_AFTER) -> list[str]:
        """Runs that need a worker (orphaned, decided, or with a command), after bringing Slack in line.

        Sends what the outbox still owes: the cards, results and endings of runs nobody drives
        (their worker died before telling, or Slack was down; once owed `min_age`), and the
        redraws, reminders and follow-ups of approvals. A crash or an outage between the database
        and Slack loses no message.
        """
        self.relay.recover_runs(min_age)
        self.relay.send_owed()
        return self.store.runs_needing_work()

    # -- queries -----------------------------------------------------------------------------

    def get_run(self, run_id: str, *, history: bool = True) -> RunRecord | None:
        """One run; `history=False` for callers that show its status, not its story (one query less)."""
        return self.store.get_run(run_id, history=history)

    def runs_for(self, requester: str, limit: int = 10) -> list[RunRecord]:
        return self.store.list_runs(requester=requester, limit=limit)

    def waiting_on(self, user: str, limit: int = 20) -> list[tuple[RunRecord, ApprovalRecord]]:
        """Pending approvals this user may decide and has not yet, each with its run (without
        history): two queries."""
        pending = self.store.list_approvals(status="pending", limit=limit * 3)
        runs = self.store.runs_by_id([a.run_id for a in pending])
        return [(runs[a.run_id], a) for a in pending if a.run_id in runs and not runs[a.run_id].unreadable
                and not has_voted(a, user)
                and self.approval_refusal(user, runs[a.run_id], a) is None][:limit]

    def approvals_for(self, user: str, limit: int = 20) -> list[ApprovalRecord]:
        """Pending approvals this user may decide."""
        return [approval for _, approval in self.waiting_on(user, limit)]

    def pending_approval(self, run_id: str) -> ApprovalRecord | None:
        """The run's pending approval; of a turn's several calls, the first in the order they were made."""
        found = self.store.list_approvals(status="pending", run_id=run_id, limit=MAX_BATCH_CALLS)
        return min(found, key=lambda a: batch_place(a.key) or 0) if found else None

    def get_approval(self, approval_id: str) -> ApprovalRecord | None:
        return self.store.get_approval(approval_id)

    def timeline(self, run_id: str) -> list[dict[str, Any]]:
        return self.store.timeline(run_id)
