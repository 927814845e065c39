"""The runner: the one place that sequences I/O around the pure agent loop.

load -> claim lease -> step -> save (state, history, events, ledger, approval in one transaction)
-> notify. Side effects go through the execution ledger: the approval is consumed and a
"started" row written before the tool runs, and the outcome is saved with the step after it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import secrets
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from signoff.runtime.agent import Agent, Checkpoint, Policy
from signoff.runtime.budget import Budget
from signoff.runtime.errors import (
    Conflict,
    DispatchRefused,
    IncompatibleState,
    InvalidTransition,
    OutcomeUnknown,
)
from signoff.runtime.failpoints import Failpoints
from signoff.runtime.ports import Notifier, RunStore, Store
from signoff.runtime.records import (
    AlreadyDone,
    ApprovalRecord,
    Decided,
    DecisionOutcome,
    Done,
    ExecutionStart,
    Existing,
    Expired,
    Fresh,
    Mismatch,
    Missing,
    NotAllowed,
    NotDispatchable,
    Refused,
    Restart,
    RunOutcome,
    RunRecord,
)
from signoff.runtime.rules import (
    CANCEL,
    EXTEND_BUDGET,
    EXTEND_STALLED,
    RECONCILE,
    RETRY,
    CommandRule,
    step_write,
)
from signoff.runtime.state import DEFAULT_REDACT_KEYS, TERMINAL, new_state
from signoff.runtime.telling import ENDINGS, Teller, skip_unreadable
from signoff.runtime.tool_calls import run_tool
from signoff.tools.base import Tool, ToolFailed

log = logging.getLogger("signoff.runner")

MAX_GOAL_CHARS = 4000
MayApprove = Callable[[str, RunRecord], str | None]
"""(user, run) -> None if the user may approve the run's side effects, else the reason they may not."""
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


class _StoreFailed(BaseException):
    """The database failed while a call was being started.

    A `BaseException`, like `FailpointHit`, so the agent's handler for tool errors lets it pass:
    the call did not run, and the tool must not be blamed. The worker stops; recovery continues.
    """


class _LeaseLost(BaseException):
    """Another worker holds the run now; this one stops without starting or saving anything.

    A `BaseException` for the same reason as `_StoreFailed`: it is not the tool's failure.
    """


class _Interrupted(Exception):
    """A person left a command for this run while it ran; stop and apply it."""


@dataclass
class _Session:
    """What one worker knows about the run it drives."""

    run: RunRecord
    version: int
    owner: str
    """The lease holder: this worker and this pass, so two threads of one worker exclude each other too."""
    clear_command: bool = False
    retry_key: str | None = None
    changed: bool = False


