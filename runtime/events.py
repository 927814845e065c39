"""Every kind of audit event a run records, named once, with what it means. Pure.

An event is a JSON object whose `type` is one of `EventType`; the rest of it is the event's own
fields. The loop's transitions and an approval's say theirs as typed values, one frozen type for
each kind (`loop_events.py`, `call_events.py`, `approval_events.py`), each a `TypedEvent`: a
misspelt or missing field is an error where the event is made, not a silent new shape of event.
The events that the runner and the stores write outside a step are built here, once, so the SQL
and in-memory stores write the same thing. `EVENT_MEANINGS` is the table docs/audit.md shows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Final, Literal, get_args

from signoff.runtime.schema import STATUSES, Status
from signoff.runtime.values import Value

EventType = Literal[
    "run_created", "run_started", "decision", "versions_changed", "finished",
    "budget_exhausted", "stalled", "failed", "needs_reconciliation", "cancelled", "expired",
    "budget_extended", "retried", "reconciled", "requested_again",
    "call_allowed_by_rule", "call_denied_by_rule", "call_allowed_by_grant", "grant_not_applied",
    "call_edited", "call_reconsidered", "preview_changed",
    "approval_requested", "approval_vote_recorded", "approval_recorded", "approval_decided",
    "approval_reminded", "approval_escalated", "approval_expired", "approval_timed_out", "approval_reopened",
    "grant_created", "grant_revoked", "grant_put_to_review", "grant_kept",
    "break_glass_told", "break_glass_review_reminded", "break_glass_review_overdue", "break_glass_reviewed",
    "call_handed_to_caller", "execution_started", "execution_retried", "tool_executed", "tool_failed",
    "command_recorded", "command_refused", "notify_failed",
]
EVENT_TYPES: Final[frozenset[str]] = frozenset(get_args(EventType))

EVENT_MEANINGS: Final[Mapping[EventType, str]] = MappingProxyType({
    "run_created": "The run was recorded: its goal, who asked, where from, the model.",
    "run_started": "The run began: its goal and budget.",
    "decision": "The model's turn: a call it proposed (`kind: tool`), its answer (`final`) or a reply "
                "that was not a turn (`malformed`).",
    "versions_changed": "The tools or the policy changed between the model's turns.",
    "finished": "The run ended with an answer (status `done`).",
    "budget_exhausted": "The run stopped at a budget limit; a person may extend it.",
    "stalled": "The run stopped: its turns kept repeating a call and getting the same result.",
    "failed": "The run stopped on a failure (the model unavailable, a policy error); a person may retry it.",
    "needs_reconciliation": "A call started and recorded no outcome: a person says whether it took effect.",
    "cancelled": "The run was cancelled; a call it was waiting on was not made.",
    "expired": "Nobody decided the run's call in time; it was not made.",
    "budget_extended": "A person raised the run's budget limits.",
    "retried": "A person had a failed run go on from where it stopped.",
    "reconciled": "A person settled a call whose outcome was unknown: done, retry or abort.",
    "requested_again": "A person asked again about the call of a run that expired.",
    "call_allowed_by_rule": "A policy rule let the call run without asking anyone.",
    "call_denied_by_rule": "A policy rule refused the call; it was not made.",
    "call_allowed_by_grant": "A grant (\"approve and allow similar\") let the call run unasked.",
    "grant_not_applied": "A grant would have covered the call but no longer may (why is said); a person is asked.",
    "call_edited": "An approver changed the call's arguments before it ran.",
    "call_reconsidered": "The call's tool changed since it was proposed; the call was judged again.",
    "preview_changed": "What the call would do changed since its approvers saw it; the approval is void.",
    "approval_requested": "A person's approval was asked for the call: the rule, the quorum, the preview.",
    "approval_vote_recorded": "One approver approved; the rule's quorum is not met yet.",
    "approval_recorded": "The approval was decided: approved (its quorum met, or one person breaking the glass, "
                         "with why: `break_glass`) or denied, and by whom.",
    "approval_decided": "The run took the decision and went on with it.",
    "approval_reminded": "The approvers were reminded of the approval.",
    "approval_escalated": "More approvers were added to the approval, as its rule says.",
    "approval_expired": "The approval expired undecided, or was approved too long before its call could start.",
    "approval_timed_out": "Nobody decided in time and the rule says go on: the model was told the call was not made.",
    "approval_reopened": "The policy now asks more approvals of a call already approved.",
    "grant_created": "An approver approved and allowed similar calls: the grant's rule, scope and end.",
    "grant_revoked": "A person revoked a grant.",
    "grant_put_to_review": "A scheduled review of standing access asked whether to keep the grant.",
    "grant_kept": "A person kept a grant when a review of standing access asked about it.",
    "break_glass_told": "An approval was approved by breaking the glass: its channels were told and its review asked.",
    "break_glass_review_reminded": "A break-glass is half way to its review deadline unreviewed: its reviewers "
                                   "were reminded.",
    "break_glass_review_overdue": "A break-glass passed its review deadline unreviewed: its channels were told again.",
    "break_glass_reviewed": "A person reviewed a break-glass: confirmed it or flagged it, and whether late.",
    "call_handed_to_caller": "The call was decided and handed to the program that asked for it, which runs it "
                             "(what lets it start is said: a person's approval, a rule or a grant).",
    "execution_started": "The call's ledger row was written and the call started (what allowed it is said).",
    "execution_retried": "A call that recorded no outcome was started again: idempotent, or a person asked.",
    "tool_executed": "The call returned; its result is in the run's history.",
    "tool_failed": "The call failed or timed out.",
    "command_recorded": "A person's request for the run (cancel, extend, retry, edit, ...) was taken.",
    "command_refused": "A person's request could no longer apply to the run, and was dropped.",
    "notify_failed": "Slack could not be told of something; recovery tells it again.",
})
assert set(EVENT_MEANINGS) == EVENT_TYPES, "every event type has a meaning, and only those"

ENDINGS: Final[Mapping[Status, EventType]] = MappingProxyType({
    "budget_exhausted": "budget_exhausted", "stalled": "stalled", "failed": "failed",
    "needs_reconciliation": "needs_reconciliation", "cancelled": "cancelled", "expired": "expired",
})
"""The event a run's stop in each of these statuses is recorded as (it bears the status's name)."""
assert set(ENDINGS) <= set(STATUSES)


def ending(status: Status) -> EventType:
    """The event type of a stop in `status`; a status no run stops in is a programming error."""
    try:
        return ENDINGS[status]
    except KeyError:
        raise ValueError(f"a run does not stop in {status!r}") from None


def event(event_type: EventType, **fields: Any) -> dict[str, Any]:
    """An event of `event_type` with `fields`, as it is stored."""
    return {"type": event_type, **fields}


_LEFT_OUT_AT_DEFAULT, _FLAT = "left_out_at_default", "flat"

FLAT: Final[Mapping[str, bool]] = MappingProxyType({_FLAT: True})
"""A typed event's field metadata (`field(metadata=FLAT)`): the value's own fields are written in
its place, not under its name."""


def optional(default: Any = None) -> Any:
    """A field written only when it is not `default` (None: only when it has a value). Fields whose
    absence says something have always been left out of the events rather than written as null
    (or false): a reader of an older event and of a newer one reads them alike."""
    return field(default=default, metadata={_LEFT_OUT_AT_DEFAULT: True})


@dataclass(frozen=True, kw_only=True)
class Fields:
    """Typed fields written as JSON in the order they are declared: a run-state value as its JSON,
    a tuple as a list, an `optional` field left out at its default, a `FLAT` one's fields in its place."""

    def written(self) -> dict[str, Any]:
        as_json: dict[str, Any] = {}
        for declared in dataclasses.fields(self):
            value = getattr(self, declared.name)
            if declared.metadata.get(_LEFT_OUT_AT_DEFAULT) and value is declared.default:
                continue
            if declared.metadata.get(_FLAT):
                as_json.update(value.written() if isinstance(value, Fields) else _json_of(value))
            else:
                as_json[declared.name] = _json_of(value)
        return as_json


