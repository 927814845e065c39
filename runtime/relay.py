"""Sends what the outbox says people are owed (`notices`), through the `Teller`, once per take.

A notice is sent with its approval and run as they are when it is sent (never a copy made when it
was owed), and only while it still says something true (`worth_sending`). Sent, it leaves the
outbox; failed (Slack down), it is tried again later, backing off; never sent within
`rules.RESYNC_WINDOW`, it is given up, logged, as recovery gives up on a stale card. A crash
between owing and sending loses nothing: the next relay to look, on any replica, sends it. A
crash in the middle of a send may send it again once its take's fence has passed: a reminder said
twice, rather than an escalation nobody heard of.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta

from signoff.runtime.approval import is_open
from signoff.runtime.notices import (
    Escalate,
    FollowUpGlass,
    HeldNotice,
    Notice,
    Redraw,
    Remind,
    ShowGlassReview,
)
from signoff.runtime.ports import Store
from signoff.runtime.records import ApprovalRecord, RunRecord
from signoff.runtime.rules import RESYNC_WINDOW
from signoff.runtime.telling import FAILED, Teller

log = logging.getLogger("signoff.runner")

FENCE = timedelta(seconds=60)
"""How long a take keeps other relays off a notice: longer than any one send takes."""
FIRST_RETRY = timedelta(seconds=5)
LAST_RETRY = timedelta(minutes=5)
"""A failed send is tried again after `FIRST_RETRY`, doubling with each try, at most `LAST_RETRY`."""
TAKEN_AT_ONCE = 50

ToTell = Callable[[RunRecord, ApprovalRecord, Iterable[str]], list[str]]
"""Who among some ids to tell directly that an approval waits for them (`Deciders.to_tell`)."""


def worth_sending(notice: Notice, approval: ApprovalRecord, now: datetime) -> bool:
    """Whether the notice still says something true: a reminder, an escalation or a pending card's
    redraw only of an approval still open (a decided one's card is redrawn by its decision); a
    break-glass's follow-ups only until it is reviewed (its review always)."""
    match notice:
        case Remind() | Escalate() | Redraw():
            return is_open(approval, now)
        case FollowUpGlass():
            return approval.glass_review is None
        case ShowGlassReview():
            return True


def retry_in(tries: int) -> timedelta:
    """When a notice that failed its `tries`-th send is due again."""
    backoff: timedelta = FIRST_RETRY * 2 ** min(tries - 1, 16)
    return min(backoff, LAST_RETRY)


class Relay:
    """Takes notices from the store's outbox and sends each through the teller."""

    def __init__(self, store: Store, teller: Teller, to_tell: ToTell) -> None:
        self.store, self.teller, self.to_tell = store, teller, to_tell

    def send_owed(self, approval_id: str | None = None) -> int:
        """Send every notice due now (of `approval_id` alone, when given); how many were sent."""
        sent = 0
        while held := self.store.take_notices(FENCE, approval_id=approval_id, limit=TAKEN_AT_ONCE):
            for notice in held:
                sent += self._send(notice)
        return sent

    def _send(self, held: HeldNotice) -> bool:
        approval = self.store.get_approval(held.notice.approval_id)
        run = self.store.get_run(held.run_id, history=False) if approval is not None else None
        if approval is None or run is None or run.unreadable:
            self.store.notice_sent(held.seq)  # nothing left to say it of
            return False
        now = self.store.now()
        if not self.teller.tells or not worth_sending(held.notice, approval, now):
            self.store.notice_sent(held.seq)
            return False
        if self._told(held.notice, run, approval):
            self.store.notice_sent(held.seq)
            return True
        if held.made_at < now - RESYNC_WINDOW:
            log.error("run %s: gave up telling %s of approval %s after %d tries", run.run_id, held.notice.kind,
                      approval.approval_id, held.tries)
            self.store.notice_sent(held.seq)
        else:
            self.store.notice_failed(held.seq, retry_in(held.tries), f"{held.notice.kind} failed")
        return False

    def _told(self, notice: Notice, run: RunRecord, approval: ApprovalRecord) -> bool:
        """Send `notice` through the teller (which logs and audits a failure); whether it went."""
        teller = self.teller
        match notice:
            case Remind(first=first):
                approvers = (approval.asked or {}).get("approvers") or ()
                told = teller.notify(notice.kind, run, approval, self.to_tell(run, approval, approvers) if first else [])
            case Escalate(added=added):
                told = teller.notify(notice.kind, run, approval, list(added), self.to_tell(run, approval, added))
            case Redraw():
                told = teller.notify(notice.kind, run, approval, teller.card_of(run, approval))
            case FollowUpGlass(follow_up=follow_up):
                # The card's first post shows the decision's receipt; only then is it read.
                receipt = (self.store.receipt_of(approval_id=approval.approval_id)
                           if approval.glass_message is None else None)
                told = teller.notify(notice.kind, run, approval, follow_up, receipt)
                if isinstance(told, dict):
                    self.store.set_glass_message(approval.approval_id, told)
            case ShowGlassReview():
                told = teller.notify(notice.kind, run, approval)
        return told is not FAILED
