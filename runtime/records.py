"""Stored runs and approvals as values, what the store answers, and the outcomes of what people do. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from signoff.runtime.approval_events import ApprovalEvent
    from signoff.runtime.notices import HeldNotice
    from signoff.runtime.schema import RunState

ApprovalStatus = Literal["pending", "approved", "denied", "expired", "cancelled", "consumed", "superseded"]
"""`superseded`: the tool changed before the approval was used, and a fresh one asks again."""


@dataclass(frozen=True)
class RunRecord:
    """A run as stored: its row plus the full JSON state."""

    run_id: str
    goal: str
    requester: str
    origin: dict[str, Any]
    """Where the run came from and where it is shown, e.g. {"channel": "C1", "ts": "171.2"}."""
    model: str
    status: str
    state: dict[str, Any]
    version: int
    created_at: datetime
    updated_at: datetime
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None
    command: dict[str, Any] | None = None
    """A request (cancel, extend, retry, reconcile) waiting for the run's worker."""
    request_id: str | None = None
    """The request that started the run (e.g. Slack's trigger_id); a replay of it starts nothing new."""
    """The ending people were last told about; recovery tells them of any other."""
    unreadable: str | None = None
    """Set, with `state` empty, when a listing met a run whose stored state cannot be read: the
    list still shows the run (and the others), and nothing acts on it (`get_run` refuses it)."""
    checked: RunState | None = field(default=None, repr=False, compare=False)
    """`state` as the typed value it was checked as, when read with its history: a worker resumes
    from it instead of checking the same history again (a run of 1,000 steps: 2,000 entries)."""

    @property
    def usage(self) -> dict[str, Any]:
        usage: dict[str, Any] = self.state["usage"]
        return usage

    @property
    def budget(self) -> dict[str, Any]:
        budget: dict[str, Any] = self.state["budget"]
        return budget

    @property
    def stop(self) -> dict[str, Any] | None:
        return self.state.get("stop")

    @property
    def answer(self) -> str | None:
        return self.state.get("answer")


@dataclass(frozen=True)
class ApprovalRecord:
    """One request for a human decision on one exact call."""

    approval_id: str
    run_id: str
    step: int
    tool: str
    args: dict[str, Any]
    key: str
    digest: str
    status: ApprovalStatus
    requester: str
    requested_at: datetime
    expires_at: datetime
    decided_at: datetime | None = None
    decided_by: str | None = None
    note: str | None = None
    message: dict[str, Any] | None = None
    """Where the request is shown, e.g. {"channel": "C1", "ts": "171.3"}; None until posted."""
    consumed_at: datetime | None = None
    contract: str | None = None
    """The hash of the tool's contract when the call was proposed (None: recorded before Signoff kept it)."""
    quorum: int = 1
    """How many distinct allowed people must approve before the call runs."""
    asked: dict[str, Any] | None = None
    """What the approval policy required (`pending_calls.Asked` as JSON: rule, policy, approvers, quorum,
    ttl_seconds, allow_self_approval, confirm); None: recorded before Signoff had policies."""
    votes: tuple[Vote, ...] = ()
    """The decisions people gave, one per person, oldest first."""
    nudge_at: datetime | None = None
    """When its people are next reminded, or its escalation's added (None: nothing left to do)."""
    nudges: int = 0
    """How many of its reminders and escalations were made."""
    asked_with: dict[str, Any] | None = None
    """What the run showed when the approval was asked, which every later drawing of its card
    keeps: `preview` (the `pending_calls.Preview` it is bound to, or None) and the budget figures
    then (`budget`, `usage`, `steps`). None: asked before Signoff kept it."""
    glass: dict[str, Any] | None = None
    """How it was approved by breaking the glass (`break_glass.BrokenGlass` as JSON: by, reason,
    at, review_by, notify); None: it was not."""
    glass_review: dict[str, Any] | None = None
    """The review of that break-glass: verdict (confirmed or flagged), by, at, note; None: not yet."""
    glass_message: dict[str, Any] | None = None
    """Where its review card was posted; None until it is."""
    glass_due_at: datetime | None = None
    """When the break-glass's next follow-up is due: telling (at once), the review's reminder, its
    escalation once overdue; None: nothing left to do."""
    glass_nudges: int = 0
    """How many of those follow-ups were made."""

    @property
    def rule(self) -> str | None:
        """The policy rule that asked (None: the policy's defaults, or recorded before policies)."""
        rule = (self.asked or {}).get("rule")
        return rule if isinstance(rule, str) else None

    @property
    def approved_by(self) -> tuple[str, ...]:
        """The distinct people who approved, in order."""
        return tuple(vote.user for vote in self.votes if vote.approved)


