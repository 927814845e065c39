"""The audit events the loop writes of one call (judged by the policy or a grant, asked about,
decided, changed, handed over, run), as a tagged union: one frozen type for each kind, so that a
transition cannot misspell a field, leave one out or give one of the wrong type. Pure.

Each is a `events.TypedEvent`; the run's id and the step are added where the step is written
(`loop_events.as_events`). The rest of the loop's events, those of the run as a whole, are in
`loop_events.py`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from signoff.runtime.events import FLAT, EventType, Fields, TypedEvent, optional


@dataclass(frozen=True, kw_only=True)
class _OfACall(TypedEvent):
    """What every event of a call names first: its idempotency key and its tool."""

    key: str
    tool: str


# -- the policy's verdict, and the grants ----------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class CallAllowedByRule(_OfACall):
    type: ClassVar[EventType] = "call_allowed_by_rule"
    rule: str | None
    """None: no rule named the call, but the policy could not read some of its rules (`errors`)."""
    policy: str
    errors: tuple[str, ...] | None = optional()
    """The rules' expressions the policy could not evaluate on the way."""


@dataclass(frozen=True, kw_only=True)
class CallDeniedByRule(_OfACall):
    type: ClassVar[EventType] = "call_denied_by_rule"
    rule: str
    reason: str
    at_dispatch: bool = optional(False)
    """Denied as an approved call was about to run: the policy changed after it was approved."""
    policy: str
    errors: tuple[str, ...] | None = optional()


@dataclass(frozen=True, kw_only=True)
class GrantNotApplied(_OfACall):
    """A grant covers the call but may no longer let it run (`reason`); a person is asked."""

    type: ClassVar[EventType] = "grant_not_applied"
    rule: str | None
    grant_id: str
    reason: str
    policy: str
    errors: tuple[str, ...] | None = optional()


@dataclass(frozen=True, kw_only=True)
class CallAllowedByGrant(_OfACall):
    type: ClassVar[EventType] = "call_allowed_by_grant"
    rule: str | None
    grant_id: str
    granted_by: str
    policy: str
    errors: tuple[str, ...] | None = optional()


# -- asking a person -------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Proposed(Fields):
    """The model proposed the call and the policy's rule asks a person."""

    policy: str
    errors: tuple[str, ...] | None = optional()


@dataclass(frozen=True, kw_only=True)
class InTurn(Fields):
    """One of a turn's several calls, asked about with the others (`batch`: how many the turn made)."""

    policy: str
    batch: int


@dataclass(frozen=True, kw_only=True)
class Reconsidered(Fields):
    """Asked afresh: the call's tool changed since it was asked about (`reason`), which voids the
    approval given before."""

    supersedes: Literal[True] = field(default=True, init=False)
    reason: str
    policy: str


@dataclass(frozen=True, kw_only=True)
class AfterEdit(Fields):
    """A person changed the call's arguments (`edited_by`; None: who is not known)."""

    edited_by: str | None
    policy: str


@dataclass(frozen=True, kw_only=True)
class AskedAgain(Fields):
    """A person asked again about the call of a run that expired."""

    again: Literal[True] = field(default=True, init=False)
    policy: str


@dataclass(frozen=True, kw_only=True)
class EditRefused(Fields):
    """A person's edit was refused once it reached the run (`edit_refused`: why), after it had
    closed the call's approval: the call as it stands is asked about again."""

    edit_refused: str
    policy: str


@dataclass(frozen=True, kw_only=True)
class GrantLapsed(Fields):
    """The grant that let the call run unasked was revoked or ended before it started (`reason`)."""

    policy: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class NewPreview(Fields):
    """Asked afresh: what the call would do changed since it was approved (`reason`)."""

    policy: str
    supersedes: Literal[True] = field(default=True, init=False)
    reason: str


WhyAsked = Proposed | InTurn | Reconsidered | AfterEdit | EditRefused | AskedAgain | GrantLapsed | NewPreview
"""Why a person is asked about a call, which its `approval_requested` event says after the call."""


