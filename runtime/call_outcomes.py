"""A call's outcome as a transition (`after_call`): what came of running it, recorded as the model
is told it, in the usage, and for a side effect as its fingerprint and the ledger's outcome; what
settles a call without running it (`refuse`, `needs_reconciliation`); and a turn counted towards
a stall when it only repeated earlier calls (`count_repeat`). Pure, like the rest of the loop
(`loop.py`).
"""

from __future__ import annotations

from typing import Any

from signoff.runtime import call_events
from signoff.runtime.decisions import is_plain_json
from signoff.runtime.effects import CallChanged
from signoff.runtime.history import ErrorKind, ToolCall, ToolError, ToolResult
from signoff.runtime.judging import Context, ask_approval
from signoff.runtime.loop import Draft, RunTool, Step
from signoff.runtime.pending_calls import PendingCall, Preview
from signoff.runtime.schema import Fingerprint, RunState, Status
from signoff.runtime.state import call_fingerprint
from signoff.runtime.tool_calls import (
    Failed,
    NotGranted,
    Outcome,
    PreviewChanged,
    Ran,
    Refused,
    TimedOut,
    Unknown,
)
from signoff.runtime.values import valid
from signoff.tools.base import Tool

# -- a call's outcome ------------------------------------------------------------------------------


def after_call(state: RunState, context: Context, action: RunTool, outcome: Outcome) -> Step:
    """What came of running `action.call`, recorded: the result or error the model sees, the usage,
    and for a side effect its fingerprint and ledger outcome."""
    draft, call, tool = Draft(state), action.call, action.tool
    match outcome:
        case Ran(value=value, seconds=seconds):  # the common case first
            record_execution(draft, context, call, ok=True, value=value, seconds=seconds, retried=action.retry)
            observe(draft, call, result=value, rule=action.allowed_by, edited=edit_note(call), grant=action.granted_by)
        case Refused(reason=reason, status=status):
            return refuse(draft, call, status, f"not executed: {reason}")
        case PreviewChanged(preview=now):  # the world changed since the approval: a person decides again
            return preview_changed(draft, context, call, now)
        case NotGranted(reason=reason):  # revoked or expired since: a person decides after all
            batch = draft.state.batch
            if batch is not None and batch.of(call.key) is not None:
                draft.evolve(batch=batch.with_call(call.key, runs=False, granted_by=None))
            lapsed = call_events.GrantLapsed(policy=context.approval_policy.digest, reason=reason)
            return ask_approval(draft, context, call, lapsed)
        case Unknown(reason=reason):
            return needs_reconciliation(draft, call, reason)
        case TimedOut(message=message) if tool.side_effect:
            return needs_reconciliation(draft, call, f"timed out: {message}; it may or may not have taken effect")
        case TimedOut(message=message, seconds=seconds):
            # It was called, so it counts towards max_tool_calls like any other failure.
            record_execution(draft, context, call, ok=False, value=f"timeout: {message}", seconds=seconds)
            observe(draft, call, error=f"timeout: {message}", kind="timeout")
        case Failed(error=error, seconds=seconds):
            record_execution(draft, context, call, ok=False, value=error, seconds=seconds)
            observe(draft, call, error=error, kind="exception")
    return count_repeat(draft, context) if action.in_turn else draft.go_on()


def preview_changed(draft: Draft, context: Context, call: PendingCall, now: Preview) -> Step:
    """Just before it was to start, `call`'s preview said something else than what was approved:
    its approval is void (closed as superseded), nothing ran, and a fresh approval shows the
    preview as it is now beside the one that was approved."""
    was = call.preview
    changed = call.evolved(preview=now.evolved(was=was.shown if was is not None else None))
    draft.record(call_events.PreviewChanged(key=call.key, tool=call.tool, was=was.digest if was is not None else None,
                                            now=now.digest))
    draft.effects.append(CallChanged(call.key))
    draft.revise(changed)
    draft.evolve(status="running")
    batch = draft.state.batch
    if batch is not None and batch.of(call.key) is not None:
        draft.evolve(batch=batch.with_call(call.key, pending=changed, runs=False, allowed_by=None, granted_by=None))
    why = call_events.NewPreview(policy=context.approval_policy.digest,
                                 reason="the preview changed since it was approved")
    return ask_approval(draft, context, changed, why)