@dataclass(frozen=True)
class Vote:
    """One person's decision on an approval: counted once, however often they click."""

    user: str
    approved: bool
    at: datetime
    note: str | None = None


@dataclass(frozen=True)
class GrantRecord:
    """"Approve + allow similar", as stored: later calls of `tool` under `rule` whose `same`
    arguments equal these run unasked until `expires_at`, in `run_id` (scope `run`) or in any run
    of `requester` (scope `requester`), unless revoked."""

    grant_id: str
    approval_id: str
    run_id: str
    requester: str
    tool: str
    rule: str | None
    same: dict[str, Any]
    scope: str
    created_by: str
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None = None
    revoked_by: str | None = None
    uses: int = 0
    last_used_at: datetime | None = None
    """When it last let a call start (None: never), as a review of standing access shows it."""


@dataclass(frozen=True)
class Decided:
    """This decision won: the approval moved from pending to approved or denied."""

    approval: ApprovalRecord
    grant: GrantRecord | None = None
    """The grant this approval created ("Approve + allow similar")."""
    lease: str | None = None
    """The run's lease, taken for the decider in the decision's own transaction when it asked to
    drive the run on (`Runner.decide(drive=True)`); None when it did not, or another worker holds
    the run. Hand it to `Runner.execute`, which then needs no claim of its own."""
    receipt: dict[str, Any] | None = None
    """The decision's signed receipt, made in its transaction (None: no signing key is configured)."""
    written: tuple[ApprovalEvent, ...] = field(default=(), compare=False, repr=False)
    """The audit events its transaction wrote, as written (the observer hears these, never a copy
    rebuilt elsewhere); not part of what the outcome is."""


@dataclass(frozen=True)
class Nudged:
    """A pending approval whose people were just reminded (`remind`) or widened (`escalate`)."""

    approval: ApprovalRecord
    kinds: tuple[str, ...]
    added: tuple[str, ...] = ()
    """Who the escalation added (they may decide it now, and are to be told)."""
    first_reminder: bool = False
    """This sweep made the approval's first reminder (alone, or with the next, after a restart)."""
    written: tuple[ApprovalEvent, ...] = field(default=(), compare=False, repr=False)
    """The audit events its transaction wrote, as written (the observer hears these, never a copy
    rebuilt elsewhere); not part of what the outcome is."""


@dataclass(frozen=True)
class Counted:
    """This approval was counted; the quorum needs more (`approval.votes` says who so far)."""

    approval: ApprovalRecord
    written: tuple[ApprovalEvent, ...] = field(default=(), compare=False, repr=False)
    """The audit events its transaction wrote, as written (the observer hears these, never a copy
    rebuilt elsewhere); not part of what the outcome is."""


@dataclass(frozen=True)
class AlreadyCounted:
    """This person's decision on the approval is already counted; one person counts once."""

    approval: ApprovalRecord


@dataclass(frozen=True)
class AlreadyDecided:
    """Someone decided first; `approval.decided_by` and `approval.status` say who and what."""

    approval: ApprovalRecord


