"""A review of standing access as a Slack message: each grant and API key in force with Keep and
Revoke, each button carrying only the review and the line it answers. Pure."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from signoff.bot.arguments import ToolDisplay
from signoff.bot.slack.blocks import (
    MAX_CONFIRM_BUTTON,
    MAX_CONFIRM_TEXT,
    MAX_CONFIRM_TITLE,
    MAX_SECTION_TEXT,
    Message,
    actions,
    button,
    clip,
    context,
    header,
    plain_text,
    safe,
    section,
    slack_date,
    user,
)
from signoff.bot.slack.home_tab import grant_text
from signoff.runtime.access_reviews import (
    AccessReview,
    NudgeKind,
    ReviewLine,
    Standing,
    SubjectKind,
    Verdict,
)
from signoff.runtime.api_keys import ApiKey

REVIEW_KEEP_ACTION = "signoff.review.keep"
REVIEW_REVOKE_ACTION = "signoff.review.revoke"
REVIEW_ACTIONS: dict[str, Verdict] = {REVIEW_KEEP_ACTION: "keep", REVIEW_REVOKE_ACTION: "revoke"}
LINES_ON_A_CARD = 20
"""Unanswered lines a review's message shows with buttons (Slack allows 50 blocks, two a line);
the next ones take their place as these are answered."""
_VERDICT_WORDS = {"keep": ":white_check_mark: kept", "revoke": ":no_entry: revoked"}


def line_value(review: AccessReview, line: ReviewLine) -> str:
    """What Keep and Revoke carry: the review and the line, nothing else."""
    return f"{review.review_id}|{line.kind}|{line.subject}"


def parse_line_value(value: str) -> tuple[str, SubjectKind, str] | None:
    """`line_value` read back: (review id, kind, subject), or None for anything else."""
    review_id, _, rest = value.partition("|")
    kind, _, subject = rest.partition("|")
    if not review_id.startswith("rev_") or not subject or kind not in ("grant", "key"):
        return None
    return review_id, "grant" if kind == "grant" else "key", subject


def review_message(review: AccessReview, standing: Standing,
                   display: Callable[[str], ToolDisplay]) -> Message:
    """The review: what is in force, Keep and Revoke on each unanswered line, and the answers so far."""
    waiting = review.unanswered
    title = f"Review of standing access: {len(waiting)} of {len(review.lines)} to answer"
    blocks = [header(title), context(
        f"Review of {slack_date(review.period)}. Keep what is still needed, revoke the rest: a revoke takes "
        "effect at once. Grants are answered by the people who may approve their calls, keys by the "
        "configured approvers.")]
    if not review.lines:
        blocks.append(section("Nothing is in force: no grants, no API keys."))
    for line in waiting[:LINES_ON_A_CARD]:
        blocks += [section(clip(line_text(line, standing, display), MAX_SECTION_TEXT)),
                   actions(f"signoff.review.{line.kind}.{clip(line.subject, 200)}", [
                       button("Keep", REVIEW_KEEP_ACTION, line_value(review, line), "primary"),
                       revoke_button(review, line)])]
    if len(waiting) > LINES_ON_A_CARD:
        blocks.append(context(f"and {len(waiting) - LINES_ON_A_CARD} more, shown here as these are answered"))
    answered = [answered_text(line) for line in review.lines if line.verdict is not None]
    if answered:
        blocks.append(section(clip("*Answered*\n" + "\n".join(answered), MAX_SECTION_TEXT)))
    return Message(title, blocks)


def revoke_button(review: AccessReview, line: ReviewLine) -> dict[str, Any]:
    """Revoke, behind an "are you sure?": it takes effect at once and cannot be undone."""
    element = button("Revoke", REVIEW_REVOKE_ACTION, line_value(review, line), "danger")
    what = f"grant {line.subject}" if line.kind == "grant" else f"API key {line.subject}"
    then = ("the calls it covered are asked about again" if line.kind == "grant"
            else "every request with it is refused")
    element["confirm"] = {"title": plain_text(f"Revoke {what}?", MAX_CONFIRM_TITLE),
                          "text": plain_text(f"From now on {then}, on every replica. It cannot be undone.",
                                             MAX_CONFIRM_TEXT),
                          "confirm": plain_text("Revoke", MAX_CONFIRM_BUTTON),
                          "deny": plain_text("Cancel", MAX_CONFIRM_BUTTON), "style": "danger"}
    return element


def line_text(line: ReviewLine, standing: Standing, display: Callable[[str], ToolDisplay]) -> str:
    """One line as the review shows it: a grant as App Home words it, a key with its scopes."""
    if line.kind == "grant":
        grant = standing.grants.get(line.subject)
        if grant is None:
            return f":ticket: grant `{safe(line.subject, 80)}`, which no longer exists"
        last = f", last {slack_date(grant.last_used_at)}" if grant.last_used_at else ""
        return f":ticket: {grant_text(grant, display(grant.tool))}{last}"
    key = standing.keys.get(line.subject)
    return key_text(key) if key is not None else f":key: key `{safe(line.subject, 80)}`, which no longer exists"


def key_text(key: ApiKey) -> str:
    """An API key as a review shows it: its name, what it may ask about and where, for whom, its last use."""
    channels = ", ".join(f"<#{c}>" for c in (key.channel, *key.other_channels))
    speaks = f"for {user(key.requester)}" if key.requester else "for itself"
    used = f"last used {slack_date(key.last_used_at)}" if key.last_used_at else "never used"
    return (f":key: API key *{safe(key.name, 80)}*: may ask about `{safe(','.join(key.tools), 300)}`, cards to "
            f"{channels}, {speaks}; made {slack_date(key.created_at)}, {used}")


def answered_text(line: ReviewLine) -> str:
    verdict = _VERDICT_WORDS[line.verdict or "keep"]
    when = f" {slack_date(line.decided_at)}" if line.decided_at else ""
    return f"{verdict}: {line.kind} `{safe(line.subject, 80)}` by {user(line.decided_by)}{when}"


def nudge_message(review: AccessReview, kind: NudgeKind, reviewers: str) -> Message:
    """A reminder in the review's thread, to its reviewers; an escalation, to the whole channel."""
    waiting = len(review.unanswered)
    one = waiting == 1
    lines = f"{waiting} line{'' if one else 's'} of this review of standing access"
    if kind == "remind":
        text = f":bell: {reviewers}: {lines} still wait{'s' if one else ''} for Keep or Revoke."
    else:
        text = (f":rotating_light: <!here> {lines} {'is' if one else 'are'} still unanswered; {reviewers}, "
                "please answer.")
    return Message(text, [section(text)])


def answer_text(verdict: Verdict, kind: SubjectKind) -> str:
    """What the person who pressed Keep or Revoke is told when it was done."""
    if verdict == "keep":
        return f"Kept: the {kind} stays in force; the review records that you kept it."
    if kind == "grant":
        return "Revoked: from now on, the calls it covered are asked about again."
    return "Revoked: every request with this key is refused from now on."

