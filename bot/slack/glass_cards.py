"""What Slack says of a break-glass: the modal that asks why, the loud notice to the rule's channels,
the review card the rule's approvers confirm or flag it on, its reminder and its overdue notice,
and (`GlassNotices`) the notifier's part that posts them. Untrusted strings (the reason typed, the
tool's name) pass through `bot.slack.blocks.safe`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from slack_sdk import WebClient

from signoff.bot.slack.approval_buttons import approval_value
from signoff.bot.slack.blocks import (
    APPROVAL_BLOCK,
    BREAK_GLASS_MODAL,
    GLASS_CONFIRM_ACTION,
    GLASS_FLAG_ACTION,
    GLASS_REASON_BLOCK,
    GLASS_REASON_INPUT,
    MAX_MODAL_TITLE,
    MAX_PRIVATE_METADATA,
    MAX_REASON,
    Message,
    actions,
    button,
    clip,
    context,
    fallback_text,
    run_link,
    safe,
    section,
    slack_date,
    user,
)
from signoff.bot.words import people, receipt_words
from signoff.runtime.break_glass import FollowUp, offer_of, review_by
from signoff.runtime.records import ApprovalRecord, RunRecord

REASON_SHOWN = 500


def glass_modal(approval: ApprovalRecord, *, channel: str | None = None) -> dict[str, Any]:
    """The modal that asks why the glass must be broken before approving alone."""
    offer = offer_of(approval.asked)
    assert offer is not None, "offered only where the rule offers it"
    metadata = json.dumps({"approval": approval.approval_id, "digest": approval.digest,
                           **({"channel": channel} if channel else {})})
    assert len(metadata) <= MAX_PRIVATE_METADATA
    told = people([f"<#{c}>" for c in offer.notify])
    return {
        "type": "modal", "callback_id": BREAK_GLASS_MODAL, "private_metadata": metadata,
        "title": {"type": "plain_text", "text": clip("Break glass", MAX_MODAL_TITLE)},
        "submit": {"type": "plain_text", "text": "Break glass and run"},
        "close": {"type": "plain_text", "text": "Cancel"},
        "blocks": [
            section(f":rotating_light: You approve `{safe(approval.tool, 64)}` (key `{safe(approval.key, 120)}`) "
                    f"*alone*, as shown on its card, and it runs at once. {told} will be told with your reason, "
                    "and the rule's approvers review it afterwards."),
            {"type": "input", "block_id": GLASS_REASON_BLOCK,
             "label": {"type": "plain_text", "text": "Why can this not wait for the approvers?"},
             "element": {"type": "plain_text_input", "action_id": GLASS_REASON_INPUT, "multiline": True,
                         "min_length": offer.reason_min_chars, "max_length": MAX_REASON}},
        ],
    }


def _what(run: RunRecord, approval: ApprovalRecord) -> str:
    glass = approval.glass or {}
    link = run_link(run.origin, f"run {run.run_id}") or f"run `{safe(run.run_id, 64)}`"
    return (f"{user(glass.get('by'))} approved `{safe(approval.tool, 64)}` (key `{safe(approval.key, 120)}`) "
            f"alone in {link}, requested by {user(run.requester)}.\n*Reason:* {safe(glass.get('reason'), REASON_SHOWN)}")


def _deadline(approval: ApprovalRecord) -> str:
    at = review_by(approval)
    return slack_date(at) if at is not None else "its deadline"


def glass_notice(run: RunRecord, approval: ApprovalRecord, receipt: Mapping[str, Any] | None = None) -> Message:
    """To each channel the rule names: someone broke the glass, who, on what, why, and the decision's
    signed receipt in short (where decisions are signed)."""
    text = (f":rotating_light: *Break-glass:* {_what(run, approval)}\nIts review is owed by {_deadline(approval)}.")
    blocks = [section(text), *([context(receipt_words(receipt))] if receipt is not None else [])]
    return Message(fallback_text(f"Break-glass: {approval.tool} approved alone"), blocks)


def review_card(run: RunRecord, approval: ApprovalRecord) -> Message:
    """Where the rule's approvers confirm or flag it; once reviewed, what they said instead of buttons."""
    asked = [user(a) for a in (approval.asked or {}).get("approvers") or ()]
    blocks = [section(f":rotating_light: *Break-glass to review:* {_what(run, approval)}")]
    review = approval.glass_review
    if review is None:
        blocks += [context(f"For {people(asked) or 'the rule’s approvers'} to review by {_deadline(approval)}; "
                           "not by the person who broke it."),
                   actions(APPROVAL_BLOCK, [button("Confirm", GLASS_CONFIRM_ACTION, approval_value(approval), "primary"),
                                            button("Flag", GLASS_FLAG_ACTION, approval_value(approval), "danger")])]
    else:
        verdict = ":white_check_mark: Confirmed" if review.get("verdict") == "confirmed" else ":triangular_flag_on_post: Flagged"
        blocks.append(context(f"{verdict} by {user(review.get('by'))}."))
    return Message(fallback_text(f"Break-glass to review: {approval.tool}"), blocks)


