"""The runner: the one place that sequences I/O around the pure agent loop.

load -> claim lease -> step -> save (state, history, events, ledger, approval in one transaction)
-> notify. Side effects go through the execution ledger: the approval is consumed and a
"started" row written before the tool runs, and the outcome is saved with the step after it.
"""

from __future__ import annotations

import functools
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, cast

from signoff.runtime.agent import Policy
from signoff.runtime.approval import (
    IsAmong,
    Unopenable,
    asked_of,
    bound_to,
    decider_refusal,
    decision_refusal,
    offers_grant,
    with_rule,
)
from signoff.runtime.approval_policy import ApprovalPolicy, Ask, Deny, default_policy
from signoff.runtime.batches import MAX_BATCH_CALLS
from signoff.runtime.budget import Budget, extension
from signoff.runtime.commands import (
    Cancel,
    Command,
    Edit,
    Extend,
    Reconcile,
    ReconcileAction,
    RequestAgain,
    Retry,
    request_name,
)
from signoff.runtime.decisions import jsonable
from signoff.runtime.digests import batch_place
from signoff.runtime.errors import IncompatibleState, InvalidTransition
from signoff.runtime.failpoints import Failpoints
from signoff.runtime.judging import Caller, classify, defaulted_of
from signoff.runtime.pending_calls import PendingCall
from signoff.runtime.people import SELF_APPROVAL, MayApprove
from signoff.runtime.ports import Notifier, Observer, Store
from signoff.runtime.records import (
    AlreadyDone,
    ApprovalRecord,
    Counted,
    Decided,
    DecisionOutcome,
    Done,
    Expired,
    GrantRecord,
    Mismatch,
    Missing,
    NotAllowed,
    Nudged,
    Refused,
    RunOutcome,
    RunRecord,
    Voted,
)
from signoff.runtime.requests import call_to_ask_again, checked_edit, waiting_on
from signoff.runtime.rules import (
    CANCEL,
    EDIT,
    EXTEND_BUDGET,
    EXTEND_STALLED,
    RECONCILE,
    REQUEST_AGAIN,
    RETRY,
    CommandRule,
)
from signoff.runtime.schema import REOPENABLE
from signoff.runtime.state import DEFAULT_REDACT_KEYS, new_state, parse_state, redact, secret_names
from signoff.runtime.telling import Teller, skip_unreadable
from signoff.runtime.worker import Worker
from signoff.tools.base import Tool

log = logging.getLogger("signoff.runner")

MAX_GOAL_CHARS = 4000
SELF_REQUEST = "you started this run, so someone else has to decide this for it"
REQUESTER_ONLY = "only the person who started this run can request its call again"
MaySee = Callable[[str, RunRecord], bool]
"""(user, run) -> whether the user may see the run (e.g. a member of its channel), beyond its
requester and the people who may decide it."""


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


@dataclass(frozen=True)
class RunnerConfig:
    """How runs are started and kept: defaults, timings and who may approve their own runs."""

    model: str = "scripted:demo"
    budget: Budget = field(default_factory=Budget)
    approval_ttl: timedelta = timedelta(minutes=30)
    dispatch_window: timedelta = timedelta(minutes=10)
    """How long after an approval its call may still start (busy workers, a restart in between)."""
    lease: timedelta = timedelta(seconds=60)
    worker_id: str = field(default_factory=default_worker_id)
    extend_steps: int = 4
    stall_after: int | None = 3
    """Turns in a row that repeat an earlier call with the same result before a run stops as stalled."""
    allow_self_approval: bool = False
    redact_keys: frozenset[str] = DEFAULT_REDACT_KEYS
    failpoints: Failpoints = field(default_factory=Failpoints)
    approval_policy: ApprovalPolicy | None = None
    """Which calls run, ask or are refused; None: the built-in policy (every side effect asks the
    configured approvers for `approval_ttl`, every read runs)."""

    @functools.cached_property
    def policy(self) -> ApprovalPolicy:
        """The approval policy runs go by."""
        return self.approval_policy or default_policy(ttl=self.approval_ttl,
                                                      allow_self_approval=self.allow_self_approval)


