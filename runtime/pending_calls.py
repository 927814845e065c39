"""The calls a run holds on to: one waiting for a person (or for reconciliation), what the approval
policy asked of it, and the calls of a turn that made several, each settled on its own.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, JsonValue, Tag

from signoff.runtime.digests import call_digest
from signoff.runtime.history import ToolError, ToolResult, entry_kind
from signoff.runtime.values import Count, Value


class Asked(Value):
    """What the approval policy required of a call when it was proposed: the rule that asked (None:
    the policy's defaults), the policy's digest, and who, how many and for how long."""

    rule: str | None
    policy: str
    approvers: list[str]
    quorum: Annotated[int, Field(ge=1)]
    ttl_seconds: Annotated[int, Field(ge=1)]
    allow_self_approval: bool
    confirm: bool = False
    on_expiry: Literal["end", "continue"] = "end"
    """Nobody decided in time: end the run as `expired`, or tell the model and go on."""
    grant: GrantOffer | None = None
    """What approving with "allow similar" would let run unasked afterwards (None: not offered)."""
    remind: list[float] = Field(default_factory=list)
    """Fractions of the time limit at which the approvers are reminded."""
    escalate: EscalationOffer | None = None
    """Who is added, and told, if nobody has decided after a while."""
    step_up_seconds: Annotated[int | float, Field(gt=0)] | None = None
    """Approving needs a sign-in at the web console no older than this many seconds (the rule's
    `step_up`); a click in Slack cannot approve it."""
    break_glass: BreakGlassOffer | None = None
    """One person may approve alone with a reason, reviewed afterwards (None: not offered)."""
    defaulted: list[str] | None = None
    """Arguments the rules did not see: the caller left them out and the tool filled in its defaults
    (None: every argument was sent). Every later look at the call sees it as this one did."""


class EscalationOffer(Value):
    after_seconds: Annotated[int | float, Field(gt=0)]
    to: list[str]


class BreakGlassOffer(Value):
    """A rule's break-glass: how long the reason must be, how soon it is reviewed, who is told."""

    reason_min_chars: Annotated[int, Field(ge=1)]
    review_within_seconds: Annotated[int | float, Field(gt=0)]
    notify: list[str]


class GrantOffer(Value):
    """A rule's grant: for how long, which arguments must be the same, in this run or the requester's."""

    for_seconds: Annotated[int | float, Field(gt=0)]
    same: list[str]
    scope: Literal["run", "requester"]


class Edited(Value):
    """A person changed a proposed call before it was approved: who, what the model proposed, and
    each change as people and the model read it (`amount_usd: "500.00" -> "50.00"`)."""

    by: str | None
    proposed: dict[str, JsonValue]
    changes: list[str]


class Handed(Value):
    """A call handed to the caller that runs it (`Tool.run_by_caller`), and what lets it start: the
    policy rule or the grant that let it run unasked (neither: a person's approval, consumed as it
    starts)."""

    allowed_by: str | None = None
    granted_by: str | None = None


class Preview(Value):
    """What a call would do, as its tool's `preview` said when it was asked about: shown to the
    approvers and bound into the approval's digest (`digest`; None: no preview, it failed)."""

    shown: JsonValue = None
    digest: str | None = None
    error: str | None = None
    """Why there is no preview (it raised, or ran past its time limit)."""
    was: JsonValue = None
    """The preview an earlier approval of this call showed, when the world changed since."""


class PendingCall(Value):
    """A validated call waiting for a person (or for reconciliation), bound to its key `run_id:step`."""

    tool: str
    args: dict[str, JsonValue]
    key: str
    step: Count
    call_id: str
    contract: str | None = None
    """The hash of its tool's contract when it was proposed (None: recorded before Signoff kept it)."""
    asked: Asked | None = None
    """What the approval policy asked of it when it was proposed (None: recorded before Signoff
    had policies, or not asked about: reconciliation)."""
    edited: Edited | None = None
    """Set when a person changed the arguments the model proposed; `args` are the changed ones."""
    preview: Preview | None = None
    """What the call would do, as its tool previewed it when it was asked about."""
    handed: Handed | None = None
    """Set while the call waits for its caller to run it (status `awaiting_caller`)."""

    @property
    def digest(self) -> str:
        """What an approval of this call is bound to. Derived, never stored: a stored copy could
        disagree with the arguments, and it is the store that checks an approval against them."""
        return call_digest(self.tool, self.args, self.key, self.preview.digest if self.preview else None)


BatchOutcome = Annotated[
    Annotated[ToolResult, Tag("tool_result")] | Annotated[ToolError, Tag("tool_error")],
    Discriminator(entry_kind),
]


class BatchCall(Value):
    """One call of a model turn that made several, and what has become of it so far."""

    call_id: str
    tool: str
    key: str
    """`run_id:step.n`: the call's own key, from its place in the turn (`state.batch_key`)."""
    pending: PendingCall | None = None
    """The call as its tool validated it (None: refused on the spot, so its outcome is set)."""
    runs: bool = False
    """Let run without a person (a read no rule names, a rule's allow or a grant): it runs in turn."""
    allowed_by: str | None = None
    granted_by: str | None = None
    outcome: BatchOutcome | None = None
    """What the model will be told of it (None: not settled yet)."""

    @property
    def waiting(self) -> bool:
        """Asked about, and not yet decided or settled."""
        return self.outcome is None and not self.runs and self.pending is not None


class Batch(Value):
    """The calls of the turn at `step`, each settled on its own (run, denied by a person or a rule,
    expired); the model is told every outcome, in the order it asked, once all are settled."""

    step: Count
    calls: list[BatchCall]
    requested: bool = False
    """Its asked calls' approvals were opened (all at once, the first time the batch paused)."""

    def of(self, key: str) -> BatchCall | None:
        return next((call for call in self.calls if call.key == key), None)

    def first_waiting(self) -> BatchCall | None:
        return next((call for call in self.calls if call.waiting), None)

    def first_unsettled(self) -> BatchCall | None:
        return next((call for call in self.calls if call.outcome is None), None)

    def with_call(self, key: str, **changes: Any) -> Batch:
        """The batch with the call `key` changed (`changes` already valid values of its fields)."""
        return self.evolved(calls=[call.evolved(**changes) if call.key == key else call for call in self.calls])

    def settled(self, outcome: ToolResult | ToolError) -> Batch | None:
        """The batch with `outcome` as the outcome of its call (by call id), or None if no call of
        the batch is `outcome`'s. A call keeps the first outcome it was given."""
        for index, call in enumerate(self.calls):
            if call.call_id == outcome.call_id:
                if call.outcome is not None:
                    return self
                return self.evolved(calls=[*self.calls[:index], call.evolved(outcome=outcome), *self.calls[index + 1:]])
        return None
