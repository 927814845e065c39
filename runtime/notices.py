"""What people are owed a message about, as typed values a transition returns with its change and
the store keeps, in the same transaction, in its outbox (`notices`). Pure.

A card redrawn because its approval changed, a sweep's reminder or escalation, and a break-glass's
follow-ups and review were told after their commit, from memory: a crash in between lost the
sweep's (an escalation's new approvers never heard they may decide; a security channel never heard
the glass was broken), and a card out of line was found again only by comparing what it showed
with the approval. Kept as a notice, the message is owed until `relay.Relay` has sent it, from
whichever replica gets there first, once per take (a take fences the others off; a redraw, which
shows the same however often it is made, is not fenced: `Redraw`), and in the order each
approval's notices were made.

A notice names its approval, never a copy of it: it is sent with the approval as it is when it is
sent, so that a card is never redrawn older than it is, and a reminder of an approval decided
meanwhile is not sent at all (`relay.worth_sending`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

from signoff.runtime.records import ApprovalRecord
from signoff.runtime.schema import STOPPED, TERMINAL

if TYPE_CHECKING:  # break-glass makes notices: this module imports nothing of it
    from signoff.runtime.break_glass import FollowUp


ENDINGS: frozenset[str] = TERMINAL | STOPPED
"""Statuses people are told about when a run reaches them."""


@dataclass(frozen=True, kw_only=True)
class _Notice:
    kind: ClassVar[str]
    """Its name in the outbox, and (but for a redraw, `relay.card_method`, and a run's: `RunNotice`)
    the notifier method that sends it."""
    fenced: ClassVar[bool] = True
    """A take keeps every other taker off it for a while: it says something new, which must not
    be said twice at once. A redraw is not fenced (`Redraw`), nor a run's (`RunNotice`)."""

    @property
    def about(self) -> str | None:
        """The approval it is about, whose notices go out in order; None: the run's own."""
        return None

    def body(self) -> dict[str, Any]:
        """What the outbox keeps besides its kind."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "approval_id"}


@dataclass(frozen=True, kw_only=True)
class _ApprovalNotice(_Notice):
    approval_id: str

    @property
    def about(self) -> str | None:
        return self.approval_id


@dataclass(frozen=True, kw_only=True)
class Remind(_ApprovalNotice):
    """Remind the approval's people that it still waits for them; `first`: the first reminder,
    the one that also tells them directly."""

    kind: ClassVar[str] = "approval_reminded"
    first: bool


@dataclass(frozen=True, kw_only=True)
class Escalate(_ApprovalNotice):
    """Say that `added` may decide the approval now, and tell them directly."""

    kind: ClassVar[str] = "approval_escalated"
    added: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Redraw(_ApprovalNotice):
    """The approval's card no longer shows it as it is (decided, a vote counted, expired, closed,
    reopened, its people escalated): redraw it as it is when sent.

    Not fenced: a redraw says the same however often it is made, so a replica that died in the
    middle of one leaves nothing to wait for, and two may draw at once; a drawer that finds, once
    its update is made, that the approval moved on meanwhile draws it again (`relay.Relay`), so
    the last update to land is never the older one."""

    kind: ClassVar[str] = "redraw"
    fenced: ClassVar[bool] = False


@dataclass(frozen=True, kw_only=True)
class FollowUpGlass(_ApprovalNotice):
    """A break-glass's follow-up (`break_glass.FOLLOW_UPS`), with its review card if not yet posted."""

    kind: ClassVar[str] = "glass_follow_up"
    follow_up: FollowUp


@dataclass(frozen=True, kw_only=True)
class ShowGlassReview(_ApprovalNotice):
    """Show the break-glass's review on its card (and tell its channels of a flag)."""

    kind: ClassVar[str] = "glass_reviewed"


@dataclass(frozen=True, kw_only=True)
class RunNotice(_Notice):
    """What a run's step owes people: its run message, a call's result, its cards, its ending.

    Sent only by whoever holds the run's lease (its worker, as each step is saved; a recovering
    replica, holding it as a worker would: `relay.Relay.tell_run`), in the order they were owed:
    a card is posted, and a result or an ending threaded, under the run message announced first.
    The lease fences them, not a take: a run's notices post new messages, and the lease is what
    tells a worker that died from one still busy (a post Slack is slow to answer)."""

    fenced: ClassVar[bool] = False