def through_ledger(tool: Tool | None, call: PendingCall) -> bool:
    """Whether `call` starts through the execution ledger, once: every side effect, a read-only call
    a person was asked about (its approval is consumed as it starts), and every call its caller runs
    (the ledger is the one record that it started, once, and of how it went)."""
    return bool(tool and (tool.side_effect or tool.run_by_caller)) or call.asked is not None


def record_execution(draft: Draft, context: Context, call: PendingCall, ok: bool, value: Any, seconds: float,
                     retried: bool | None = None, reconciled: bool = False) -> None:
    """What came of running `call`: counted in the usage, audited, and for a call started through
    the ledger its outcome (`retried`: a person asked to run it again after its outcome was lost;
    `reconciled`: a person said what came of it, and it was not run)."""
    tool = context.tools.get(call.tool)
    usage = draft.usage
    draft.evolve(usage=usage.evolved(tool_calls=usage.tool_calls + 1))
    side_effect, seconds = bool(tool and tool.side_effect), round(seconds, 6)
    if ok:
        draft.record(call_events.ToolExecuted(tool=call.tool, key=call.key, seconds=seconds, side_effect=side_effect,
                                              retried=retried, reconciled=reconciled))
    else:
        draft.record(call_events.ToolFailed(tool=call.tool, key=call.key, seconds=seconds, side_effect=side_effect,
                                            error=value))
    if through_ledger(tool, call):
        if side_effect:
            settle(draft, call, "executed" if ok else "attempted")
        draft.evolve(pending=None)
        draft.execution = {"key": call.key, "tool": call.tool, "ok": ok, "result" if ok else "error": value,
                           "seconds": seconds}


def settle(draft: Draft, call: PendingCall, outcome: str) -> None:
    """Remember what became of a side-effecting call, so that an identical one is refused."""
    settled = Fingerprint.model_validate({"outcome": outcome, "key": call.key})
    draft.evolve(fingerprints={**draft.state.fingerprints, call_fingerprint(call.tool, call.args): settled})


def refuse(draft: Draft, call: PendingCall, status: Status, reason: str) -> Step:
    """Stop without running `call`: it is settled (nothing stays pending) and the model is told why."""
    observe(draft, call, error=reason, kind="refused")
    if draft.state.pending == call:
        draft.evolve(pending=None)
    return draft.stop(status, reason=reason)


def needs_reconciliation(draft: Draft, call: PendingCall, reason: str) -> Step:
    draft.evolve(pending=call)
    return draft.stop("needs_reconciliation", reason=reason, key=call.key, tool=call.tool)


def edit_note(call: PendingCall) -> str | None:
    """What the model is told of a call a person changed before it ran, so that it does not
    propose the original again; None for a call that ran as proposed."""
    if call.edited is None:
        return None
    who = call.edited.by or "a person"
    return (f"{who} changed this call before it ran ({'; '.join(call.edited.changes)}); it ran as changed, "
            "so do not propose the original again")


def observe(draft: Draft, call: ToolCall | PendingCall, *, result: Any = None, error: str | None = None,
            kind: ErrorKind | None = None, rule: str | None = None, edited: str | None = None,
            grant: str | None = None) -> None:
    # The call is a valid value already; a result (from a tool, the ledger or a person) is
    # validated unless it is plain JSON as it is, and an error is the loop's own text.
    ruled = {"rule": rule} if rule is not None else {}
    if edited is not None:
        ruled["edited"] = edited
    if grant is not None:
        ruled["grant"] = grant
    if error is None:
        draft.observe(valid(ToolResult, is_plain_json(result), role="tool", step=call.step, tool=call.tool,
                            call_id=call.call_id, result=result, **ruled))
    else:
        draft.observe(valid(ToolError, type(error) is str, role="tool", step=call.step, tool=call.tool,
                            call_id=call.call_id, error=error, error_kind=kind, **ruled))


# -- a turn that repeated earlier calls ------------------------------------------------------------


def count_repeat(draft: Draft, context: Context) -> Step:
    """Count a turn that called a tool as it was called before and got the same result again, and
    stop the run as `stalled` after `stall_after` of them in a row: a loop, not progress."""
    if context.stall_after is None or draft.state.status != "running":
        return draft.go_on()
    repeats = context.repeats.after_turn(draft.state.history, draft.state.repeats)
    if repeats is None:
        return draft.go_on()
    draft.evolve(repeats=repeats)
    if repeats >= context.stall_after:
        return draft.stop("stalled", reason=f"the last {repeats} turns repeated earlier calls and got the same results",
                          repeats=repeats)
    return draft.go_on()
