"""Block Kit vocabulary: action ids, Slack's limits, escaping and the block builders messages use.

Every untrusted string passes through `escape` before it enters mrkdwn; `safe` and `code` do it for you.
Text from outside Signoff (the model's words, a tool server's descriptions, previews, results and
errors) is shown only by `untrusted` (one line) or `code` (a code block it cannot close).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from signoff.bot.untrusted import flat, shown_lines
from signoff.bot.words import LIMIT_NAMES, budget_figures, model_label, stop_words
from signoff.runtime.people import is_slack_user, is_user_group
from signoff.runtime.records import RunRecord

APPROVE_ACTION = "signoff.approve"
APPROVE_SIMILAR_ACTION = "signoff.approve_similar"
"""Approve and allow similar calls for a while, where the approval's rule offers a grant."""
DENY_ACTION = "signoff.deny"
EDIT_ACTION = "signoff.edit"
"""Change the call's arguments before anyone approves it: opens the edit modal."""
EDIT_MODAL = "signoff.edit_modal"
APPROVE_ALL_ACTION = "signoff.approve_all"
"""On the card of a turn's several calls: approve each of them the clicker may approve; carries
`approval_buttons.batch_value`, every pending call's approval id and digest."""
REVOKE_GRANT_ACTION = "signoff.revoke_grant"
"""End a grant at once, from App Home; carries the grant id."""
VIEW_ARGS_ACTION = "signoff.view_args"
OPEN_PAGE_ACTION = "signoff.open_page"
"""A link to an approval's page in the web console (its rule needs a fresh sign-in to approve);
Slack opens the link and still sends the click, which is only acknowledged."""
EXTEND_ACTION = "signoff.extend"
CLOSE_ACTION = "signoff.close"
RETRY_ACTION = "signoff.retry"
RECONCILE_DONE_ACTION = "signoff.reconcile.done"
RECONCILE_RETRY_ACTION = "signoff.reconcile.retry"
RECONCILE_ABORT_ACTION = "signoff.reconcile.abort"
REQUEST_AGAIN_ACTION = "signoff.request_again"
"""On the notice of a run that expired with nobody deciding its call: its requester asks again."""
BREAK_GLASS_ACTION = "signoff.break_glass"
"""Approve alone, typing why, where the approval's rule offers break-glass: opens its modal."""
BREAK_GLASS_MODAL = "signoff.break_glass_modal"
GLASS_REASON_BLOCK = "signoff.glass_reason"
GLASS_REASON_INPUT = "reason"
GLASS_CONFIRM_ACTION = "signoff.glass_confirm"
GLASS_FLAG_ACTION = "signoff.glass_flag"
"""The review card of a break-glass: confirm it was warranted, or flag it; each carries `approval_value`."""
GLASS_REVIEW_ACTIONS = (GLASS_CONFIRM_ACTION, GLASS_FLAG_ACTION)
DENY_MODAL = "signoff.deny_modal"
DENY_REASON_BLOCK = "signoff.deny_reason"
DENY_REASON_INPUT = "reason"
ARGS_MODAL = "signoff.args_modal"
VIEW_RESULT_ACTION = "signoff.view_result"
"""*View full result* under a tool result in a run's thread; carries `result_value`."""
RESULT_MODAL = "signoff.result_modal"
COMMAND = "/signoff"
APPROVAL_BLOCK = "signoff.approval"
"""The block of decision buttons under an approval request, on its card and in its modal."""

APPROVAL_ACTIONS = (APPROVE_ACTION, APPROVE_SIMILAR_ACTION, DENY_ACTION, VIEW_ARGS_ACTION, EDIT_ACTION,
                    BREAK_GLASS_ACTION, *GLASS_REVIEW_ACTIONS)
"""Buttons about one approval; each carries `approval_buttons.approval_value` (Approve all carries
`approval_buttons.batch_value`)."""
RUN_ACTIONS = (
    EXTEND_ACTION, CLOSE_ACTION, RETRY_ACTION, RECONCILE_DONE_ACTION, RECONCILE_RETRY_ACTION, RECONCILE_ABORT_ACTION,
    REQUEST_AGAIN_ACTION,
)