@dataclass(frozen=True, kw_only=True)
class Announce(RunNotice):
    """Post the run message (a caller's run, only once it asks a person or stops for one)."""

    kind: ClassVar[str] = "run_started"


@dataclass(frozen=True, kw_only=True)
class TellResult(RunNotice):
    """Tell the result of one call (`entry`, as its history keeps it)."""

    kind: ClassVar[str] = "tool_result"
    entry: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class PostCards(RunNotice):
    """Post the cards of the calls with these keys (one card for a turn's several), each the
    call's approval in force when sent, if still open and not yet posted."""

    kind: ClassVar[str] = "cards_posted"
    keys: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class TellEnd(RunNotice):
    """Tell how the run ended (`status`), unless it has moved on from it since."""

    kind: ClassVar[str] = "run_ended"
    status: str


OfApproval = Remind | Escalate | Redraw | FollowUpGlass | ShowGlassReview
OfRun = Announce | TellResult | PostCards | TellEnd
Notice = OfApproval | OfRun
_KINDS: dict[str, type[Notice]] = {kind.kind: kind for kind in (Remind, Escalate, Redraw, FollowUpGlass,
                                                                  ShowGlassReview, Announce, TellResult, PostCards,
                                                                  TellEnd)}
KINDS = frozenset(_KINDS)
"""The kinds this Signoff sends; a store takes no other (one a newer Signoff wrote waits for it)."""
UNFENCED = frozenset(kind for kind, made in _KINDS.items() if not made.fenced)
"""The kinds a take leaves open to other takers."""


def notice_from(kind: str, approval_id: str | None, body: dict[str, Any]) -> Notice:
    """The notice the outbox kept as `kind` (one of `KINDS`) and `body`."""
    made = _KINDS[kind]
    if made is Escalate:
        body = {**body, "added": tuple(body.get("added", ()))}
    elif made is PostCards:
        body = {**body, "keys": tuple(body.get("keys", ()))}
    if issubclass(made, RunNotice):
        return made(**body)
    assert approval_id is not None, f"a {kind} notice is about an approval"
    return made(approval_id=approval_id, **body)


def retried_call_notices(status: str) -> tuple[OfRun, ...]:
    """What a call a person asked to retry owes as it restarts: the run's stopped message again,
    told should this attempt never report back (one that does moves the run on, and the message
    is no longer worth telling: `run_notices`)."""
    return (TellEnd(status=status),) if status in ENDINGS else ()


def nudge_notices(approval_id: str, kinds: list[str], added: tuple[str, ...], first: bool) -> tuple[Notice, ...]:
    """What people are owed of a nudge (`approval.nudge`): an escalation is told (to its new people
    directly); a reminder is told, directly to the approvers the first time."""
    owed: list[Notice] = []
    if "escalate" in kinds:  # its card is redrawn too, with the people it adds (`card_redraws`)
        owed.append(Escalate(approval_id=approval_id, added=added))
    if "remind" in kinds:
        owed.append(Remind(approval_id=approval_id, first=first))
    return tuple(owed)


def card_redraws(before: ApprovalRecord, after: ApprovalRecord) -> tuple[Redraw, ...]:
    """The redraw a change owes the approval's card: one whenever what the card shows changed (its
    status, its votes, what its rule asks), but not for the call starting (a consumed approval's
    card still says who approved it)."""
    started = (before.status, after.status) == ("approved", "consumed")
    shown = (before.status, before.votes, before.asked) != (after.status, after.votes, after.asked)
    return (Redraw(approval_id=after.approval_id),) if shown and not started else ()


AT_ONCE = 50
"""How many notices are read or taken at once (`Store.run_notices`, `Store.take_notices`)."""


@dataclass(frozen=True)
class HeldNotice:
    """A notice taken from the outbox to send (`NoticeStore.take_notices`): its place in the outbox
    (`seq`), its run, when it was made and how many times it has been taken, this one included."""

    seq: int
    run_id: str
    notice: Notice
    made_at: datetime
    tries: int