@dataclass(frozen=True)
class Expired:
    """The approval expired before this decision; nothing was executed."""

    approval: ApprovalRecord
    just_now: bool = False
    """This decision is what noticed the expiry (the sweep had not run yet): tell people once."""
    written: tuple[ApprovalEvent, ...] = field(default=(), compare=False, repr=False)
    """The audit events its transaction wrote, as written (the observer hears these, never a copy
    rebuilt elsewhere); not part of what the outcome is."""


@dataclass(frozen=True)
class NotAllowed:
    """The person may not do this; `reason` is shown to them."""

    reason: str


@dataclass(frozen=True)
class StepUpNeeded(NotAllowed):
    """The approve was refused for want of a fresh sign-in, as the approval's rule says (`step_up`):
    the person may approve it from its page in the web console (`approval_id`), after signing in."""

    approval_id: str = ""


@dataclass(frozen=True)
class Mismatch:
    """The click does not match the stored request (changed digest, another run's approval)."""

    reason: str


@dataclass(frozen=True)
class Missing:
    """No such run or approval."""

    what: str


@dataclass(frozen=True)
class Done:
    """A run operation (cancel, extend, retry, reconcile) was applied."""

    run: RunRecord
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Refused:
    """A run operation is not possible in the run's current status."""

    reason: str


@dataclass(frozen=True)
class AlreadyDone:
    """The button was pressed for a state the run has left: someone already acted on it.

    `what` is the request that was made then (`cancel`, `extend`, `retry`, `reconcile.done`,
    `reconcile.retry` or `reconcile.abort`), `by` who made it and `at` when. Nothing changed now.
    """

    what: str
    by: str | None
    at: datetime | None = None


Voted = Decided | Counted | AlreadyCounted | AlreadyDecided | Expired | Missing
"""What the store answers to one person's decision."""
DecisionOutcome = Voted | NotAllowed | Mismatch
RunOutcome = Done | Refused | NotAllowed | Missing | AlreadyDone


# -- what the store answers (see `ports.Store`) --------------------------------------------


@dataclass(frozen=True)
class Saved:
    """The result of a committed step."""

    version: int
    approvals: tuple[ApprovalRecord, ...]
    """The approvals the step opened (several when every call of a turn asks a person)."""
    command: dict[str, Any] | None
    """A command a person left for this run while the step ran; the runner applies it next."""
    cancelled: list[ApprovalRecord] = field(default_factory=list)
    """Approvals this step closed (the run ended, or a fresh request superseded them); their
    messages need their buttons removed."""
    released: bool = False
    """The step let go of the run's lease in its own write (asked to, and no request waited)."""
    owed: tuple[HeldNotice, ...] | None = None
    """When the step owed people something: what the run owes them of its own after the write,
    as `Store.run_notices` would read it then (read in the write, not in a read of its own)."""


@dataclass(frozen=True)
class Fresh:
    """The ledger row was written; the call may run now."""

    attempt: int
    version: int | None = None
    """The run's new version, when starting the call also used up a person's request."""


@dataclass(frozen=True)
class Existing:
    """The ledger already has this key: the call ran, or started and left no outcome."""

    status: str
    result: Any
    error: str | None


@dataclass(frozen=True)
class NotDispatchable:
    """The call must not run; `status` is what the run becomes."""

    reason: str
    status: str


@dataclass(frozen=True)
class Ungranted:
    """The grant the call was to run under no longer covers it (revoked, expired): ask a person."""

    reason: str


ExecutionStart = Fresh | Existing | NotDispatchable | Ungranted
Restart = Literal["idempotent", "requested"]
"""Why a call that started and left no outcome may start again."""


@dataclass(frozen=True)
class CommandRefusal:
    """Why a person's request was not left for the run."""

    reason: str
    waiting: dict[str, Any] | None = None
    """The request already waiting for the run, when that is the reason."""
    stale: bool = False
    """The request was made from a message showing an earlier version of the run."""