# Slack's documented limits (https://api.slack.com/reference/block-kit) that the builders clip to.
# Messages stay under 50 blocks and ~12k characters by construction; the test Slack API enforces both.
MAX_VIEW_BLOCKS = 100
MAX_SECTION_TEXT = 3000
MAX_CONTEXT_TEXT = 2000
MAX_HEADER = 150
MAX_BUTTON_TEXT = 75
MAX_BUTTON_VALUE = 2000
MAX_ACTION_ID = 255
MAX_MODAL_TITLE = 24
MAX_PRIVATE_METADATA = 3000
MAX_FALLBACK = 1000
MAX_REASON = 500
# The confirmation dialog object's: title, text, and each of its two buttons.
MAX_CONFIRM_TITLE = 100
MAX_CONFIRM_TEXT = 300
MAX_CONFIRM_BUTTON = 30


@dataclass(frozen=True)
class Message:
    """A Slack message: the plain `text` fallback and its blocks."""

    text: str
    blocks: list[dict[str, Any]]

    def as_kwargs(self) -> dict[str, Any]:
        return {"text": self.text, "blocks": self.blocks}


# -- text primitives -------------------------------------------------------------------------


def escape(text: Any) -> str:
    """Slack's three control characters escaped, so no mention, broadcast or link can be formed."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def clip(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, marked with an ellipsis when cut."""
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def safe(text: Any, limit: int) -> str:
    """`text` escaped and cut to at most `limit` characters without splitting an entity."""
    raw = str(text)
    escaped = escape(raw[:limit])
    if len(raw) <= limit and len(escaped) <= limit:
        return escaped
    out, size = [], 0
    for char in raw:
        piece = escape(char)
        if size + len(piece) > limit - 1:
            break
        out.append(piece)
        size += len(piece)
    return "".join(out) + "…"


def untrusted(text: Any, limit: int) -> str:
    """Text from outside Signoff as mrkdwn that cannot draw the message it stands in: on one line
    (`untrusted.flat`), escaped, cut to `limit`, and with look-alikes for the backticks and asterisks
    Slack has no escape for, so it opens no code block and bolds no heading."""
    return safe(flat(text), limit).translate(_UNFORMATTED)


_UNFORMATTED = str.maketrans({"`": "ˋ", "*": "∗"})


def code(text: Any, limit: int) -> str:
    """A preformatted block of untrusted text, as `untrusted.shown_lines` shows it; Slack neither
    formats nor links inside it, and three backticks in the text cannot close it."""
    body = safe(_code_text(text), limit - 8).replace("```", "ˋˋˋ")
    return f"```\n{body}\n```"


def code_fits(text: Any, limit: int) -> bool:
    """Whether `code(text, limit)` shows all of `text`."""
    return len(escape(_code_text(text))) <= limit - 8


def _code_text(text: Any) -> str:
    return "\n".join(shown_lines(text))


def user(user_id: Any) -> str:
    """A mention for a real-looking user id (or user group id); anything else is shown as escaped text."""
    if is_slack_user(user_id):
        return f"<@{user_id}>"
    return f"<!subteam^{user_id}>" if is_user_group(user_id) else safe(user_id, 40)


def with_mentions(text: Any, limit: int, people: Iterable[Any]) -> str:
    """`untrusted(text, limit)` with each of `people` (ids from our own records, never from the text)
    shown as a mention wherever it stands as a whole word, e.g. `closed by U0ALICE`."""
    shown = untrusted(text, limit)
    for person in {p for p in people if is_slack_user(p)}:
        shown = re.sub(rf"(?<![A-Za-z0-9@]){re.escape(person)}(?![A-Za-z0-9])", user(person), shown)
    return shown


_CHANNEL_ID = re.compile(r"^[CG][A-Z0-9]{2,30}$")
_TEAM_ID = re.compile(r"^[TE][A-Z0-9]{2,30}$")


