"""A model turn that proposed several calls at once, as transitions: each call recorded and judged
on its own, under its own key (`propose_batch`), then the turn settled call by call as the run
goes on (`continue_batch`): first the calls let run, in the order they were made, then those that
ask a person, all asked at once. Pure, like the rest of the loop (`loop.py`).
"""

from __future__ import annotations

from typing import Any

from signoff.runtime.call_events import InTurn
from signoff.runtime.call_outcomes import observe
from signoff.runtime.effects import AskAbout
from signoff.runtime.history import ToolCall
from signoff.runtime.judging import (
    AsksAPerson,
    Context,
    Fate,
    NotMade,
    RunsUnasked,
    approval_requested,
    judged,
    recorded,
)
from signoff.runtime.loop import AskApproval, Draft, RunPreview, RunTool, Step
from signoff.runtime.pending_calls import Batch, BatchCall
from signoff.runtime.schema import RunState
from signoff.runtime.state import idempotency_key
from signoff.runtime.turns import Provenance

MAX_BATCH_CALLS = 8
"""Calls of one model turn that are made; the rest are refused, and the model told so (one card
holds a turn's requests, and Slack's messages hold 50 blocks)."""


def propose_batch(draft: Draft, context: Context, decision: dict[str, Any], provenance: Provenance) -> Step:
    """Record every call of a turn that made several and decide each one's fate on its own, each
    with its own key (`run_id:step.n`); the turn is then settled call by call (`continue_batch`)."""
    step, run_id = draft.steps, draft.state.run_id
    said: dict[str, Any] = {k: decision[k] for k in ("text", "note") if k in decision}
    limit = draft.state.budget.max_tool_calls
    slots = None if limit is None else max(int(limit) - draft.usage.tool_calls, 0)
    proposed: set[str] = set()  # side effects proposed earlier in this turn, by fingerprint
    made: list[tuple[ToolCall, str, Fate]] = []
    call_ids: set[str] = set()
    for place, raw in enumerate(decision["calls"], start=1):
        # What the model said beside its calls, and the turn's usage, are recorded once, on the first.
        call = recorded(draft, context, {**raw, **(said if place == 1 else {})}, f"call-{step}.{place}",
                        provenance if place == 1 else {"versions": provenance["versions"]})
        if call.call_id in call_ids:  # each call's outcome is told under its own id
            call = call.evolved(call_id=f"{call.call_id}.{place}")
        call_ids.add(call.call_id)
        key = idempotency_key(run_id, step, place)
        fate = judged(draft, context, call, key, proposed) if place <= MAX_BATCH_CALLS else _BEYOND_THE_CAP
        fate, slots = _within_budget(fate, slots, limit)
        made.append((call, key, fate))
    draft.evolve(batch=Batch(step=step, calls=[_batch_call(call, key, fate) for call, key, fate in made]))
    for call, _, fate in made:
        if isinstance(fate, NotMade):
            observe(draft, call, error=fate.error, kind=fate.kind, rule=fate.rule)
    return draft.go_on()


_BEYOND_THE_CAP = NotMade(f"not made: at most {MAX_BATCH_CALLS} calls are made of one reply; propose it again "
                          "once these are settled", "refused")
"""The fate of a call past the first `MAX_BATCH_CALLS` of a reply."""


def _within_budget(fate: Fate, slots: int | None, limit: int | float | None) -> tuple[Fate, int | None]:
    """`fate` as the run's budget of `limit` tool calls leaves it, and the calls the budget has left
    after it (`slots`: those it had left before; None: no limit). A call past the budget is not made."""
    if isinstance(fate, NotMade) or slots is None:
        return fate, slots
    if slots == 0:
        return NotMade(f"not made: the run's budget of {limit} tool calls is used up by the calls before "
                       "it", "refused"), slots
    return fate, slots - 1


def _batch_call(call: ToolCall, key: str, fate: Fate) -> BatchCall:
    """`call` as the turn being settled holds it: let run, waiting for a person, or not made (its
    outcome is set as the model is told it)."""
    match fate:
        case RunsUnasked(pending=pending, allowed_by=allowed_by, granted_by=granted_by):
            return BatchCall(call_id=call.call_id, tool=call.tool, key=key, pending=pending, runs=True,
                             allowed_by=allowed_by, granted_by=granted_by)
        case AsksAPerson(pending=pending):
            return BatchCall(call_id=call.call_id, tool=call.tool, key=key, pending=pending)
        case NotMade():
            return BatchCall(call_id=call.call_id, tool=call.tool, key=key)


def continue_batch(state: RunState, context: Context) -> Step:
    """The next step of settling the turn `state.batch`: run the next call let run (in the order
    they were made, one at a time); then, with none left to run, pause on those that ask a person,
    every one's approval opened at once the first time. A call's outcome goes to the batch
    (`Draft.observe`), and the last one settled tells the model every outcome."""
    draft, batch = Draft(state), state.batch
    if batch is None:
        return draft.go_on()
    for call in batch.calls:
        if call.runs and call.outcome is None and call.pending is not None:
            tool = context.tools.get(call.tool)
            if tool is None:  # gone since it was proposed (a deploy in between): nothing to run
                observe(draft, call.pending, error=f"not executed: tool {call.tool} is no longer registered",
                        kind="unknown_tool")
                return draft.go_on()
            return draft.then(RunTool(call.pending, tool, allowed_by=call.allowed_by, granted_by=call.granted_by))
    waiting = [call.pending for call in batch.calls if call.waiting and call.pending is not None]
    if not waiting:
        return draft.go_on()
    for pending in waiting:  # each call's preview, before any is asked about
        tool = context.tools.get(pending.tool)
        if tool is not None and tool.preview is not None and pending.preview is None:
            return draft.then(RunPreview(pending, tool))
    if not batch.requested:
        draft.evolve(batch=batch.evolved(requested=True))
        in_turn = InTurn(policy=context.approval_policy.digest, batch=len(batch.calls))
        for pending in waiting:
            draft.record(approval_requested(context, pending, in_turn))
            draft.effects.append(AskAbout(pending.key))
    draft.evolve(pending=waiting[0], status="awaiting_approval")
    return draft.then(AskApproval(waiting[0]))