def _json_of(value: Any) -> Any:
    if isinstance(value, Value):
        return value.to_json()
    return list(value) if isinstance(value, tuple) else value


@dataclass(frozen=True, kw_only=True)
class TypedEvent(Fields):
    """An event of one kind: its `type`, and its fields as `Fields` write them."""

    type: ClassVar[EventType]

    def as_event(self) -> dict[str, Any]:
        """The event as the audit log keeps it: its `type`, then its fields."""
        return event(self.type, **self.written())


def run_created(goal: str, requester: str, origin: Mapping[str, Any], model: str) -> dict[str, Any]:
    return event("run_created", goal=goal, requester=requester, origin=dict(origin), model=model)


def command_recorded(audited: Mapping[str, Any]) -> dict[str, Any]:
    """A person's request as audited (`run_requests` says what of it is kept)."""
    return event("command_recorded", **audited)


def command_refused(command: Mapping[str, Any], reason: str) -> dict[str, Any]:
    return event("command_refused", **{**command, "reason": reason})


def grant_revoked(grant_id: str, by: str) -> dict[str, Any]:
    return event("grant_revoked", grant_id=grant_id, by=by)


def grant_put_to_review(grant_id: str, review_id: str, period: str) -> dict[str, Any]:
    return event("grant_put_to_review", grant_id=grant_id, review_id=review_id, period=period)


def grant_kept(grant_id: str, review_id: str, by: str) -> dict[str, Any]:
    return event("grant_kept", grant_id=grant_id, review_id=review_id, by=by)


def execution_retried(key: str, tool: str, attempt: int, because: str, by: str | None) -> dict[str, Any]:
    """A call with no recorded outcome started again: its `attempt`, `because` (idempotent, or
    requested) and `by` whom, when a person asked."""
    return event("execution_retried", key=key, tool=tool, attempt=attempt, because=because, by=by)