def run_link(origin: Mapping[str, Any], label: str) -> str | None:
    """A link to the channel a run is posted in (its thread is under the run message there), or None
    for a run not posted in a channel. Slack's `app_redirect` needs no permalink call and no domain."""
    channel, team = origin.get("channel"), origin.get("team")
    if not (isinstance(channel, str) and _CHANNEL_ID.match(channel)):
        return None
    query = {"channel": channel, **({"team": team} if isinstance(team, str) and _TEAM_ID.match(team) else {})}
    return f"<{escape('https://slack.com/app_redirect?' + urlencode(query))}|{safe(label, 80)}>"


def slack_date(moment: datetime) -> str:
    """A date Slack shows in the reader's time zone, with a UTC fallback."""
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    fallback = moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"<!date^{int(moment.timestamp())}^{{date_short_pretty}} at {{time}}|{fallback}>"


def slack_time(moment: datetime) -> str:
    """A time of day Slack shows in the reader's time zone (`14:05`), with a UTC fallback."""
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return f"<!date^{int(moment.timestamp())}^{{time}}|{moment.astimezone(UTC):%H:%M} UTC>"


def section(text: str) -> dict[str, Any]:
    assert len(text) <= MAX_SECTION_TEXT, len(text)
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def context(*parts: str) -> dict[str, Any]:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": clip(p, MAX_CONTEXT_TEXT)} for p in parts]}


def header(text: str) -> dict[str, Any]:
    return {"type": "header", "text": {"type": "plain_text", "text": clip(text, MAX_HEADER), "emoji": True}}


def button(label: str, action_id: str, value: str, style: str | None = None) -> dict[str, Any]:
    assert len(action_id) <= MAX_ACTION_ID and len(value) <= MAX_BUTTON_VALUE
    element = {"type": "button", "text": {"type": "plain_text", "text": clip(label, MAX_BUTTON_TEXT)},
               "action_id": action_id, "value": value}
    if style:
        element["style"] = style
    return element


def plain_text(text: str, limit: int) -> dict[str, Any]:
    """A plain_text object, escaped like any text Slack decodes (it shows no mrkdwn), cut to `limit`."""
    return {"type": "plain_text", "text": safe(text, limit)}


def actions(block_id: str, elements: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "actions", "block_id": block_id, "elements": elements}


# -- shared pieces -----------------------------------------------------------------------------

GOAL_CHARS = 600
"""How much of a run's goal a message quotes."""
STATUS_EMOJI = {
    "idle": ":hourglass_flowing_sand:", "running": ":gear:", "awaiting_approval": ":raised_hand:",
    "done": ":white_check_mark:", "budget_exhausted": ":battery:", "failed": ":x:",
    "cancelled": ":no_entry_sign:", "expired": ":hourglass:", "needs_reconciliation": ":warning:",
    "stalled": ":repeat:", "awaiting_caller": ":outbox_tray:",
}
"""The emoji beside each run status, wherever a run's status is shown."""


def fallback_text(text: str) -> str:
    """A message's plain `text` fallback: escaped, cut to Slack's limit."""
    return safe(text, MAX_FALLBACK)


def model_name(spec: str) -> str:
    """The model a run uses, as people read it (`words.model_label`), escaped."""
    return safe(model_label(spec), 160)


def stop_reason(run: RunRecord, limit: int) -> str:
    """Why the run stopped (`words.stop_words`), escaped, with whoever stopped it as a mention."""
    stop = run.stop or {}
    return with_mentions(stop_words(stop, run.state), limit, [stop.get("by"), run.requester])


def rule_name(rule: str) -> str:
    """A policy rule's name in code; the name is the operator's, escaped all the same."""
    return f"`{safe(rule, 80).replace('`', 'ˋ')}`"


def budget_line(state: Mapping[str, Any]) -> str:
    """`words.budget_figures` for Slack, e.g. `steps 2/8 · tool calls 1/5`."""
    return " · ".join(budget_figures(state)) or "no limits"