class Runner:
    """Starts, continues and settles runs; every method is safe to call from several threads and replicas."""

    def __init__(self, store: Store, tools: dict[str, Tool], policies: Callable[[str], Policy],
                 config: RunnerConfig | None = None, notifier: Notifier | None = None,
                 may_approve: MayApprove | None = None, may_see: MaySee | None = None) -> None:
        self.store = store
        self.tools = tools
        self.policies = policies
        self.config = config or RunnerConfig()
        self.teller = Teller(store, notifier, failpoints=self.config.failpoints,
                             worker_id=self.config.worker_id, lease=self.config.lease)
        self.may_approve = may_approve or (lambda user, run: None)
        self.may_see = may_see or (lambda user, run: False)

    # -- starting and driving runs ---------------------------------------------------------

    def start_run(self, goal: str, requester: str, origin: dict[str, Any] | None = None,
                  model: str | None = None, budget: Budget | None = None,
                  request_id: str | None = None) -> RunRecord:
        """Record a new run (status idle); `execute` runs it.

        With a `request_id` (e.g. Slack's trigger_id) a replayed request returns the run it
        started the first time, on whichever replica it lands.
        """
        goal = (goal or "").strip()
        if not goal:
            raise ValueError("the goal is empty")
        if len(goal) > MAX_GOAL_CHARS:
            raise ValueError(f"the goal is {len(goal)} characters; the limit is {MAX_GOAL_CHARS}")
        run_id = "run-" + secrets.token_hex(5)
        state = new_state(run_id, (budget or self.config.budget).to_json())
        return self.store.create_run(state, goal=goal, requester=requester, origin=origin or {},
                                     model=model or self.config.model, request_id=request_id)

    def execute(self, run_id: str) -> str | None:
        """Run until the run pauses or ends; None if another worker holds it or it has ended."""
        owner = f"{self.config.worker_id}/{secrets.token_hex(3)}"
        run = self.store.claim(run_id, owner, self.config.lease)
        if run is None:
            return None
        heartbeat = _Heartbeat(self.store, run_id, owner, self.config.lease)
        told = None
        try:
            with heartbeat:
                status, told = self._drive(run, owner)
                return status
        except Conflict as exc:
            log.warning("run %s: %s; another worker will continue it", run_id, exc)
            return None
        except _StoreFailed as exc:
            log.warning("run %s: the database failed while starting a call (%s); recovery continues it", run_id, exc)
            return None
        except _LeaseLost as exc:
            log.warning("run %s: %s; the worker holding it continues", run_id, exc)
            return None
        finally:
            self.store.release(run_id, owner, shown_status=told)

    def _drive(self, run: RunRecord, owner: str) -> tuple[str, str | None]:
        """Drive the run until it pauses or ends: its status, and the ending people were told, if any."""
        session = _Session(run, run.version, owner)
        while True:
            if not run.origin.get("ts"):
                run = self.teller.announce(run)
                session.run = run
            agent = self._agent(run, session)
            try:
                self._advance(agent, run, session)
            except _Interrupted:
                run = self.store.get_run(run.run_id) or run
                session = _Session(run, run.version, owner, changed=session.changed)
                continue
            break
        final = self.store.get_run(run.run_id, history=False) or run
        if not session.changed:
            return final.status, None
        if final.status in ENDINGS and final.status != "done":  # a stopped run's message shows its last steps
            final = self.store.get_run(run.run_id) or final
        return final.status, self.teller.tell_end(final, remember=False)

    def _advance(self, agent: Agent, run: RunRecord, session: _Session) -> None:
        command = run.command
        if command is not None:
            self._apply(agent, command, session)
            return
        match agent.status:
            case "idle":
                agent.start(run.goal)
            case "running":
                agent.run()
            case "awaiting_approval":
                self._continue_approval(agent)

    def _apply(self, agent: Agent, command: dict[str, Any], session: _Session) -> None:
        session.clear_command = True
        by = command.get("by")
        try:
            match command["op"]:
                case "cancel":
                    agent.cancel(command.get("reason") or f"cancelled by {by}", by=by)
                case "extend":
                    agent.extend(**command["limits"])
                case "retry":
                    agent.retry()
                case "reconcile":
                    session.retry_key = (agent.state.get("pending") or {}).get("key")
                    agent.reconcile(command["action"], command.get("result"), command.get("note", ""), by=by)
                case other:
                    raise InvalidTransition(f"unknown command {other!r}")
        except InvalidTransition as exc:
            if session.clear_command:  # nothing was saved, so the command is still there
                self.store.clear_command(agent.state["run_id"], {"type": "command_refused", "reason": str(exc),
                                                                 **command})

    def _continue_approval(self, agent: Agent) -> None:
        pending = agent.state["pending"]
        approval = self.store.approval_for_key(pending["key"])
        if approval is None:
            return
        changed = self._contract_change(approval)
        if changed is not None:
            agent.reconsider(changed)
            return
        match approval.status:
            case "approved" | "consumed":
                agent.decide(True, approval.note or "", by=approval.decided_by)
            case "denied":
                agent.decide(False, approval.note or "", by=approval.decided_by)
            case "expired":
                agent.expire("the approval expired; nothing was executed")

    def _contract_change(self, approval: ApprovalRecord) -> str | None:
        """Why an approval given but not yet used no longer holds: its tool's contract changed since
        the call was proposed (a deploy in between), so the approver agreed to something else."""
        tool = self.tools.get(approval.tool)
        if approval.status != "approved" or approval.contract is None:
            return None  # not yet decided, already used (a retry after a crash), or recorded before contracts
        if tool is None:
            return f"{approval.tool} is no longer registered since this call was proposed"
        if tool.contract == approval.contract:
            return None
        return (f"{approval.tool} changed since this call was proposed (contract {approval.contract} is now "
                f"{tool.contract}: its description, arguments, flags or time limit differ from what was approved)")

    def _agent(self, run: RunRecord, session: _Session) -> Agent:
        try:
            policy = self.policies(run.model)
        except Exception as exc:  # a bad model spec fails the run visibly instead of crashing the worker
            policy = _failing_policy(exc)
        return Agent.resume(
            run.state, policy, self.tools,
            executor=lambda tool, args, key: self._dispatch(run.run_id, session, tool, args, key),
            on_checkpoint=lambda checkpoint: self._save(session, checkpoint),
            redact_keys=self.config.redact_keys, stall_after=self.config.stall_after,
        )

    def _dispatch(self, run_id: str, session: _Session, tool: Tool, args: dict[str, Any], key: str) -> Any:
        """The executor: read-only tools just run; side effects go through approval and ledger."""
        if not tool.side_effect:
            return run_tool(tool, args, key)
        restart: Restart | None = ("requested" if session.retry_key == key
                                   else "idempotent" if tool.idempotent else None)
        start = self._begin(run_id, session, tool, args, key, restart=restart)
        match start:
            case NotDispatchable(reason=reason, status=status):
                raise DispatchRefused(reason, status)
            case Existing(status="started"):
                raise OutcomeUnknown(f"{tool.name} ({key}) started earlier and recorded no outcome; "
                                     "it may or may not have taken effect")
            case Existing(status="succeeded", result=result):
                return result
            case Existing(error=error):
                raise ToolFailed(error or "failed earlier")
            case Fresh(version=version):
                if version is not None:  # the retry request was used up with the start, in one transaction
                    session.version, session.clear_command = version, False
        self.config.failpoints.hit("after_ledger_row")
        result = run_tool(tool, args, key)
        self.config.failpoints.hit("after_tool")
        return result

    def _begin(self, run_id: str, session: _Session, tool: Tool, args: dict[str, Any], key: str, *,
               restart: Restart | None) -> ExecutionStart:
        try:
            return self.store.begin_execution(run_id, tool.name, args, key, owner=session.owner,
                                              lease=self.config.lease, dispatch_window=self.config.dispatch_window,
                                              restart=restart)
        except Conflict as exc:
            raise _LeaseLost(str(exc)) from exc
        except Exception as exc:  # the database failed, not the tool: the agent must not record a tool failure
            raise _StoreFailed(f"{type(exc).__name__}: {exc}") from exc

    def _save(self, session: _Session, checkpoint: Checkpoint) -> None:
        """on_checkpoint: commit the step, then tell people about it."""
        self.config.failpoints.hit("after_decision")
        run = session.run
        try:
            saved = self.store.save_step(run.run_id, owner=session.owner, version=session.version,
                                         checkpoint=checkpoint, write=step_write(checkpoint, self.config.approval_ttl),
                                         lease=self.config.lease, clear_command=session.clear_command)
        except Conflict:
            if checkpoint.execution is not None:
                self.store.complete_execution(checkpoint.execution)
            raise
        session.version, session.clear_command, session.changed = saved.version, False, True
        self.config.failpoints.hit("after_checkpoint")
        snapshot = dataclasses.replace(run, status=checkpoint.state["status"], state=checkpoint.state,
                                       version=saved.version)
        for entry in checkpoint.new_history:
            if entry["role"] == "tool":
                self.teller.tool_result(snapshot, entry)
        if saved.approval is not None:
            self.teller.post_approval(snapshot, saved.approval)
        for approval in saved.cancelled:
            self.teller.show_approval(snapshot, approval)
        if saved.command is not None and checkpoint.state["status"] not in TERMINAL:
            raise _Interrupted()

    # -- people's decisions ----------------------------------------------------------------

    def decide(self, approval_id: str, digest: str, user: str, approved: bool, note: str = "") -> DecisionOutcome:
        """Record one person's decision on one approval; the caller then runs `execute(run_id)`."""
        approval = self.store.get_approval(approval_id)
        if approval is None:
            return Missing("approval")
        if digest != approval.digest:
            return Mismatch("this button no longer matches the request it was posted with")
        run = self.store.get_run(approval.run_id, history=False)
        if run is None:
            return Missing("run")
        reason = self.approval_refusal(user, run)
        if reason:
            return NotAllowed(reason)
        outcome = self.store.decide(approval_id, approved=approved, user=user, note=note, digest=digest)
        if isinstance(outcome, Decided):
            self.config.failpoints.hit("after_approval_recorded")
            self.teller.show_approval(run, outcome.approval)
        elif isinstance(outcome, Expired) and outcome.just_now:
            self.teller.show_approval(run, outcome.approval, method="approval_expired")
        return outcome

    def approval_refusal(self, user: str, run: RunRecord) -> str | None:
        """Why `user` may not approve `run`'s side effects, or None if they may."""
        if user == run.requester and not self.config.allow_self_approval:
            return "you started this run, so someone else has to approve its side effects"
        return self.may_approve(user, run)

    def visibility_refusal(self, user: str, run: RunRecord) -> str | None:
        """Why `user` may not see `run` (its goal, arguments, answer), or None if they may: its
        requester, anyone who may decide it, and whoever `may_see` admits (its channel's members)."""
        if user == run.requester or self.may_approve(user, run) is None or self.may_see(user, run):
            return None
        return "you are not its requester, one of its approvers or a member of its channel"

    def cancel(self, run_id: str, user: str, reason: str = "", *, shown_version: int | None = None) -> RunOutcome:
        """Ask for the run to end as cancelled; its pending approval is closed at once.

        A call already running is not stopped (`running_call` says which): it finishes, and nothing
        after it runs.
        """
        outcome = self._command(run_id, user, {"op": "cancel", "reason": reason}, CANCEL, requester_may=True,
                                shown_version=shown_version)
        if isinstance(outcome, Done):
            for approval in self.store.list_approvals(run_id=run_id, status="cancelled", limit=5):
                if approval.message and approval.shown_status != approval.status:
                    self.teller.show_approval(outcome.run, approval)
        return outcome

    def extend(self, run_id: str, user: str, *, shown_version: int | None = None) -> RunOutcome:
        """Raise the budget that ran out by the configured increment and continue (approvers only);
        a stalled run goes on with its budget as it is, its repeats so far forgiven."""
        run = self.store.get_run(run_id, history=False)
        if run is None:
            return Missing("run")
        if run.status == "stalled":
            return self._command(run_id, user, {"op": "extend", "limits": {}}, EXTEND_STALLED,
                                 shown_version=shown_version)
        if run.status != "budget_exhausted":
            return self._stale(run, shown_version) or Refused(f"run {run_id} is {run.status}, not out of budget")
        limit = (run.stop or {}).get("budget", "max_steps")
        current = run.budget.get(limit) or 0
        bump = self.config.extend_steps if limit in ("max_steps", "max_tool_calls") else current * 0.5
        limits = {limit: type(current)(current + bump) if current else bump}
        return self._command(run_id, user, {"op": "extend", "limits": limits}, EXTEND_BUDGET,
                             shown_version=shown_version)

    def retry(self, run_id: str, user: str, *, shown_version: int | None = None) -> RunOutcome:
        """Continue a failed run from its last checkpoint."""
        return self._command(run_id, user, {"op": "retry"}, RETRY, requester_may=True,
                             shown_version=shown_version)

    def reconcile(self, run_id: str, user: str, action: str, result: Any = None, note: str = "", *,
                  shown_version: int | None = None) -> RunOutcome:
        """Settle a call with an unknown outcome: `done` (it happened), `retry` (run it again) or `abort`."""
        if action not in ("done", "retry", "abort"):
            return Refused("choose done, retry or abort")
        return self._command(run_id, user, {"op": "reconcile", "action": action, "result": result, "note": note},
                             RECONCILE, shown_version=shown_version)

    def _command(self, run_id: str, user: str, command: dict[str, Any], rule: CommandRule,
                 requester_may: bool = False, shown_version: int | None = None) -> RunOutcome:
        run = self.store.get_run(run_id, history=False)
        if run is None:
            return Missing("run")
        if not (requester_may and user == run.requester):
            reason = self.approval_refusal(user, run)
            if reason:
                return NotAllowed(reason)
        if shown_version is not None:
            command = {**command, "shown_version": shown_version}
        refusal = self.store.set_command(run_id, {**command, "by": user}, rule)
        if refusal is None:
            return Done(self.store.get_run(run_id, history=False) or run)
        if shown_version is not None and refusal.waiting is not None:
            return AlreadyDone(_request_name(refusal.waiting), refusal.waiting.get("by"))
        return (self._stale(run, shown_version) if shown_version is not None else None) or Refused(refusal.reason)

    def _stale(self, run: RunRecord, shown_version: int | None) -> AlreadyDone | Refused | None:
        """What became of a button pressed on a message showing the run at `shown_version`, if the
        run has moved on since: the request made from that message, or that it is out of date."""
        if shown_version is None:
            return None
        made = self.store.command_shown_at(run.run_id, shown_version)
        if made is not None:
            command, at = made
            return AlreadyDone(_request_name(command), command.get("by"), at)
        waiting = run.command
        if waiting is not None and waiting.get("shown_version") == shown_version:
            return AlreadyDone(_request_name(waiting), waiting.get("by"))
        if run.version != shown_version:
            return Refused(f"this message is out of date: the run is now {run.status.replace('_', ' ')}")
        return None

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
                self.teller.show_approval(run, approval, method="approval_expired")
            (end_run or self.execute)(approval.run_id)
        return expired

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
        """Pending approvals this user may decide, each with its run (without history): two queries."""
        pending = self.store.list_approvals(status="pending", limit=limit * 3)
        runs = self.store.runs_by_id([a.run_id for a in pending])
        return [(runs[a.run_id], a) for a in pending if a.run_id in runs and not runs[a.run_id].unreadable
                and self.approval_refusal(user, runs[a.run_id]) is None][:limit]

    def approvals_for(self, user: str, limit: int = 20) -> list[ApprovalRecord]:
        """Pending approvals this user may decide."""
        return [approval for _, approval in self.waiting_on(user, limit)]

    def pending_approval(self, run_id: str) -> ApprovalRecord | None:
        found = self.store.list_approvals(status="pending", run_id=run_id, limit=1)
        return found[0] if found else None

    def get_approval(self, approval_id: str) -> ApprovalRecord | None:
        return self.store.get_approval(approval_id)

    def timeline(self, run_id: str) -> list[dict[str, Any]]:
        return self.store.timeline(run_id)


def _failing_policy(exc: Exception) -> Policy:
    def policy(history: list[dict[str, Any]]) -> Any:
        raise exc

    return policy


class _Heartbeat:
    """Renews the run's lease while a worker drives it, so a long tool call is not taken for a crash."""

    def __init__(self, store: RunStore, run_id: str, owner: str, lease: timedelta) -> None:
        self._store, self._run_id, self._owner, self._lease = store, run_id, owner, lease
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"lease-{run_id}", daemon=True)

    def _beat(self) -> None:
        interval = max(self._lease.total_seconds() / 3, 0.05)
        while not self._stop.wait(interval):
            try:
                if not self._store.renew(self._run_id, self._owner, self._lease):
                    return
            except Exception as exc:  # a database hiccup: the next beat tries again
                log.warning("run %s: lease renewal failed: %s", self._run_id, exc)

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def _request_name(command: dict[str, Any]) -> str:
    """`extend`, `cancel`, `retry` or `reconcile.<action>`: what a person asked of a run."""
    op = str(command.get("op"))
    return f"{op}.{command.get('action')}" if op == "reconcile" else op
