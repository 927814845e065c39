"""Calls their caller runs (`Tool.run_by_caller`), as transitions. Pure, like the loop.

An approval asked for over the API is a run of one call, decided as any run's call is (the policy,
a quorum, edits, grants, expiry, the same card and audit chain), which Signoff hands to the program
that asked instead of running it:

- `hand_over`: where the call would start, it waits for its caller (status `awaiting_caller`),
  keeping what lets it start: a person's approval (consumed by the ledger as it starts), the rule
  or the grant that let it run unasked.
- `handed_call`: the call as its caller may start it now.
- `reported`: what the caller said came of it, recorded as any call's outcome is (`after_call`).
- `lost`: the caller started it and reported nothing within its time limit. As with a crash in the
  middle of a call, nobody can know whether it took effect, so a person is asked.
"""

from __future__ import annotations

from signoff.runtime.call_events import CallHandedToCaller
from signoff.runtime.call_outcomes import after_call, needs_reconciliation
from signoff.runtime.errors import InvalidTransition
from signoff.runtime.judging import Context
from signoff.runtime.loop import Draft, RunTool, Step, Stop
from signoff.runtime.pending_calls import Handed, PendingCall
from signoff.runtime.schema import RunState
from signoff.runtime.tool_calls import Outcome


def hand_over(state: RunState, action: RunTool) -> Step:
    """`action` would run a call its caller runs: the run waits for the caller instead. (Never a
    retry of one whose outcome was lost: `requests.reconcile` refuses that.)"""
    draft = Draft(state)
    call = action.call.evolved(handed=Handed(allowed_by=action.allowed_by, granted_by=action.granted_by))
    draft.evolve(status="awaiting_caller", pending=call)
    draft.record(CallHandedToCaller(key=call.key, tool=call.tool, allowed_by=action.allowed_by,
                                    granted_by=action.granted_by))
    return draft.then(Stop("awaiting_caller"))


def handed_call(state: RunState, context: Context) -> RunTool:
    """The call the run handed to its caller, as it starts: with the rule or grant that lets it."""
    call = _handed(state)
    assert call.handed is not None
    tool = context.tools.get(call.tool)
    if tool is None or not tool.run_by_caller:
        raise InvalidTransition(f"{call.tool} is not a call its caller runs")
    return RunTool(call.evolved(handed=None), tool, allowed_by=call.handed.allowed_by,
                   granted_by=call.handed.granted_by)


def reported(state: RunState, context: Context, outcome: Outcome) -> Step:
    """The run goes on from what came of the handed call: run, failed, or refused as it started
    (its approval no longer usable, its grant revoked), as if Signoff had run it."""
    action = handed_call(state, context)
    running = Draft(state)
    running.evolve(status="running", pending=action.call)
    return after_call(running.state, context, action, outcome)


def lost(state: RunState, reason: str) -> Step:
    """The caller started the call and reported no outcome in time: a person says what came of it."""
    call = _handed(state)
    draft = Draft(state)
    draft.evolve(status="running")
    return needs_reconciliation(draft, call.evolved(handed=None), reason)


def _handed(state: RunState) -> PendingCall:
    if state.status != "awaiting_caller" or state.pending is None or state.pending.handed is None:
        raise InvalidTransition(f"run {state.run_id} has no call waiting for its caller ({state.status})")
    return state.pending