def budget_limits(budget: Mapping[str, Any]) -> str:
    """The limits of a fresh run, e.g. `8 steps, $1.00`."""
    parts = [f"{LIMIT_NAMES[k]} ≤ {v:g}" for k, v in budget.items() if v is not None and k in LIMIT_NAMES]
    return ", ".join(parts) or "no limits"


def json_text(value: Any) -> str:
    """`value` as JSON for people: keys sorted, non-ASCII kept, anything else as its `str`."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def clip_lines(lines: Sequence[str], limit: int) -> str:
    """Whole lines joined up to `limit` characters, with a count of the rest."""
    out, size = [], 0
    for index, line in enumerate(lines):
        if size + len(line) + 1 > limit - 30:
            out.append(f"… and {len(lines) - index} more")
            break
        out.append(line)
        size += len(line) + 1
    return "\n".join(out)


def code_sections(lines: Sequence[str], max_sections: int) -> list[str] | None:
    """`lines` escaped in code blocks of at most `MAX_SECTION_TEXT` characters each, every
    character kept; None if that takes more than `max_sections` sections.

    A line too long for one section goes on in the next, marked outside the code on both sides,
    and is never split inside an escape (ours, like `\\u202e`, or Slack's, like `&amp;`).
    """
    room = MAX_SECTION_TEXT - len(_CODE_OPEN) - len(_CODE_CLOSE) - len(_CONTINUED) - len(_CONTINUES)
    bodies: list[list[str]] = [[]]
    size = 0
    splits: set[int] = set()  # sections whose last line goes on in the next one
    for line in lines:
        pieces = [escape(token) for token in _TOKEN.findall(line)] or [""]
        if bodies[-1] and size + 1 + sum(map(len, pieces)) > room:
            bodies.append([])
            size = 0
        if bodies[-1]:
            bodies[-1].append("\n")
            size += 1
        for piece in pieces:
            if size + len(piece) > room:
                splits.add(len(bodies) - 1)
                bodies.append([])
                size = 0
            bodies[-1].append(piece)
            size += len(piece)
        if len(bodies) > max_sections:
            return None
    return [(_CONTINUED if index - 1 in splits else "") + _CODE_OPEN + "".join(body) + _CODE_CLOSE
            + (_CONTINUES if index in splits else "") for index, body in enumerate(bodies)]


def code_section_lines(texts: Sequence[str]) -> list[str]:
    """The lines a person reads in mrkdwn `texts`, as `code_sections` made them: the inverse,
    with split lines joined and Slack's entities undone (how tests and scenarios check exactness)."""
    lines: list[str] = []
    for text in texts:
        found = _CODE.search(text)
        if found is None:
            continue
        part = found.group(1).replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&").split("\n")
        if lines and text.startswith(_CONTINUED):
            lines[-1] += part.pop(0)
        lines += part
    return lines


# A code block, so Slack applies no bold, italics, links or emoji to the arguments; `literal`
# escapes backticks, so nothing inside can close it early.
_CODE_OPEN, _CODE_CLOSE = "```\n", "\n```"
_CODE = re.compile(r"```\n(.*)\n```", re.DOTALL)
_CONTINUED, _CONTINUES = "_…continued from above_\n", "\n_continues below…_"
_TOKEN = re.compile(r"\\U[0-9a-f]{8}|\\u[0-9a-f]{4}|\\.|.", re.DOTALL)
"""One shown character of an `argument_lines` line: an escape sequence or a single character."""


MODEL_WORDS_CHARS = 280
"""What a card quotes of the model's words: a phone screen's worth; the run's history has them all."""


def model_says(words: str) -> str:
    """The model's own words beside its call, in mrkdwn: quoted and labelled as the model's (they are
    neither ours nor checked; the arguments are what runs)."""
    return f"*The model says*\n>{untrusted(words, MODEL_WORDS_CHARS)}"


def notice(text: str) -> Message:
    """A short notice (refusals, confirmations); `text` is mrkdwn already made safe by the caller."""
    return Message(clip(text, MAX_FALLBACK), [section(clip(text, MAX_SECTION_TEXT))])