class Runner:
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
        self.worker = Worker(store, tools, policies, self.config, self.teller, time.monotonic, self.may_approve)
        self.may_see = may_see or (lambda user, run: False)

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
        goal = (goal or "").strip()
        if not goal:
            raise ValueError("the goal is empty")
        if len(goal) > MAX_GOAL_CHARS:
            raise ValueError(f"the goal is {len(goal)} characters; the limit is {MAX_GOAL_CHARS}")
        run_id = "run-" + secrets.token_hex(5)
        state = new_state(run_id, (budget or self.config.budget).to_json())
        lease = self.worker.hand_out() if drive else None
        run = self.store.create_run(state, goal=goal, requester=requester, origin=origin or {},
                                    model=model or self.config.model, request_id=request_id,
                                    lease_to=lease, lease=self.config.lease)
        if lease is not None and run.run_id != run_id:
            self.worker.void(lease)  # the earlier run of a replayed request is not this runner's to drive
        elif lease is not None:
            self.worker.took(run_id, lease)
        if run.run_id == run_id:  # not a replayed request's earlier run: nothing was written for that
            self.teller.observe(run, [{"type": "run_created", "run_id": run_id, "goal": goal, "requester": requester,
                                       "origin": run.origin, "model": run.model}])
        return run

    def execute(self, run_id: str) -> str | None:
        """Run until the run pauses or ends; None if another worker holds it or it has ended.

        A run a decision or a new run of this runner took the lease of (`decide(drive=True)`,
        `start_run(drive=True)`) is driven under that lease, once, instead of a claim: the caller
        says only which run to drive, and never handles a lease."""
        return self.worker.execute(run_id)

    # -- people's decisions ----------------------------------------------------------------

    def decide(self, approval_id: str, digest: str, user: str, approved: bool, note: str = "",
               grant: bool = False, drive: bool = False,
               unoffered: Callable[[ApprovalRecord], str | None] | None = None) -> DecisionOutcome:
        """Record one person's decision on one approval; the caller then runs `execute(run_id)`.

        `grant`: approve and allow similar calls, as the approval's rule offers (refused where it
        offers none). `unoffered`: why the surface the decision came from could not have offered it
        (the edge's own check of what it showed; None: it could). `drive`: the caller goes on to
        drive the run (`execute(run_id)`), so the decision also takes the run's lease for this
        runner in its own transaction (`Decided.lease` says it did); one left unused holds the run
        until it expires (`RunnerConfig.lease`)."""
        approval = self.store.get_approval(approval_id)
        if approval is None:
            return Missing("approval")
        if not bound_to(approval, digest):
            return Mismatch("this button no longer matches the request it was posted with")
        refusal = unoffered(approval) if unoffered is not None else None
        if refusal:
            return NotAllowed(refusal)
        run = self.store.get_run(approval.run_id, history=False)
        if run is None:
            return Missing("run")
        reason = self.approval_refusal(user, run, approval)
        if reason:
            return NotAllowed(reason)
        if grant and not (approved and offers_grant(approval)):
            return NotAllowed("this call's rule offers no grant: approve it alone")
        lease = self.worker.hand_out() if drive else None
        outcome = self.store.decide(approval_id, approved=approved, user=user, note=note, digest=digest, grant=grant,
                                    lease_to=lease, lease=self.config.lease)
        if lease is not None and isinstance(outcome, Decided) and outcome.lease == lease:
            self.worker.took(approval.run_id, lease)
        elif lease is not None:
            self.worker.void(lease)
        self.teller.observe(run, _vote_events(outcome, user))
        if isinstance(outcome, Decided):
            self.config.failpoints.hit("after_approval_recorded")
            self.teller.show_approval(run, outcome.approval)
        elif isinstance(outcome, Counted):
            self.teller.show_approval(run, outcome.approval, method="approval_updated")
        elif isinstance(outcome, Expired) and outcome.just_now:
            self.teller.show_approval(run, outcome.approval, method="approval_expired")
        return outcome

    def approval_refusal(self, user: str, run: RunRecord, approval: ApprovalRecord | None = None) -> str | None:
        """Why `user` may not decide `approval` (by the rule that asked for it, and by the rule as
        the policy words it now), or `run`'s requests (extend, retry, reconcile: by the policy's
        defaults), or None if they may."""
        is_among: IsAmong = functools.partial(self.may_approve, user, run)
        if approval is None or approval.asked is None:  # asked before Signoff had policies: by the defaults
            defaults = self.config.policy.defaults
            approvers, allow_self_approval = defaults.approvers, defaults.allow_self_approval
        else:
            approvers, allow_self_approval = asked_of(approval)
        refusal = decider_refusal(user, run.requester, approvers, allow_self_approval, is_among,
                                  self_refusal=SELF_APPROVAL if approval is not None else SELF_REQUEST)
        if approval is None:
            return refusal
        refusal = with_rule(refusal, approval.rule)
        return refusal or self._policy_now_refuses(user, run, approval, is_among)

    def _policy_now_refuses(self, user: str, run: RunRecord, approval: ApprovalRecord,
                            is_among: IsAmong) -> str | None:
        """Why the policy as it is now does not let `user` decide `approval`, or None.

        The file may have changed since the call was asked about (or SIGNOFF_APPROVERS, with a
        restart): a decision must satisfy the rule then and the rule now, so someone taken off
        the approvers cannot decide what was asked of them before.
        """
        tool = self.tools.get(approval.tool)
        if tool is None:
            return None  # the worker refuses the call: its tool is gone
        caller = Caller(run.requester, str(run.origin.get("channel") or ""))
        match classify(self.config.policy, tool, approval.args, caller, run.usage, defaulted_of(approval.asked)):
            case Deny(rule=rule):
                return f"the approval policy now refuses this call (policy rule {rule})"
            case Ask(rule=rule, requirement=now):
                approvers = now.approvers
                if (approval.asked or {}).get("escalated") and now.escalate is not None:
                    approvers += now.escalate.to  # escalated as the rule says: those added may decide
                return with_rule(decider_refusal(user, run.requester, approvers, now.allow_self_approval, is_among),
                                 rule)
        return None

    def unopenable(self, approval: ApprovalRecord, digest: str) -> Unopenable | None:
        """Why a form or a decision on `approval` from a message showing `digest` cannot be taken
        now (None: it may be), as the store would find it by the database's clock: what an edge
        says before it opens a form, without deciding anything."""
        return decision_refusal(approval, digest, self.store.now())

    def visibility_refusal(self, user: str, run: RunRecord) -> str | None:
        """Why `user` may not see `run` (its goal, arguments, answer), or None if they may: its
        requester, anyone who may decide it, and whoever `may_see` admits (its channel's members)."""
        if user == run.requester or self.may_approve(user, run, ()) is None or self.may_see(user, run):
            return None
        return "you are not its requester, one of its approvers or a member of its channel"

    def cancel(self, run_id: str, user: str, reason: str = "", *, shown_version: int | None = None) -> RunOutcome:
        """Ask for the run to end as cancelled; its pending approval is closed at once.

        A call already running is not stopped (`running_call` says which): it finishes, and nothing
        after it runs.
        """
        outcome = self._command(run_id, user, Cancel(reason=reason), CANCEL, requester_may=True,
                                shown_version=shown_version)
        if isinstance(outcome, Done):
            for approval in self.store.list_approvals(run_id=run_id, status="cancelled", limit=5):
                if approval.message and approval.shown_status != approval.status:
                    self.teller.show_approval(outcome.run, approval)
        return outcome

    def edit(self, approval_id: str, digest: str, user: str, args: Any) -> RunOutcome:
        """Change the arguments of a pending call before anyone approves it (people who may decide
        it only). The approval closes as superseded at once and the run's worker asks afresh
        about the edited call: a new approval, which the editor has still to approve like anyone.

        Refused when the arguments are not ones the tool takes (`Refused` naming each problem),
        unchanged, or refused by the policy; and, atomically, when the approval was decided first.
        """
        approval = self.store.get_approval(approval_id)
        if approval is None:
            return Missing("approval")
        if not bound_to(approval, digest):
            return Refused("this form no longer matches the request it was opened for")
        run = self.store.get_run(approval.run_id, history=False)
        if run is None:
            return Missing("run")
        reason = self.approval_refusal(user, run, approval)
        if reason:  # before anything about the call is said
            return NotAllowed(reason)
        tool = self.tools.get(approval.tool)
        if tool is None:
            return Refused(f"tool {approval.tool} is no longer registered")
        state = parse_state(run.state)[0]
        try:  # the edit's own check, answered in the form (a call decided meanwhile: the command says so)
            checked = checked_edit(state, waiting_on(state, approval.key), tool, args)
        except ValueError as exc:
            return Refused(str(exc))
        edited = checked.args
        caller = Caller(run.requester, str(run.origin.get("channel") or ""))
        verdict = classify(self.config.policy, tool, edited, caller, run.usage, checked.defaulted)
        if isinstance(verdict, Deny):
            return Refused(f"the approval policy refuses the edited call (policy rule {verdict.rule}: "
                           f"{verdict.reason})")
        outcome = self._command(run.run_id, user, Edit(approval_id=approval_id, digest=digest, args=edited,
                                                       key=approval.key), EDIT, approval=approval)
        if isinstance(outcome, Done):
            superseded = self.store.get_approval(approval_id)
            if superseded is not None and superseded.message:
                self.teller.show_approval(outcome.run, superseded)
        return outcome

    def extend(self, run_id: str, user: str, *, shown_version: int | None = None) -> RunOutcome:
        """Raise the budget that ran out by the configured increment and continue (approvers only);
        a stalled run goes on with its budget as it is, its repeats so far forgiven."""
        run = self.store.get_run(run_id, history=False)
        if run is None:
            return Missing("run")
        if run.status == "stalled":
            return self._command(run_id, user, Extend(), EXTEND_STALLED,
                                 shown_version=shown_version)
        if run.status != "budget_exhausted":
            return self._stale(run, shown_version) or Refused(f"run {run_id} is {run.status}, not out of budget")
        limit = (run.stop or {}).get("budget", "max_steps")
        limits = {limit: extension(limit, run.budget.get(limit) or 0, self.config.extend_steps)}
        return self._command(run_id, user, Extend(limits=limits), EXTEND_BUDGET,
                             shown_version=shown_version)

    def retry(self, run_id: str, user: str, *, shown_version: int | None = None) -> RunOutcome:
        """Continue a failed run from its last checkpoint."""
        return self._command(run_id, user, Retry(), RETRY, requester_may=True,
                             shown_version=shown_version)

    def request_again(self, run_id: str, user: str, *, shown_version: int | None = None) -> RunOutcome:
        """Ask again about the call of a run that expired with nobody deciding it (its requester
        only): the run's worker opens a fresh approval for the same call and key, with a fresh time
        limit, under the policy as it is now, and the run goes on from where it paused."""
        run = self.store.get_run(run_id, history=False)
        if run is None:
            return Missing("run")
        if user != run.requester:
            return NotAllowed(REQUESTER_ONLY)
        if run.status in REOPENABLE:  # said now, not only by the worker that would refuse it
            pending = run.state.get("pending")
            caller = Caller(run.requester, str(run.origin.get("channel") or ""))
            try:
                call_to_ask_again(PendingCall.model_validate(pending) if pending else None, self.tools,
                                  lambda tool, args: classify(self.config.policy, tool, args, caller, run.usage))
            except InvalidTransition as exc:
                return Refused(str(exc))
        return self._command(run_id, user, RequestAgain(), REQUEST_AGAIN, requester_may=True,
                             shown_version=shown_version)

    def reconcile(self, run_id: str, user: str, action: str, result: Any = None, note: str = "", *,
                  shown_version: int | None = None) -> RunOutcome:
        """Settle a call with an unknown outcome: `done` (it happened), `retry` (run it again) or `abort`."""
        if action not in ("done", "retry", "abort"):
            return Refused("choose done, retry or abort")
        return self._command(run_id, user, Reconcile(action=cast(ReconcileAction, action), result=jsonable(result), note=note), RECONCILE,
                             shown_version=shown_version)

    def _command(self, run_id: str, user: str, command: Command, rule: CommandRule,
                 requester_may: bool = False, shown_version: int | None = None,
                 approval: ApprovalRecord | None = None) -> RunOutcome:
        """Leave `command` for the run's worker, if `user` may ask it (of `approval`, when it is about one)."""
        run = self.store.get_run(run_id, history=False)
        if run is None:
            return Missing("run")
        if not (requester_may and user == run.requester):
            reason = self.approval_refusal(user, run, approval)
            if reason:
                return NotAllowed(reason)
        command = command.model_copy(update={"by": user, "shown_version": shown_version})
        audited = self._audited(command.to_json(), approval)
        refusal = self.store.set_command(run_id, command.to_json(), rule, audited)
        if refusal is None:
            self.teller.observe(run, [{"type": "command_recorded", "run_id": run_id, **audited}])
            return Done(self.store.get_run(run_id, history=False) or run)
        if shown_version is not None and refusal.waiting is not None:
            return AlreadyDone(request_name(refusal.waiting), refusal.waiting.get("by"))
        return (self._stale(run, shown_version) if shown_version is not None else None) or Refused(refusal.reason)

    def _audited(self, command: dict[str, Any], approval: ApprovalRecord | None) -> dict[str, Any]:
        """`command` as the audit log and the observers keep it: an edit's arguments with the
        tool's secrets redacted (the command itself keeps them: the worker runs what was typed)."""
        if approval is None or "args" not in command:
            return command
        secrets = secret_names(self.tools.get(approval.tool), configured=self.config.redact_keys)
        return {**command, "args": redact(command["args"], secrets)}

    def _stale(self, run: RunRecord, shown_version: int | None) -> AlreadyDone | Refused | None:
        """What became of a button pressed on a message showing the run at `shown_version`, if the
        run has moved on since: the request made from that message, or that it is out of date."""
        if shown_version is None:
            return None
        made = self.store.command_shown_at(run.run_id, shown_version)
        if made is not None:
            command, at = made
            return AlreadyDone(request_name(command), command.get("by"), at)
        waiting = run.command
        if waiting is not None and waiting.get("shown_version") == shown_version:
            return AlreadyDone(request_name(waiting), waiting.get("by"))
        if run.version != shown_version:
            return Refused(f"this message is out of date: the run is now {run.status.replace('_', ' ')}")
        return None

    def revoke_grant(self, grant_id: str, user: str) -> RunOutcome:
        """End a grant at once: its next call is asked about. Its maker, or anyone who may decide
        the approval it was made on, may revoke it."""
        grant = self.store.get_grant(grant_id)
        if grant is None:
            return Missing("grant")
        if user != grant.created_by:
            approval = self.store.get_approval(grant.approval_id)
            run = self.store.get_run(grant.run_id, history=False)
            if approval is None or run is None:
                return Missing("run")
            reason = self.approval_refusal(user, run, approval)
            if reason:
                return NotAllowed(reason)
        revoked = self.store.revoke_grant(grant_id, user)
        run = self.store.get_run(grant.run_id, history=False)
        if revoked is None or run is None:
            return Missing("grant")
        if revoked.revoked_by != user:
            return AlreadyDone("revoke", revoked.revoked_by, revoked.revoked_at)
        self.teller.observe(run, [{"type": "grant_revoked", "run_id": run.run_id, "grant_id": grant_id, "by": user}])
        return Done(run, {"grant_id": grant_id})

    def grants_for(self, user: str, limit: int = 20) -> list[GrantRecord]:
        """Grants in force that `user` made or that cover their runs, newest first."""
        return [g for g in self.store.list_grants(live=True, limit=limit * 3)
                if user in (g.created_by, g.requester)][:limit]

    def running_call(self, run_id: str) -> tuple[str, str] | None:
        """(tool, key) of the run's side effect that is running now (started, no outcome yet)."""
        return self.store.running_call(run_id)

    # -- the clock's jobs --------------------------------------------------------------------

    def expire_due(self, end_run: Callable[[str], Any] | None = None) -> list[ApprovalRecord]:
        """Expire every overdue approval, tell people, and end those runs as expired.

        `end_run(run_id)` ends each run; by default here and now (`execute`), while a server
        hands them to its worker pool so one sweep of thousands does not hold the clock.
        """
        expired = self.store.expire_due()
        for approval in expired:
            try:
                run = self.store.get_run(approval.run_id, history=False)
            except IncompatibleState as exc:
                skip_unreadable(approval.run_id, exc)
                continue
            if run is not None:
                self.teller.observe(run, [_expiry_event(approval)])
                self.teller.show_approval(run, approval, method="approval_expired")
            (end_run or self.execute)(approval.run_id)
        return expired

    def nudge_due(self) -> list[Nudged]:
        """Remind the people of approvals half way (or as their rule says) to expiry, and add and
        tell the escalation's people, each once; the schedule is the database's."""
        made = self.store.nudge_due()
        for nudge in made:
            try:
                run = self.store.get_run(nudge.approval.run_id, history=False)
            except IncompatibleState as exc:
                skip_unreadable(nudge.approval.run_id, exc)
                continue
            if run is None:
                continue
            self.teller.observe(run, [{"type": "approval_escalated" if kind == "escalate" else "approval_reminded",
                                       "run_id": run.run_id, "approval_id": nudge.approval.approval_id,
                                       "key": nudge.approval.key,
                                       **({"added": list(nudge.added)} if kind == "escalate" else {})}
                                      for kind in nudge.kinds])
            if "escalate" in nudge.kinds:
                self.teller.notify("approval_escalated", run, nudge.approval, list(nudge.added))
                self.teller.show_approval(run, nudge.approval, method="approval_updated")
            if "remind" in nudge.kinds:
                self.teller.notify("approval_reminded", run, nudge.approval, nudge.first_reminder)
        return made

    def recover(self, min_age: timedelta = timedelta(seconds=10)) -> list[str]:
        """Runs that need a worker (orphaned, decided, or with a command), after bringing Slack in line.

        Re-posts approvals whose post failed, updates messages that still show an outcome other
        than the stored one (live buttons on a decided approval), and re-tells run endings nobody
        heard of: a crash or an outage between the database and Slack loses no message.
        """
        self.teller.resync(min_age)
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
                and all(vote.user != user for vote in a.votes)
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


