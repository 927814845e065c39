"""A person's requests of a run, as transitions: start, approve or deny, reconsider, extend, retry,
reconcile, cancel, expire. Pure: each takes the state and returns the `loop.Step` it leads to, or
raises `InvalidTransition` (or `ValueError` for a bad argument) and changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from signoff.runtime.approval_policy import Allow, Ask, Deny, Verdict
from signoff.runtime.budget import Budget
from signoff.runtime.call_events import (
    AfterEdit,
    ApprovalDecided,
    ApprovalReopened,
    ApprovalTimedOut,
    AskedAgain,
    CallAllowedByRule,
    CallDeniedByRule,
    CallEdited,
    CallReconsidered,
    EditRefused,
    Reconciled,
    Reconsidered,
    RequestedAgain,
)
from signoff.runtime.call_outcomes import observe, record_execution, refuse, settle
from signoff.runtime.decisions import jsonable
from signoff.runtime.durations import spoken
from signoff.runtime.edits import argument_changes, checked_edit
from signoff.runtime.effects import AskMoreOf, CallChanged, Overruled
from signoff.runtime.errors import InvalidTransition
from signoff.runtime.history import ErrorKind, Goal
from signoff.runtime.judging import (
    Context,
    ask_approval,
    asked_by,
    defaulted_of,
    denied_by_rule,
    granted,
)
from signoff.runtime.loop import CallModel, Draft, RunTool, Step
from signoff.runtime.loop_events import BudgetExtended, Retried, RunStarted
from signoff.runtime.pending_calls import Edited, PendingCall
from signoff.runtime.schema import TERMINAL, BudgetLimits, RunState
from signoff.tools.base import Tool


def start(state: RunState, goal: str) -> Step:
    """Record the goal; the run then asks the model."""
    if state.status != "idle":
        raise InvalidTransition(f"run {state.run_id} already started ({state.status})")
    if not isinstance(goal, str) or not goal.strip():
        raise ValueError("the goal must be a non-empty string")
    draft = Draft(state)
    draft.append(Goal(role="user", content=goal))
    draft.evolve(goal=goal, status="running")
    draft.record(RunStarted(goal=goal, budget=state.budget))
    return draft.then(CallModel())


def decide(state: RunState, context: Context, approved: bool, note: str = "", by: str | None = None,
           approvals: int = 1, key: str | None = None, broke_glass: bool = False) -> Step:
    """Approve (run exactly the pending call, once, with its key) or deny (tell the model
    `denied by human: <note>`) the pending call, or (`key`) one of its turn's calls still waiting.

    `approvals`: how many distinct allowed people approved it. The policy is asked again first, and
    the stricter of then and now holds: a call it now denies is refused, and one it now asks more
    approvals for than were given waits for them. `broke_glass`: one person approved it alone,
    breaking the glass, which stands while the policy still offers that for the call.
    """
    pending = _awaited(state, key)
    draft = Draft(state)
    if approved:
        overruled = _overruled(draft, context, pending, approvals, broke_glass)
        if overruled is not None:
            return overruled
    draft.record(ApprovalDecided(key=pending.key, tool=pending.tool, approved=approved, by=by, note=note,
                                 approvals=approvals, break_glass=broke_glass))
    draft.evolve(status="running")
    if approved:
        return _run(draft, context, pending)
    settle(draft, pending, "denied")
    observe(draft, pending, error=f"denied by human: {note.strip() or 'no reason given'}", kind="denied")
    draft.evolve(pending=None)
    return draft.go_on()


def reconsider(state: RunState, context: Context, reason: str, key: str | None = None) -> Step:
    """The pending call's tool changed since it was proposed (a deploy in between), so the approval
    given for it no longer holds: validate the call again under the tool as it is now.

    Still valid, it is asked about afresh (a new approval, same key); no longer valid, the model is
    told why and goes on; become read-only, it runs. `reason` says what changed.
    """
    pending = _awaited(state, key)
    tool = context.tools.get(pending.tool)
    draft = Draft(state)
    draft.record(CallReconsidered(key=pending.key, tool=pending.tool, reason=reason, was=pending.contract,
                                  now=tool.contract if tool else None))
    draft.effects.append(CallChanged(pending.key))
    if tool is None:
        return _withdraw(draft, pending, f"{reason}; tool {pending.tool} is no longer registered", "unknown_tool")
    try:
        args = tool.validate(pending.args)
    except ValueError as exc:
        return _withdraw(draft, pending, f"{reason}, and the call no longer fits it: {exc}", "invalid_args")
    policy = context.approval_policy.digest
    defaulted = defaulted_of(pending.asked)
    match context.verdict(tool, args, draft.usage, defaulted):
        case Deny(rule=rule, reason=denial):
            draft.record(CallDeniedByRule(key=pending.key, tool=pending.tool, rule=rule, reason=denial, policy=policy))
            return _withdraw(draft, pending, denied_by_rule(rule, denial), "denied_by_rule", rule=rule)
        case Allow(rule=rule):
            draft.record(CallAllowedByRule(key=pending.key, tool=pending.tool, rule=rule, policy=policy))
            return _allowed_now(draft, _revised(pending, args=args, contract=tool.contract, asked=None), tool, rule)
        case Ask(rule=rule, requirement=requirement):
            asked = asked_by(context, rule, requirement, defaulted)
    # Asked afresh, its preview taken afresh too: the tool that previews it changed.
    revised = _revised(pending, args=args, contract=tool.contract, asked=asked.to_json(), preview=None)
    draft.revise(revised)
    return ask_approval(draft, context, revised, Reconsidered(reason=reason, policy=policy))


def edit(state: RunState, context: Context, args: Any, by: str | None = None, key: str | None = None) -> Step:
    """A person changed the pending call's arguments before anyone approved it: the edited call is
    asked about afresh (a new approval for its new digest, the same key; no approval given for the
    old arguments carries over), or run or refused if the policy says so of it. The history keeps
    what the model proposed, and when the call runs the model is told how it was changed.
    """
    pending = _awaited(state, key)
    tool = context.tools.get(pending.tool)
    if tool is None:
        raise InvalidTransition(f"tool {pending.tool} is no longer registered")
    checked = checked_edit(state, pending, tool, args)  # ValueError: not a call this run may make
    edited = checked.args
    proposed = pending.edited.proposed if pending.edited is not None else dict(pending.args)
    changes = argument_changes(proposed, edited, context.secrets(tool.name))
    changed = _revised(pending, args=edited, asked=None, preview=None,  # the edited call is previewed afresh
                       edited=Edited(by=by, proposed=proposed, changes=changes).to_json())
    draft = Draft(state)
    draft.record(CallEdited(key=pending.key, tool=pending.tool, by=by, changes=tuple(changes),
                            was=context.redacted(pending.tool, dict(pending.args)),
                            now=context.redacted(pending.tool, edited)))
    policy = context.approval_policy.digest
    match context.verdict(tool, edited, draft.usage, checked.defaulted):
        case Deny(rule=rule, reason=reason):
            draft.record(CallDeniedByRule(key=pending.key, tool=pending.tool, rule=rule, reason=reason, policy=policy))
            return _withdraw(draft, changed, denied_by_rule(rule, reason), "denied_by_rule", rule=rule)
        case Allow(rule=rule):
            draft.record(CallAllowedByRule(key=pending.key, tool=pending.tool, rule=rule, policy=policy))
            return _allowed_now(draft, changed, tool, rule)
        case Ask(rule=rule, requirement=requirement):
            asked = asked_by(context, rule, requirement, checked.defaulted)
    changed = changed.evolved(asked=asked)
    draft.revise(changed)
    return ask_approval(draft, context, changed, AfterEdit(edited_by=by, policy=policy))


def edit_refused(state: RunState, context: Context, reason: str, key: str | None = None) -> Step:
    """An edit refused once it reached the run (`reason`; the form's check ran on the run as it was
    before): its call's approval closed as the edit was left, so the call as it stands is asked
    about again rather than left waiting on an approval nobody can give."""
    pending = _awaited(state, key)
    return ask_approval(Draft(state), context, pending,
                        EditRefused(edit_refused=reason, policy=context.approval_policy.digest))


def extend(state: RunState, **limits: float) -> Step:
    """Raise budget limits (e.g. `max_steps=12`); a run that ran out (or stalled) goes on."""
    unknown = set(limits) - set(Budget.__dataclass_fields__)
    if unknown:
        raise ValueError(f"unknown budget limits: {', '.join(sorted(unknown))}")
    raised = {**state.budget.to_json(), **limits}
    Budget(**raised)  # validates the new values
    if state.status not in ("budget_exhausted", "stalled", "running", "awaiting_approval"):
        raise InvalidTransition(f"run {state.run_id} cannot be extended ({state.status})")
    draft = Draft(state)
    draft.evolve(budget=BudgetLimits.model_validate(raised))
    draft.record(BudgetExtended(limits=limits))
    if state.status in ("budget_exhausted", "stalled"):
        # A person looked at the loop and let it go on: its repeats so far are forgiven.
        draft.evolve(status="running", stop=None, repeats=0)
    return draft.go_on()


def retry(state: RunState) -> Step:
    """Continue a run that failed (e.g. model unavailable) from where it stopped."""
    if state.status != "failed":
        raise InvalidTransition(f"run {state.run_id} has not failed ({state.status})")
    draft = Draft(state)
    draft.record(Retried(previous=state.stop))
    draft.evolve(status="running", stop=None)
    return draft.go_on()


def reconcile(state: RunState, context: Context, action: str, result: Any = None, note: str = "",
              by: str | None = None) -> Step:
    """Settle a call whose outcome is unknown: `done` (with the real result), `retry` or `abort`."""
    pending = _pending(state, "needs_reconciliation", "is not waiting for reconciliation")
    if action not in ("done", "retry", "abort"):
        raise ValueError("action must be 'done', 'retry' or 'abort'")
    tool = context.tools.get(pending.tool)
    if action == "retry" and tool is not None and tool.run_by_caller:
        # The ledger starts a lost call again only with the retry request still waiting on the run,
        # and the program that runs this one would start it later, when none is.
        raise InvalidTransition(f"{pending.tool} is run by the program that asked for it, which reported no "
                                "outcome: say whether it took effect (done) or abort; it is not run again")
    draft = Draft(state)
    draft.record(Reconciled(key=pending.key, tool=pending.tool, action=action, by=by, note=note))
    if action == "abort":
        return _cancel(draft, f"aborted during reconciliation: {note or 'no reason given'}", by)
    draft.evolve(status="running", stop=None)
    if action == "retry":
        return _run(draft, context, pending, retry=True)
    result = jsonable(result)
    record_execution(draft, context, pending, ok=True, value=result, seconds=0.0, reconciled=True)
    observe(draft, pending, result=result)
    draft.evolve(pending=None)
    return draft.go_on()


def cancel(state: RunState, reason: str = "", by: str | None = None) -> Step:
    """End the run as `cancelled`; a pending call is dropped unexecuted."""
    return _cancel(Draft(state), reason, by)


def expire(state: RunState, reason: str = "approval expired", key: str | None = None) -> Step:
    """Nobody decided the pending call (or `key`, one of its turn's calls) in time; it was not
    executed. The run ends as `expired`, or, when its rule says `on_expiry: continue`, the model is
    told so (a timeout, never a denial) and the run goes on. A call of a turn that made several is
    always told so: ending the run would keep from the model what its other calls did."""
    pending = _awaited(state, key)
    draft = Draft(state)
    asked = pending.asked
    in_batch = state.batch is not None and state.batch.of(pending.key) is not None
    if not in_batch and (asked is None or asked.on_expiry == "end"):
        return draft.stop("expired", reason=reason)
    waited = spoken(asked.ttl_seconds if asked is not None else 0)
    draft.record(ApprovalTimedOut(key=pending.key, tool=pending.tool, rule=asked.rule if asked else None,
                                  waited=waited))
    observe(draft, pending, error=f"no one decided within {waited}; the call was not made", kind="unanswered")
    draft.evolve(pending=None, status="running")
    return draft.go_on()


def request_again(state: RunState, context: Context, by: str | None = None) -> Step:
    """Ask again about the call of a run that expired with nobody deciding it: the same call and
    key, under the policy and the tool as they are now. Asked, it waits for a fresh approval with
    a fresh time limit, the run going on from where it paused; allowed now (a rule or a grant), it
    runs. Refused (`InvalidTransition`, nothing changes) when the run did not expire on a call,
    its tool is gone or no longer takes it, or the policy now denies it.
    """
    if state.status != "expired":
        raise InvalidTransition(f"run {state.run_id} did not expire ({state.status}); there is nothing to request again")
    pending = state.pending
    defaulted = defaulted_of(pending.asked if pending is not None else None)
    tool, args, verdict = call_to_ask_again(pending, context.tools,
                                            lambda tool, args: context.verdict(tool, args, state.usage, defaulted))
    assert pending is not None  # `call_to_ask_again` refuses a run that kept none
    draft = Draft(state)
    draft.record(RequestedAgain(key=pending.key, tool=pending.tool, by=by))
    draft.evolve(status="running", stop=None)
    policy = context.approval_policy.digest
    again = _revised(pending, args=args, contract=tool.contract, asked=None, preview=None)  # previewed afresh
    match verdict:
        case Allow(rule=rule):
            draft.record(CallAllowedByRule(key=pending.key, tool=pending.tool, rule=rule, policy=policy))
            draft.evolve(pending=None)
            return draft.then(RunTool(again, tool, allowed_by=rule))
        case Ask(rule=rule, requirement=requirement):
            asked = asked_by(context, rule, requirement, defaulted)
    again = again.evolved(asked=asked)
    grant = granted(draft, context, again)
    if grant is not None:
        draft.evolve(pending=None)
        return draft.then(RunTool(again, tool, granted_by=grant.grant_id))
    return ask_approval(draft, context, again, AskedAgain(policy=policy))


def call_to_ask_again(pending: PendingCall | None, tools: Mapping[str, Tool],
                      verdict_of: Callable[[Tool, dict[str, Any]], Verdict]) -> tuple[Tool, dict[str, Any], Verdict]:
    """The tool, the arguments as it validates them now and the policy's verdict on asking again
    about the call an expired run kept (None: it kept none: the run expired after its call was
    approved, too late to start it); `InvalidTransition` saying why it cannot be asked again."""
    if pending is None:
        raise InvalidTransition("this run kept no call to request again: it expired after its call was approved, "
                                "too late to start it; start a new run")
    tool = tools.get(pending.tool)
    if tool is None:
        raise InvalidTransition(f"tool {pending.tool} is no longer registered; there is nothing to request again")
    try:
        args = tool.validate(pending.args)
    except ValueError as exc:
        raise InvalidTransition(f"the call no longer fits {pending.tool}: {exc}") from None
    verdict = verdict_of(tool, args)
    if isinstance(verdict, Deny):
        raise InvalidTransition(f"the approval policy now refuses this call (policy rule {verdict.rule}: "
                                f"{verdict.reason})")
    return tool, args, verdict


def _cancel(draft: Draft, reason: str, by: str | None) -> Step:
    if draft.state.status in TERMINAL:
        raise InvalidTransition(f"run {draft.state.run_id} already ended ({draft.state.status})")
    return draft.stop("cancelled", reason=reason or "cancelled", by=by)


def _run(draft: Draft, context: Context, pending: PendingCall, *, retry: bool = False) -> Step:
    tool = context.tools.get(pending.tool)
    if tool is None:
        return refuse(draft, pending, "failed", f"tool {pending.tool} is no longer registered; nothing was executed")
    return draft.then(RunTool(pending, tool, retry=retry))


def _withdraw(draft: Draft, pending: PendingCall, reason: str, kind: ErrorKind, rule: str | None = None) -> Step:
    """Drop the pending call unexecuted and tell the model why; the run goes on."""
    observe(draft, pending, error=f"not executed: {reason}", kind=kind, rule=rule)
    draft.evolve(pending=None, status="running")
    return draft.go_on()


def _overruled(draft: Draft, context: Context, pending: PendingCall, approvals: int,
               broke_glass: bool = False) -> Step | None:
    """The step for an approved call the policy as it is now does not let run yet, or None.

    The policy may have changed since the call was proposed: a rule that now denies it withdraws it
    (its approval is closed), and one that now asks for more approvals than were given reopens the
    approval for the rest.
    """
    tool = context.tools.get(pending.tool)
    if tool is None:
        return None  # `_run` refuses it
    policy = context.approval_policy.digest
    match context.verdict(tool, pending.args, draft.usage, defaulted_of(pending.asked)):
        case Deny(rule=rule, reason=reason):
            draft.record(CallDeniedByRule(key=pending.key, tool=pending.tool, rule=rule, reason=reason,
                                          at_dispatch=True, policy=policy))
            draft.effects.append(Overruled(pending.key))
            return _withdraw(draft, pending, f"{denied_by_rule(rule, reason)} (the policy changed after it "
                                             "was approved)", "denied_by_rule", rule=rule)
        case Ask(rule=rule, requirement=requirement):
            asked = pending.asked
            quorum = asked.quorum if asked is not None else 1
            if approvals >= max(quorum, requirement.quorum) or (broke_glass and requirement.break_glass is not None):
                return None
            raised = (asked.evolved(quorum=requirement.quorum, policy=context.approval_policy.digest,
                                    confirm=asked.confirm or requirement.confirm) if asked is not None else
                      asked_by(context, rule, requirement, ()))
            draft.revise(pending.evolved(asked=raised))
            draft.record(ApprovalReopened(key=pending.key, tool=pending.tool, rule=rule, quorum=raised.quorum,
                                          approvals=approvals, policy=policy))
            draft.effects.append(AskMoreOf(pending.key))
            return draft.go_on()
    return None


def _awaited(state: RunState, key: str | None) -> PendingCall:
    """The call a decision is about: the run's pending call, or (`key`) one of its turn's calls that
    still waits for a person; `InvalidTransition` if the run waits on no such call."""
    _pending(state, "awaiting_approval", f"has no pending approval ({state.status})")
    waiting = waiting_on(state, key)
    if waiting is None:
        raise InvalidTransition(f"run {state.run_id} is not waiting for a decision on {key}")
    return waiting


def waiting_on(state: RunState, key: str | None) -> PendingCall | None:
    """The call under `key` (None: the pending one) if it waits for a person's decision: the run's
    pending call while the run awaits approval, or one of its turn's calls still waiting, whatever
    the run does meanwhile (between two of the turn's steps it is running)."""
    pending = state.pending
    if state.status == "awaiting_approval" and pending is not None and key in (None, pending.key):
        return pending
    waiting = state.batch.of(key) if state.batch is not None and key is not None else None
    return waiting.pending if waiting is not None and waiting.waiting else None


def _allowed_now(draft: Draft, call: PendingCall, tool: Tool, rule: str | None) -> Step:
    """The policy now lets `call` run without a person: it runs, now or in its turn's order."""
    batch = draft.state.batch
    draft.evolve(status="running", pending=None)
    if batch is not None and batch.of(call.key) is not None:
        draft.evolve(batch=batch.with_call(call.key, pending=call, runs=True, allowed_by=rule))
        return draft.go_on()
    return draft.then(RunTool(call, tool, allowed_by=rule))


def _pending(state: RunState, status: str, refusal: str) -> PendingCall:
    """The call waiting in `status`, or `InvalidTransition` saying the run `refusal`."""
    if state.status != status or state.pending is None:
        raise InvalidTransition(f"run {state.run_id} {refusal}")
    return state.pending


def _revised(pending: PendingCall, **changes: Any) -> PendingCall:
    """`pending` with `changes`, validated again."""
    return PendingCall.model_validate({**pending.to_json(), **changes})