def follow_up_text(approval: ApprovalRecord, kind: FollowUp) -> str:
    """In the review card's thread: a reminder half way, or that it is overdue."""
    asked = people([user(a) for a in (approval.asked or {}).get("approvers") or ()])
    if kind == "overdue":
        return f":warning: *Overdue:* this break-glass was to be reviewed by {_deadline(approval)}. {asked}"
    return f":bell: *Reminder:* this break-glass still waits for its review, due {_deadline(approval)}. {asked}"


def flagged_notice(run: RunRecord, approval: ApprovalRecord) -> Message:
    review = approval.glass_review or {}
    text = (f":triangular_flag_on_post: *Break-glass flagged* by {user(review.get('by'))}: {_what(run, approval)}")
    return Message(fallback_text(f"Break-glass flagged: {approval.tool}"), [section(text)])


class GlassNotices:
    """`Notifier.glass_follow_up` and `glass_reviewed` for `SlackNotifier`, which sets `client`."""

    client: WebClient

    def glass_follow_up(self, run: RunRecord, approval: ApprovalRecord, kind: FollowUp,
                        receipt: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """Tell, remind or say it is overdue; a review card not posted yet (a crash, an outage, a
        sweep that found the first follow-up late) is posted, with the notice, whatever `kind`.
        Returns where the review card was posted, when it was, for the runner to record."""
        notify = tuple((approval.glass or {}).get("notify") or ())
        posted: dict[str, Any] | None = None
        if approval.glass_message is None:
            for channel in notify:
                self._say(channel, glass_notice(run, approval, receipt))
            where = self._say(self._review_channel(run, approval), review_card(run, approval))
            posted = {"channel": str(where["channel"]), "ts": str(where["ts"])}
        card = posted or approval.glass_message or {}
        if kind != "tell" and card:
            text = follow_up_text(approval, kind)
            self._say(str(card["channel"]), Message(fallback_text(text), [section(text)]), str(card["ts"]))
        if kind == "overdue":
            for channel in notify:
                text = follow_up_text(approval, kind)
                self._say(channel, Message(fallback_text(text), [section(text)]))
        return posted

    def glass_reviewed(self, run: RunRecord, approval: ApprovalRecord) -> None:
        card = approval.glass_message
        if card:
            self.client.chat_update(channel=str(card["channel"]), ts=str(card["ts"]),
                                    **review_card(run, approval).as_kwargs())
        if (approval.glass_review or {}).get("verdict") == "flagged":
            for channel in (approval.glass or {}).get("notify") or ():
                self._say(channel, flagged_notice(run, approval))

    @staticmethod
    def _review_channel(run: RunRecord, approval: ApprovalRecord) -> str:
        """The approval card's channel, where the rule's approvers were asked; else the run's."""
        return str((approval.message or {}).get("channel") or run.origin.get("channel"))

    def _say(self, channel: str, message: Message, thread_ts: str | None = None) -> Any:
        return self.client.chat_postMessage(channel=channel, unfurl_links=False, unfurl_media=False,
                                            thread_ts=thread_ts, **message.as_kwargs())