# -- what the store wrote, for the observer ----------------------------------------------------------
# The store writes these events in the transaction that decides; the runner knows from the outcome
# what they were, so the observer hears of them without a read. Each also carries what a reader of
# one event needs to make sense of it: the tool, the rule, and how long the approval waited.


def _vote_events(outcome: Voted, user: str) -> list[dict[str, Any]]:
    """The events `ApprovalStore.decide` wrote for `outcome` (none for a decision it did not count)."""
    match outcome:
        case Decided(approval=approval, grant=grant):
            events = [{"type": "approval_recorded", **_approval_fields(approval),
                       "approved": approval.status == "approved", "by": user, "note": approval.note or "",
                       "approvals": len(approval.approved_by), "quorum": approval.quorum,
                       "waited_seconds": _waited(approval)}]
            if grant is not None:
                events.append({"type": "grant_created", "run_id": approval.run_id, "grant_id": grant.grant_id,
                               "approval_id": approval.approval_id, "by": user, "tool": grant.tool,
                               "rule": grant.rule, "scope": grant.scope, "expires_at": grant.expires_at.isoformat()})
            return events
        case Counted(approval=approval):
            return [{"type": "approval_vote_recorded", **_approval_fields(approval), "approved": True, "by": user,
                     "approvals": len(approval.approved_by), "quorum": approval.quorum}]
        case Expired(approval=approval, just_now=True):
            return [{**_expiry_event(approval), "noticed_by": user}]
    return []


def _expiry_event(approval: ApprovalRecord) -> dict[str, Any]:
    return {"type": "approval_expired", **_approval_fields(approval), "waited_seconds": _waited(approval)}


def _approval_fields(approval: ApprovalRecord) -> dict[str, Any]:
    return {"run_id": approval.run_id, "approval_id": approval.approval_id, "key": approval.key,
            "tool": approval.tool, "rule": approval.rule}


def _waited(approval: ApprovalRecord) -> float:
    """Seconds from the request to its decision (or its expiry, however late a sweep noticed it), by
    the store's clock."""
    until = approval.decided_at or approval.expires_at
    if approval.status == "expired":
        until = min(until, approval.expires_at)
    return round(max((until - approval.requested_at).total_seconds(), 0.0), 3)
