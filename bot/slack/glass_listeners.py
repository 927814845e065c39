"""Break glass (its button and its modal) and the review card's Confirm and Flag: the listeners.
The decision itself goes through `Runner.decide` as every approve does, so what is bound, who may
and what a replay does are decided where they are for any click."""

from __future__ import annotations

import logging
from typing import Any, assert_never

from slack_bolt import Ack

from signoff.bot.slack import blocks
from signoff.bot.slack.decisions import Decisions, Rest
from signoff.bot.slack.glass_cards import glass_modal
from signoff.bot.slack.payloads import ApprovalClick, Malformed, parse_glass_submission
from signoff.bot.slack.replies import APPROVAL_GONE, not_done_text
from signoff.runtime.approval import bound_to
from signoff.runtime.break_glass import AlreadyReviewed, NotBroken, Reviewed, Verdict
from signoff.runtime.records import Missing, NotAllowed

log = logging.getLogger("signoff.bot.slack.glass_listeners")
VERDICTS: dict[str, Verdict] = {blocks.GLASS_CONFIRM_ACTION: "confirmed", blocks.GLASS_FLAG_ACTION: "flagged"}


class GlassListeners:
    """Breaking the glass from a card, and reviewing it from its review card."""

    def __init__(self, decisions: Decisions) -> None:
        self.decisions = decisions
        self.runner, self.notices = decisions.runner, decisions.notices

    def on_break_glass(self, ack: Ack, body: dict[str, Any]) -> Rest | None:
        click = self.decisions.acked_click(ack, body)
        return None if click is None else lambda: self._open(click)

    def _open(self, click: ApprovalClick) -> None:
        approval = self.runner.get_approval(click.approval_id)
        refusal, run = self.decisions.modal_refusal(click, approval)
        if run is not None and approval is not None and (refusal is None or click.where.user == run.requester):
            # The requester may break the glass though they may not approve: asked again, as such.
            reason = self.runner.breaker_refusal(click.where.user, run, approval, None)
            refusal = not_done_text(reason) if reason else None
            if refusal is None and not click.where.trigger_id:
                refusal = "Slack did not send what is needed to open the form; please click again."
        if refusal is not None or approval is None:
            self.notices.tell(click.where, refusal or APPROVAL_GONE)
            return
        self.decisions.notifier.client.views_open(trigger_id=click.where.trigger_id,
                                                  view=glass_modal(approval, channel=click.where.channel))

    def on_glass_submitted(self, ack: Ack, body: dict[str, Any]) -> Rest | None:
        ack()
        submission = parse_glass_submission(body)
        if isinstance(submission, Malformed):
            log.warning("break-glass form not understood: %s", submission.reason)
            return None

        def break_glass() -> None:
            outcome = self.runner.decide(submission.approval_id, submission.digest, submission.where.user,
                                         approved=True, glass=submission.reason, drive=True, show=False)
            self.decisions.after_decision(outcome, submission.where)
        return break_glass

    def on_review(self, ack: Ack, body: dict[str, Any]) -> Rest | None:
        click = self.decisions.acked_click(ack, body)
        if click is None or click.action not in VERDICTS:
            return None
        return lambda: self._review(click, VERDICTS[click.action])

    def _review(self, click: ApprovalClick, verdict: Verdict) -> None:
        approval = self.runner.get_approval(click.approval_id)
        if approval is None or not bound_to(approval, click.digest):
            self.notices.tell(click.where, "This button no longer matches the break-glass it was posted for.")
            return
        outcome = self.runner.review_glass(click.approval_id, click.where.user, verdict)
        match outcome:
            case Reviewed(approval=reviewed):
                self.notices.tell(click.where, f"You {verdict} the break-glass on `{blocks.safe(reviewed.tool, 64)}`.")
            case AlreadyReviewed(approval=reviewed):
                review = reviewed.glass_review or {}
                self.notices.tell(click.where, f"Already reviewed: {review.get('verdict')} by "
                                               f"{blocks.user(review.get('by'))}. Nothing was changed.")
            case NotBroken():
                self.notices.tell(click.where, "This call was not approved by breaking the glass; there is nothing "
                                               "to review.")
            case NotAllowed(reason=reason):
                self.notices.tell(click.where, not_done_text(reason))
            case Missing(what=what):
                self.notices.tell(click.where, f"This {what} no longer exists.")
            case _:
                assert_never(outcome)
