"""A model turn as a transition: the budget checked before the policy is asked (`budget_stop`),
then its reply read (`after_reply`) as a final answer, one call (run, asked about or refused),
several (`batches.py`), or feedback on a reply that could not be used. Pure, like the rest of the
loop (`loop.py`).
"""

from __future__ import annotations

import json
from typing import Any

from signoff.runtime.batches import propose_batch
from signoff.runtime.budget import exhausted_limit, usage_report
from signoff.runtime.call_outcomes import count_repeat, observe
from signoff.runtime.decisions import jsonable, malformed, shortened
from signoff.runtime.history import FinalAnswer, MalformedReply, RuntimeFeedback
from signoff.runtime.judging import AsksAPerson, Context, NotMade, RunsUnasked, ask_approval, judged, recorded
from signoff.runtime.loop import Draft, Finish, ModelFailed, Reply, RunTool, Step
from signoff.runtime.loop_events import FinalDecision, Finished, MalformedDecision, VersionsChanged
from signoff.runtime.schema import RunState
from signoff.runtime.state import idempotency_key
from signoff.runtime.turns import Provenance, read_turn


def budget_stop(state: RunState) -> Step | None:
    """The stop of a run that has reached a limit, or None if another policy call is allowed."""
    limit = exhausted_limit(state)
    if limit is None:
        return None
    return Draft(state).stop("budget_exhausted", reason=f"{limit} reached", budget=limit, limits=usage_report(state))


def after_reply(state: RunState, context: Context, reply: Reply | ModelFailed) -> Step:
    """One policy reply read: a final answer, a call (run, asked about or refused), or feedback."""
    draft = Draft(state)
    if isinstance(reply, ModelFailed):
        return draft.stop("failed", reason=reply.reason, detail=reply.detail)
    turn = read_turn(reply.raw, state, context.catalogue)
    step = state.steps + 1
    draft.evolve(steps=step, **turn.changes)
    if turn.versions_changed is not None:
        was, now = turn.versions_changed
        draft.record(VersionsChanged(was=was, now=now))
    problem = malformed(turn.decision)
    if problem:
        draft.append(MalformedReply(role="assistant", step=step, malformed=shortened(reply.raw), **turn.provenance),
                     RuntimeFeedback(role="runtime", step=step, error=problem))
        draft.record(MalformedDecision(error=problem))
        return draft.go_on()
    if "final" in turn.decision:
        return _finish(draft, turn.decision, turn.provenance)
    decision = turn.decision
    if "calls" in decision:
        if len(decision["calls"]) > 1:
            return propose_batch(draft, context, decision, turn.provenance)
        decision = {**decision.pop("calls")[0], **decision}  # a list of one is one call
    proposed = _propose(draft, context, decision, turn.provenance)
    if proposed is not None:
        return proposed
    return count_repeat(draft, context)


def _finish(draft: Draft, decision: dict[str, Any], provenance: Provenance) -> Step:
    answer = jsonable(decision["final"])
    answer = answer if isinstance(answer, str) else json.dumps(answer)
    draft.append(FinalAnswer(role="assistant", step=draft.steps, final=answer, **provenance))
    draft.evolve(answer=answer, status="done")
    draft.record(FinalDecision())
    draft.record(Finished(answer=answer, usage=draft.usage))
    return draft.then(Finish(answer))


def _propose(draft: Draft, context: Context, decision: dict[str, Any], provenance: Provenance) -> Step | None:
    """Record the call and decide its fate: a step that runs it or asks about it, or None when it
    was refused on the spot (unknown tool, invalid arguments, a repeat of a settled side effect)."""
    step = draft.steps
    call = recorded(draft, context, decision, f"call-{step}", provenance)
    match judged(draft, context, call, idempotency_key(draft.state.run_id, step), set()):
        case NotMade(error=error, kind=kind, rule=rule):
            observe(draft, call, error=error, kind=kind, rule=rule)
            return None
        case RunsUnasked(pending=pending, tool=tool, allowed_by=allowed_by, granted_by=granted_by):
            return draft.then(RunTool(pending, tool, in_turn=True, allowed_by=allowed_by, granted_by=granted_by))
        case AsksAPerson(pending=pending, why=why):
            return ask_approval(draft, context, pending, why)
    raise AssertionError("unreachable")
