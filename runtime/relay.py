"""Sends what the outbox says people are owed (`notices`), through the `Teller`: an approval's once
per take (a redraw, at least once: `notices.Redraw`); a run's own by whoever holds the run's lease
(`tell_run`, `recover_runs`).

A notice is sent with its approval and run as they are when it is sent (never a copy made when it
was owed), and only while it still says something true (`worth_sending`). Sent, it leaves the
outbox; failed (Slack down), it is tried again later, backing off; never sent within
`rules.RESYNC_WINDOW`, it is given up, logged. A crash between owing and sending loses nothing:
the next relay to look, on any replica, sends it. A crash in the middle of a send may send it
again once its take's fence has passed: a reminder said twice, rather than an escalation nobody
heard of.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta

from signoff.runtime.approval import is_open
from signoff.runtime.errors import IncompatibleState
from signoff.runtime.heartbeat import Heartbeat
from signoff.runtime.notices import (
    AT_ONCE,
    Escalate,
    FollowUpGlass,
    HeldNotice,
    Notice,
    OfApproval,
    PostCards,
    Redraw,
    Remind,
    RunNotice,
    ShowGlassReview,
    card_redraws,
)
from signoff.runtime.ports import Store
from signoff.runtime.records import ApprovalRecord, RunRecord
from signoff.runtime.rules import RESYNC_WINDOW
from signoff.runtime.run_notices import REPOST_AFTER, run_told
from signoff.runtime.telling import FAILED, Teller, skip_unreadable

log = logging.getLogger("signoff.runner")

FENCE = timedelta(seconds=60)
"""How long a take keeps other relays off a notice: longer than any one send takes."""
FIRST_RETRY = timedelta(seconds=2)
LAST_RETRY = timedelta(seconds=15)
"""A failed send is tried again after `FIRST_RETRY`, doubling with each try, at most `LAST_RETRY`
(the default sweep interval): once Slack is back, a card is in line by the next sweep or two."""
RECOVER_AFTER = timedelta(seconds=10)
"""How old what a run owes must be before recovery tells it on the run's behalf (its own worker
tells it at once)."""
REDRAWS_AT_MOST = 3
"""Draws of one card in a row, each because the approval moved on during the last."""

ToTell = Callable[[RunRecord, ApprovalRecord, Iterable[str]], list[str]]
"""Who among some ids to tell directly that an approval waits for them (`Deciders.to_tell`)."""


def worth_sending(notice: OfApproval, approval: ApprovalRecord, now: datetime) -> bool:
    """Whether the notice still says something true: a reminder or an escalation only of an
    approval still open; a break-glass's follow-ups only until it is reviewed; a redraw or a review
    always (it shows the approval as it is)."""
    match notice:
        case Remind() | Escalate():
            return is_open(approval, now)
        case FollowUpGlass():
            return approval.glass_review is None
        case Redraw() | ShowGlassReview():
            return True


def card_method(approval: ApprovalRecord) -> str:
    """The notifier method that redraws `approval`'s card as it is: a pending one keeps its
    buttons, an expired one also tells its requester (once), any other shows its outcome."""
    return {"pending": "approval_updated", "expired": "approval_expired"}.get(approval.status, "approval_decided")


def retry_in(tries: int, notice: Notice | None = None) -> timedelta:
    """When `notice`, which failed its `tries`-th send, is due again (a card's post: `REPOST_AFTER`)."""
    backoff: timedelta = min(FIRST_RETRY * 2 ** min(tries - 1, 16), LAST_RETRY)
    return max(backoff, REPOST_AFTER) if isinstance(notice, PostCards) else backoff


class Relay:
    """Takes notices from the store's outbox and sends each through the teller."""

    def __init__(self, store: Store, teller: Teller, to_tell: ToTell) -> None:
        self.store, self.teller, self.to_tell = store, teller, to_tell

    def send_owed(self, run_id: str | None = None) -> int:
        """Send every approval's notice due now (of `run_id`'s alone, when given); how many were sent."""
        sent = 0
        while held := self.store.take_notices(FENCE, run_id=run_id, limit=AT_ONCE):
            for notice in held:
                sent += self._send(notice)
        return sent

    def tell_run(self, run_id: str, run: RunRecord | None = None, told: list[int] | None = None,
                 owed: Iterable[HeldNotice] | None = None) -> RunRecord | None:
        """Send what the run owes people of its own, in order, stopping at the first that fails
        (those after it wait for it). Only for the holder of the run's lease, which fences them.

        `run`: the run as its holder just saved it, with its history (read here otherwise: cards
        and endings show the run's last steps). `told`: each notice sent is added to it, for the
        holder's next write to drop (`Store.save_step`, `Store.release`), rather than dropped in a
        write of its own (a worker that dies before that write has them told again); without it,
        each is dropped as it is sent. Returns the run as told so far (where its message went
        recorded in its origin), or None if nothing was told or it could not be read. `owed`: what
        the run owes, as the holder's write read it (`Saved.owed`); read here otherwise."""
        if not self.teller.tells:
            return None
        said: RunRecord | None = None
        for held in self.store.run_notices(run_id, limit=AT_ONCE) if owed is None else owed:
            if told is not None and held.seq in told:
                continue  # sent in this pass; its holder's next write drops it
            try:
                run = run or self.store.get_run(run_id)
            except IncompatibleState as exc:  # left owed: an operator may mend it
                skip_unreadable(run_id, exc)
                self._later(held, self.store.now(), "its run cannot be read")
                return None
            if run is None:
                self.store.notice_sent(held.seq)  # nothing left to tell it of
                continue
            said = run_told(self.store, self.teller, run, held)
            if said is None:
                self._later(held, self.store.now(), f"{held.notice.kind} failed")
                return run
            run = said
            if told is None:
                self.store.notice_sent(held.seq)
            else:
                told.append(held.seq)
        return said

    def recover_runs(self, min_age: timedelta = RECOVER_AFTER) -> None:
        """Tell what runs nobody drives still owe of their own (their worker died, or Slack was
        down), holding each run's lease as its worker would, heartbeat and all: a post Slack is
        slow to answer is not taken for a death, nor made twice.

        First, where the cards this replica posted but could not record went is recorded; any
        other run is told only once what it owes is `min_age` old (its own worker tells it at once)."""
        if not self.teller.tells:
            return
        self.teller.record_posts()
        lease = self.teller.lease
        for run_id in self.store.runs_owed_notices(min_age, limit=AT_ONCE):
            held_by = f"{self.teller.worker_id}/tell-{secrets.token_hex(3)}"
            if not self.store.hold(run_id, held_by, lease):
                continue  # a worker or another replica took it meanwhile: it tells them
            try:
                with Heartbeat(self.store, run_id, held_by, lease):
                    self.tell_run(run_id)
            finally:
                self.store.release(run_id, held_by)

    def _send(self, held: HeldNotice) -> bool:
        notice = held.notice
        assert not isinstance(notice, RunNotice), "a run's own notices are sent by `tell_run`"
        approval = self.store.get_approval(notice.approval_id)
        run = self.store.get_run(held.run_id, history=False) if approval is not None else None
        if approval is None or run is None or run.unreadable:
            self.store.notice_sent(held.seq)  # nothing left to say it of
            return False
        now = self.store.now()
        if not self.teller.tells or not worth_sending(notice, approval, now):
            self.store.notice_sent(held.seq)
            return False
        if isinstance(notice, Redraw) and approval.message is None:
            # Its post is on its way (or failed, and recovery posts it again): redrawn once posted.
            self._later(held, now, "its card is not posted yet")
            return False
        if self._told(notice, run, approval):
            self.store.notice_sent(held.seq)
            return True
        self._later(held, now, f"{notice.kind} failed")
        return False

    def _later(self, held: HeldNotice, now: datetime, why: str) -> None:
        """Leave the notice owed, due again after its backoff; one owed too long is given up."""
        if held.made_at < now - RESYNC_WINDOW:
            log.error("run %s: gave up telling %s%s after %d tries (%s)", held.run_id, held.notice.kind,
                      f" of approval {held.notice.about}" if held.notice.about else "", held.tries, why)
            self.store.notice_sent(held.seq)
        else:
            self.store.notice_failed(held.seq, retry_in(held.tries, held.notice), why)

    def _redraw(self, run: RunRecord, drawn: ApprovalRecord) -> object:
        """Draw the card as `drawn` shows it; should the approval have moved on while the update
        was on its way (another replica may have drawn the newer one first, and ours landed
        after), draw it again, so the last update to land is the newest."""
        for _ in range(REDRAWS_AT_MOST):
            told = self.teller.notify(card_method(drawn), run, drawn, self.teller.card_of(run, drawn))
            now = self.store.get_approval(drawn.approval_id)
            if told is FAILED or now is None or not card_redraws(drawn, now):
                return told
            drawn = now
        return told

    def _told(self, notice: OfApproval, run: RunRecord, approval: ApprovalRecord) -> bool:
        """Send `notice` through the teller (which logs and audits a failure); whether it went."""
        teller = self.teller
        match notice:
            case Remind(first=first):
                approvers = (approval.asked or {}).get("approvers") or ()
                told = teller.notify(notice.kind, run, approval, self.to_tell(run, approval, approvers) if first else [])
            case Escalate(added=added):
                told = teller.notify(notice.kind, run, approval, list(added), self.to_tell(run, approval, added))
            case Redraw():
                told = self._redraw(run, approval)
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
