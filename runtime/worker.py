"""A worker driving one run under its lease: the run resumed as an agent on the ledger's ports
(`ledger_ports`), and the request left for it, or the decisions made on it, carried out.

claim lease -> apply a waiting request, or go on -> each step: save (state, history, events, ledger
outcome, approval in one transaction) -> tell people. A side effect goes through the execution
ledger: its approval is consumed and a "started" row written before the tool runs, and the
outcome is saved with the step after it.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import secrets
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from signoff.runtime.agent import Agent, Policy
from signoff.runtime.approval import decider_refusal
from signoff.runtime.approval_policy import ApprovalPolicy
from signoff.runtime.caller_runs import caller_call, run_tools
from signoff.runtime.commands import Cancel, Edit, Extend, Reconcile, RequestAgain, Retry, parse_command
from signoff.runtime.errors import Conflict, IncompatibleState, InvalidTransition
from signoff.runtime.events import command_refused
from signoff.runtime.heartbeat import Heartbeat
from signoff.runtime.judging import Caller
from signoff.runtime.kept_runs import KeptRuns
from signoff.runtime.ledger_ports import LeaseLost, LedgerPorts, PassParts, Session, StoreFailed
from signoff.runtime.people import MayApprove
from signoff.runtime.ports import Store
from signoff.runtime.records import (
    ApprovalRecord,
    GrantRecord,
    RunRecord,
)
from signoff.runtime.relay import Relay
from signoff.runtime.state import TERMINAL
from signoff.runtime.telling import Teller
from signoff.runtime.tool_calls import NotGranted, Outcome, Refused
from signoff.tools.base import Tool, contract_change

if TYPE_CHECKING:
    from signoff.runtime.runner_config import RunnerConfig

log = logging.getLogger("signoff.runner")


class Worker:
    """Drives runs one at a time per call of `execute`, safe to call from several threads and replicas."""

    def __init__(self, store: Store, tools: dict[str, Tool], policies: Callable[[str], Policy],
                 config: RunnerConfig, teller: Teller, relay: Relay, clock: Callable[[], float],
                 may_approve: MayApprove | None = None) -> None:
        self.store, self.tools, self.policies = store, tools, policies
        self.config, self.teller, self.clock = config, teller, clock
        self.parts = PassParts(store, config, teller, relay, clock)
        self.may_approve: MayApprove = may_approve or (lambda user, run, approvers: None)
        self._holding: dict[str, tuple[str, float]] = {}
        """Run id -> the lease owner a write of this runner took it for, and when (by `clock`)."""
        self._holding_lock = threading.Lock()
        self.kept = KeptRuns()
        """The runs this worker let pause, as it left them: a decision's pass resumes from there."""

    def new_owner(self) -> str:
        """A lease owner for one pass: this worker, and the pass, so that two threads of one worker
        exclude each other too."""
        return f"{self.config.worker_id}/{secrets.token_hex(3)}"

    def took(self, run_id: str, owner: str) -> None:
        """A write of this runner took `run_id`'s lease for `owner` (a decision, a new run): the run's
        next `execute` here drives under it, with no claim. Only such writes register a lease, so a
        pass never drives under a lease read off a run (another pass's)."""
        now = self.clock()
        with self._holding_lock:
            # A lease whose pass never came (its caller failed) has lapsed: forget it, not keep it forever.
            lapsed = [run for run, (_, at) in self._holding.items() if now - at > self.config.lease.total_seconds()]
            for run in lapsed:
                del self._holding[run]
            self._holding[run_id] = (owner, now)

    def _redeem(self, run_id: str) -> tuple[str, float] | None:
        with self._holding_lock:
            return self._holding.pop(run_id, None)

    def execute(self, run_id: str, report: Outcome | None = None) -> str | None:
        """Run until the run pauses or ends; None if another worker holds it or it has ended.

        A run whose lease a write of this worker took (a decision, a new run: `took`) is driven
        under that lease, once, with no claim; any other is claimed. Every write the pass makes is
        fenced on its lease. `report`: what came of the call the run handed to its caller, as the
        caller said (`caller_runs`)."""
        lease = self._redeem(run_id)
        run = self._held(run_id, *lease) if lease is not None else None
        owner = lease[0] if run is not None and lease is not None else self.new_owner()
        if run is None:
            run = self.store.claim(run_id, owner, self.config.lease, history=not self.kept.holds(run_id))
        if run is None:
            return None
        run = self._whole(run, owner)
        if run is None:
            return None
        session = Session(run, run.version, owner, report=report)
        status = None
        try:
            with Heartbeat(self.store, run_id, owner, self.config.lease):
                status = self._drive(session)
                return status
        except Conflict as exc:
            log.warning("run %s: %s; another worker will continue it", run_id, exc)
            return None
        except StoreFailed as exc:
            log.warning("run %s: the database failed while starting a call (%s); recovery continues it", run_id, exc)
            return None
        except LeaseLost as exc:
            log.warning("run %s: %s; the worker holding it continues", run_id, exc)
            return None
        finally:
            if status is None:  # the pass failed somewhere: what it kept of the run may not be the run
                self.kept.forget(run_id)
            if not session.released or session.told:
                self.store.release(run_id, owner, told=tuple(session.told))

    def _held(self, run_id: str, owner: str, taken_at: float) -> RunRecord | None:
        """The run (without its history where this worker kept it: `_whole`), if `owner` holds its
        lease still; None if another took it or the run is gone.

        A lease taken more than a quarter of a lease ago is renewed first: the pass may have waited
        in a busy pool for most of the lease the decision took, and its heartbeat's first beat comes
        a third of a lease later, by when another replica could take a lease that lapsed in between.
        One taken just now lasts past that beat, and is spared the write."""
        lease = self.config.lease.total_seconds()
        if self.clock() - taken_at > lease / 4 and not self.store.renew(run_id, owner, self.config.lease):
            return None
        try:
            run = self.store.get_run(run_id, history=not self.kept.holds(run_id))
        except IncompatibleState:
            self.store.release(run_id, owner)  # as a claim does: don't keep it from other workers
            raise
        return run if run is not None and run.lease_owner == owner else None

    def _whole(self, run: RunRecord, owner: str) -> RunRecord | None:
        """`run` with its history: as read, or, read without it (this worker kept the run when it
        let it pause), as kept if that is still the run as stored, else read again."""
        if run.checked is not None:
            return run
        whole = self.kept.whole(run)
        if whole is not None:
            return whole
        try:
            return self.store.get_run(run.run_id)
        except IncompatibleState:
            self.store.release(run.run_id, owner)  # as a claim does: don't keep it from other workers
            raise

    def _drive(self, session: Session) -> str:
        """Drive the run until it pauses or ends; its status. What it owes people of its own before
        its first step (its run message), or left untold when its last worker died, is told first."""
        run = session.run
        told = self.parts.relay.tell_run(run.run_id, run, session.told)
        if told is not None and told.origin != run.origin:
            session.run = run = dataclasses.replace(run, origin=told.origin)
        while True:
            agent = self.agent_for(session)
            self._advance(agent, session)
            if not session.interrupted:
                break
            run = self.store.get_run(run.run_id) or run
            session.reload(run)
        if agent.status not in TERMINAL:  # a run that ended is not resumed
            self.kept.keep(run.run_id, session.version, agent.run_state, agent.state)
        return session.status

    def _advance(self, agent: Agent, session: Session) -> None:
        run = session.run
        # What came of a call its caller started is recorded before any request left for the run
        # (a cancel), which then interrupts the pass and applies: otherwise the request would end
        # the run over a started call, and its outcome would never be recorded, nor asked about.
        if agent.status == "awaiting_caller" and self._from_caller(agent, session):
            pass
        elif run.command is not None:
            self._apply(agent, run.command, session)
        else:
            match agent.status:
                case "idle":
                    agent.start(run.goal)
                case "running":
                    agent.run()
                case "awaiting_approval":
                    self._continue_approval(agent, session)
                    return
        if (agent.status == "awaiting_approval" and agent.run_state.batch is not None and not session.interrupted
                and not session.released):
            # A turn's calls may have been decided while it was busy with others (or before a crash).
            self._continue_approval(agent, session)

    def _from_caller(self, agent: Agent, session: Session) -> bool:
        """Go on from what the caller reported of the call the run handed it; or, with no report, a
        started call whose caller's lease lapsed (recovery brought the run here) goes to a person.
        False: nothing came of it yet (not started, or reported on a call that was not)."""
        pending, report = agent.run_state.pending, session.report
        running = self.store.running_call(session.run.run_id)
        started = pending is not None and running is not None and running[1] == pending.key
        if isinstance(report, Refused | NotGranted) or (report is not None and started):
            agent.caller_reported(report)
            return True
        if report is None and started and pending is not None:
            agent.caller_lost(f"{pending.tool} was started by the program that asked for it, which reported "
                              "no outcome within the call's time limit; it may or may not have taken effect")
            return True
        return False

    def _apply(self, agent: Agent, raw: dict[str, object], session: Session) -> None:
        """Carry out the request left for the run; one it cannot take is dropped and audited."""
        session.clear_command = True
        command = parse_command(raw)
        try:
            match command:
                case Cancel(reason=reason, by=by):
                    agent.cancel(reason or f"cancelled by {by}", by=by)
                case Extend(limits=limits):
                    agent.extend(**limits)
                case Retry():
                    agent.retry()
                case Edit(args=args, by=by, key=key):
                    try:
                        agent.edit(args, by=by, key=key)
                    except ValueError as exc:  # its approval closed as it was left: the call is asked again
                        agent.edit_refused(str(exc), key=key)
                case RequestAgain(by=by):
                    agent.request_again(by=by)
                case Reconcile(action=action, result=result, note=note, by=by):
                    pending = agent.run_state.pending
                    session.retry_key = pending.key if pending is not None else None
                    agent.reconcile(action, result, note, by=by)
                case None:
                    raise InvalidTransition(f"unknown or malformed command {raw.get('op')!r}")
        except (InvalidTransition, ValueError) as exc:  # ValueError: an edit its tool no longer takes
            if session.clear_command:  # nothing was saved, so the command is still there
                refused = command_refused(raw, str(exc))
                self.store.clear_command(session.run.run_id, refused)
                self.teller.observe(session.run, [{**refused, "run_id": session.run.run_id}])

    def _continue_approval(self, agent: Agent, session: Session) -> None:
        """Go on from the decisions made on what the run waits for: its pending call, or each call of
        its turn's several that was decided (in any order), until none is left decided (or the pass
        let go of the run: whoever decides next drives it)."""
        while agent.status == "awaiting_approval" and not session.released:
            state = agent.run_state
            if state.batch is None:
                keys = [state.pending.key] if state.pending is not None else []
            else:
                keys = [call.key for call in state.batch.calls if call.waiting]
            for key in keys:
                approval = self.store.approval_for_key(key)
                if approval is not None and self._go_on_from(agent, approval, key if state.batch else None):
                    break
            else:
                return

    def _go_on_from(self, agent: Agent, approval: ApprovalRecord, key: str | None) -> bool:
        """Act on `approval` if it was decided (or its tool changed since); False if it waits still."""
        changed = self._contract_change(approval, agent.tools)
        if changed is not None:
            agent.reconsider(changed, key=key)
            return True
        match approval.status:
            case "approved" | "consumed":
                agent.decide(True, approval.note or "", by=approval.decided_by,
                             approvals=len(approval.approved_by) or 1, key=key, broke_glass=approval.glass is not None)
            case "denied":
                agent.decide(False, approval.note or "", by=approval.decided_by, key=key)
            case "expired":
                agent.expire("the approval expired; nothing was executed", key=key)
            case _:
                return False
        return True

    def _contract_change(self, approval: ApprovalRecord, tools: Mapping[str, Tool]) -> str | None:
        """Why an approval given but not yet used no longer holds: its tool's contract changed since
        the call was proposed (a deploy in between), so the approver agreed to something else."""
        if approval.status != "approved" or approval.contract is None:
            return None  # not yet decided, already used (a retry after a crash), or recorded before contracts
        return contract_change(approval.tool, approval.contract, tools.get(approval.tool))

    def agent_for(self, session: Session) -> Agent:
        """The run `session` drives, as an agent on the ledger's ports: its model, its tools (a
        caller's run has its one call's), the approval policy in force and its live grants."""
        run = session.run
        caller = caller_call(run)
        try:
            policy = caller.policy() if caller is not None else self.policies(run.model)
        except Exception as exc:  # a bad model spec fails the run visibly instead of crashing the worker
            policy = _failing_policy(exc)
        tools = run_tools(run, self.tools)
        approval_policy = self.config.policy
        # Only a policy that offers grants has any to look up: one query less for every other run.
        grants = (tuple(self.store.live_grants(run.run_id, run.requester))
                  if any(rule.grant is not None for rule in approval_policy.rules) else ())
        return Agent.resume(run.state, policy, tools, checked=run.checked, ports=LedgerPorts(self.parts, session),
                            clock=self.clock,
                            redact_keys=self.config.redact_keys, stall_after=self.config.stall_after,
                            approval_policy=approval_policy, grants=grants,
                            unfit_granters=self._unfit_granters(run, grants, approval_policy),
                            caller=Caller(run.requester, str(run.origin.get("channel") or "")))

    def _unfit_granters(self, run: RunRecord, grants: tuple[GrantRecord, ...],
                        policy: ApprovalPolicy) -> dict[str, str]:
        """By grant id: why its maker may no longer approve calls under its rule as the policy in
        force words it (taken off the approvers, or the run's own requester where the rule no
        longer lets people approve their own runs). The rest of what a grant needs is the loop's."""
        unfit = {}
        for grant in grants:
            rule = policy.rule(grant.rule) if grant.rule is not None else None
            if rule is None or rule.grant is None:
                continue  # the loop finds no rule offering it, and says so: nobody need be asked
            now = policy.requirement(rule)
            reason = decider_refusal(grant.created_by, run.requester, now.approvers, now.allow_self_approval,
                                     functools.partial(self.may_approve, grant.created_by, run))
            if reason:
                unfit[grant.grant_id] = reason
        return unfit


def _failing_policy(exc: Exception) -> Policy:
    def policy(history: list[dict[str, object]]) -> object:
        raise exc

    return policy