@dataclass(frozen=True, kw_only=True)
class ApprovalRequested(_OfACall):
    type: ClassVar[EventType] = "approval_requested"
    args: Mapping[str, Any]
    """As approvers see them: secrets redacted."""
    rule: str | None
    quorum: int
    why: WhyAsked = field(metadata=FLAT)


@dataclass(frozen=True, kw_only=True)
class ApprovalDecided(_OfACall):
    """The run took a person's decision (`approvals`: how many approved) and went on with it."""

    type: ClassVar[EventType] = "approval_decided"
    approved: bool
    by: str | None
    note: str
    approvals: int
    break_glass: bool = optional(False)


@dataclass(frozen=True, kw_only=True)
class ApprovalReopened(_OfACall):
    """The policy now asks `quorum` approvals of a call given fewer (`approvals`)."""

    type: ClassVar[EventType] = "approval_reopened"
    rule: str | None
    quorum: int
    approvals: int
    policy: str


@dataclass(frozen=True, kw_only=True)
class ApprovalTimedOut(_OfACall):
    """Nobody decided within `waited` (as a sentence says it) and the rule says go on."""

    type: ClassVar[EventType] = "approval_timed_out"
    rule: str | None
    waited: str


@dataclass(frozen=True, kw_only=True)
class RequestedAgain(_OfACall):
    type: ClassVar[EventType] = "requested_again"
    by: str | None


@dataclass(frozen=True, kw_only=True)
class Reconciled(_OfACall):
    """A person settled the call whose outcome was unknown: `done`, `retry` or `abort`."""

    type: ClassVar[EventType] = "reconciled"
    action: str
    by: str | None
    note: str


# -- the call changed ------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class CallReconsidered(_OfACall):
    """The call's tool changed (`reason`): its contract then (`was`) and now (None: gone, or not kept)."""

    type: ClassVar[EventType] = "call_reconsidered"
    reason: str
    was: str | None
    now: str | None


@dataclass(frozen=True, kw_only=True)
class CallEdited(_OfACall):
    """A person changed the call's arguments: each change worded, and the arguments before and
    after, secrets redacted."""

    type: ClassVar[EventType] = "call_edited"
    by: str | None
    changes: tuple[str, ...]
    was: Mapping[str, Any]
    now: Mapping[str, Any]


@dataclass(frozen=True, kw_only=True)
class PreviewChanged(_OfACall):
    """The digest of the preview approved (`was`; None: none was taken) and of the one now."""

    type: ClassVar[EventType] = "preview_changed"
    was: str | None
    now: str | None


# -- the call run ----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class CallHandedToCaller(_OfACall):
    """What lets the call start, besides a person's approval: the rule or the grant, if either."""

    type: ClassVar[EventType] = "call_handed_to_caller"
    allowed_by: str | None
    granted_by: str | None


@dataclass(frozen=True, kw_only=True)
class _ToolCalled(TypedEvent):
    """A call that returned or failed: these name the tool first."""

    tool: str
    key: str
    seconds: float
    side_effect: bool


@dataclass(frozen=True, kw_only=True)
class ToolExecuted(_ToolCalled):
    type: ClassVar[EventType] = "tool_executed"
    retried: bool | None = optional()
    """Whether a person asked to run it again after its outcome was lost (None: a person said what
    came of it instead, `reconciled`)."""
    reconciled: bool = optional(False)


@dataclass(frozen=True, kw_only=True)
class ToolFailed(_ToolCalled):
    type: ClassVar[EventType] = "tool_failed"
    error: str


CallEvent = (CallAllowedByRule | CallDeniedByRule | GrantNotApplied | CallAllowedByGrant | ApprovalRequested
             | ApprovalDecided | ApprovalReopened | ApprovalTimedOut | RequestedAgain | Reconciled | CallReconsidered | CallEdited
             | PreviewChanged | CallHandedToCaller | ToolExecuted | ToolFailed)
"""Every event the loop writes of one call."""
