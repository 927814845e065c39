"""Slack request bodies parsed into small frozen values. Pure: no I/O, never raises on bad input.

A malformed body becomes `Malformed(reason)`, which a listener shows to the clicker instead of
letting an exception escape into Bolt.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from signoff.bot.slack.blocks import (
    APPROVAL_ACTIONS,
    APPROVE_ALL_ACTION,
    BREAK_GLASS_MODAL,
    DENY_MODAL,
    DENY_REASON_BLOCK,
    DENY_REASON_INPUT,
    EDIT_MODAL,
    GLASS_REASON_BLOCK,
    GLASS_REASON_INPUT,
    MAX_REASON,
    REVOKE_GRANT_ACTION,
    RUN_ACTIONS,
)
from signoff.runtime.batches import MAX_BATCH_CALLS
from signoff.runtime.people import is_slack_user

_CHANNEL = re.compile(r"^[CGDU][A-Z0-9]{2,30}$")
_APPROVAL_ID = re.compile(r"^apr_[A-Za-z0-9_-]{1,64}$")
_GRANT_ID = re.compile(r"^grt_[A-Za-z0-9_-]{1,64}$")
_DIGEST = re.compile(r"^[0-9a-f]{64}$")
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
_TS = re.compile(r"^\d{1,12}\.\d{1,9}$")
_VERSION = re.compile(r"^\d{1,12}$")

OUTDATED_BUTTON = ("this message is out of date (an older Signoff posted it), so nothing was done; "
                   "`/signoff status <run>` says where the run stands")


@dataclass(frozen=True)
class Malformed:
    """A body we cannot act on, and why (shown to the person, so no echo of their input)."""

    reason: str


@dataclass(frozen=True)
class Where:
    """Who acted and where the answer goes: a channel message, or the App Home tab."""

    user: str
    channel: str | None = None
    message_ts: str | None = None
    trigger_id: str | None = None
    response_url: str | None = None
    in_home: bool = False
    modal_id: str | None = None
    """The modal the click came from (the full-arguments modal), to show the outcome in."""


@dataclass(frozen=True)
class ApprovalClick:
    """Approve or Deny pressed on an approval request."""

    action: str
    approval_id: str
    digest: str
    where: Where


@dataclass(frozen=True)
class BatchClick:
    """Approve all pressed on the card of a turn's several calls: each call's (approval id, digest)."""

    approvals: tuple[tuple[str, str], ...]
    where: Where


@dataclass(frozen=True)
class RunClick:
    """Extend, Close, Retry or a reconciliation button pressed on a stopped run."""

    action: str
    run_id: str
    shown_version: int
    """`RunRecord.version` of the run as the message showed it: the button acts on that state only."""
    where: Where


@dataclass(frozen=True)
class GrantClick:
    """Revoke pressed beside a grant in App Home."""

    grant_id: str
    where: Where


@dataclass(frozen=True)
class EditSubmission:
    """The edit modal submitted: its approval, and the inputs' state by block id (`state.values`)."""

    approval_id: str
    digest: str
    values: dict[str, Any]
    where: Where
    """Who submitted it, and where the modal was opened: a channel, or App Home (`in_home`)."""


@dataclass(frozen=True)
class DenySubmission:
    """The Deny modal submitted, with its optional reason (or the break-glass modal, with its
    justification)."""

    approval_id: str
    digest: str
    reason: str
    where: Where


@dataclass(frozen=True)
class StartRun:
    goal: str


@dataclass(frozen=True)
class ShowStatus:
    run_id: str


@dataclass(frozen=True)
class CancelRun:
    run_id: str


@dataclass(frozen=True)
class ListRuns:
    pass


@dataclass(frozen=True)
class ShowHelp:
    pass


Request = StartRun | ShowStatus | CancelRun | ListRuns | ShowHelp


@dataclass(frozen=True)
class Command:
    """`/signoff ...`: what was asked, by whom, from where."""

    request: Request
    where: Where
    team: str | None = None
    team_domain: str | None = None
    """The workspace's domain (`<domain>.slack.com`), which links to a message are made with."""


def parse_click(body: Any) -> ApprovalClick | BatchClick | RunClick | GrantClick | Malformed:
    """A `block_actions` body with one of our buttons."""
    if not isinstance(body, dict) or body.get("type") != "block_actions":
        return Malformed("not a button click")
    actions = body.get("actions")
    if not isinstance(actions, list) or len(actions) != 1 or not isinstance(actions[0], dict):
        return Malformed("expected exactly one action")
    where = _where(body)
    if isinstance(where, Malformed):
        return where
    action_id, value = actions[0].get("action_id"), actions[0].get("value")
    if not isinstance(value, str) or len(value) > 2000:
        return Malformed("the button carries no usable value")
    if action_id in APPROVAL_ACTIONS:
        parsed = parse_approval_value(value)
        if isinstance(parsed, Malformed):
            return parsed
        return ApprovalClick(action_id, parsed[0], parsed[1], where)
    if action_id in RUN_ACTIONS:
        parsed_run = parse_run_value(value)
        if isinstance(parsed_run, Malformed):
            return parsed_run
        return RunClick(action_id, parsed_run[0], parsed_run[1], where)
    if action_id == APPROVE_ALL_ACTION:
        parts = value.split(",")
        if not 1 <= len(parts) <= MAX_BATCH_CALLS:  # a card holds the calls of one turn
            return Malformed("Approve all names no approvals, or more than a card holds")
        pairs = [parse_approval_value(part) for part in parts]
        if any(isinstance(pair, Malformed) for pair in pairs):
            return Malformed("Approve all does not carry approval ids and digests")
        return BatchClick(tuple(dict.fromkeys(pair for pair in pairs if not isinstance(pair, Malformed))), where)
    if action_id == REVOKE_GRANT_ACTION:
        return GrantClick(value, where) if _GRANT_ID.match(value) else Malformed("the button does not name a grant")
    return Malformed("unknown button")


def parse_approval_value(value: str) -> tuple[str, str] | Malformed:
    """`apr_...:digest` -> (approval id, digest)."""
    approval_id, _, digest = value.rpartition(":")
    if not _APPROVAL_ID.match(approval_id) or not _DIGEST.match(digest):
        return Malformed("the button does not carry an approval id and digest")
    return approval_id, digest


def run_value(run_id: str, version: int) -> str:
    """What a stopped run's buttons carry: the run and the version of it the message shows."""
    return f"{run_id}:{version}"


def parse_run_value(value: str) -> tuple[str, int] | Malformed:
    """`run_id:version` -> (run id, version)."""
    run_id, colon, version = value.rpartition(":")
    if not colon and _RUN_ID.match(value):
        # Buttons posted before they were bound to a version: acting on them could repeat an action.
        return Malformed(OUTDATED_BUTTON)
    if not _RUN_ID.match(run_id) or not _VERSION.match(version):
        return Malformed("the button does not name a run")
    return run_id, int(version)


def parse_deny_submission(body: Any) -> DenySubmission | Malformed:
    """A `view_submission` of the Deny modal."""
    submitted = _submission(body, DENY_MODAL, "deny")
    if isinstance(submitted, Malformed):
        return submitted
    approval_id, digest, where, view = submitted
    return DenySubmission(approval_id, digest, _reason(view), where)


def parse_glass_submission(body: Any) -> DenySubmission | Malformed:
    """A `view_submission` of the break-glass modal: the approval, and why (in `reason`)."""
    submitted = _submission(body, BREAK_GLASS_MODAL, "break-glass")
    if isinstance(submitted, Malformed):
        return submitted
    approval_id, digest, where, view = submitted
    return DenySubmission(approval_id, digest, _reason(view, GLASS_REASON_BLOCK, GLASS_REASON_INPUT), where)


def parse_edit_submission(body: Any) -> EditSubmission | Malformed:
    """A `view_submission` of the edit modal."""
    submitted = _submission(body, EDIT_MODAL, "edit")
    if isinstance(submitted, Malformed):
        return submitted
    approval_id, digest, where, view = submitted
    return EditSubmission(approval_id, digest, _dict(_dict(view.get("state")).get("values")), where)


def _submission(body: Any, callback_id: str, form: str) -> tuple[str, str, Where, dict[str, Any]] | Malformed:
    """(approval id, digest, who and where, the view) of a submitted approval modal."""
    if not isinstance(body, dict) or body.get("type") != "view_submission":
        return Malformed("not a form submission")
    view, user = body.get("view"), _user_id(body)
    if not isinstance(view, dict) or view.get("callback_id") != callback_id:
        return Malformed(f"not the {form} form")
    if user is None:
        return Malformed("no user in the submission")
    try:
        meta = json.loads(view.get("private_metadata") or "")
    except (TypeError, ValueError):
        return Malformed("the form lost track of its approval")
    if not isinstance(meta, dict):
        return Malformed("the form lost track of its approval")
    parsed = parse_approval_value(f"{meta.get('approval')}:{meta.get('digest')}")
    if isinstance(parsed, Malformed):
        return parsed
    channel = meta.get("channel")
    channel = channel if isinstance(channel, str) and _CHANNEL.match(channel) else None
    return parsed[0], parsed[1], Where(user=user, channel=channel, in_home=meta.get("home") is True), view


def _reason(view: dict[str, Any], block: str = DENY_REASON_BLOCK, field: str = DENY_REASON_INPUT) -> str:
    values = _dict(_dict(view.get("state")).get("values"))
    text = _dict(_dict(values.get(block)).get(field)).get("value")
    return text.strip()[:MAX_REASON] if isinstance(text, str) else ""


def parse_command(body: Any) -> Command | Malformed:
    """A slash command body (form fields): `help`, `list`, `status <run>`, `cancel <run>` or a goal."""
    if not isinstance(body, dict):
        return Malformed("not a slash command")
    user, channel = body.get("user_id"), body.get("channel_id")
    if not is_slack_user(user):
        return Malformed("no user in the command")
    if not isinstance(channel, str) or not _CHANNEL.match(channel):
        return Malformed("no channel in the command")
    where = Where(user=user, channel=channel, trigger_id=_str(body.get("trigger_id")),
                  response_url=_str(body.get("response_url")))
    text = body.get("text")
    request = parse_request(text if isinstance(text, str) else "")
    return Command(request, where, team=_str(body.get("team_id")), team_domain=_str(body.get("team_domain")))


def parse_request(text: str) -> Request:
    """What `/signoff <text>` asks for; a malformed subcommand shows help."""
    words = text.split()
    if not words:
        return ShowHelp()
    head = words[0].lower()
    if len(words) == 1 and head in ("help", "list", "status", "cancel", "-h", "--help", "?"):
        return ListRuns() if head == "list" else ShowHelp()
    if len(words) == 2 and head in ("status", "cancel"):
        if not _RUN_ID.match(words[1]):
            return ShowHelp()
        return ShowStatus(words[1]) if head == "status" else CancelRun(words[1])
    return StartRun(text.strip())


def where_of(body: dict[str, Any]) -> Where | Malformed:
    """Who clicked, and where the answer goes, for a click on a button of any Signoff message."""
    return _where(body)


def _where(body: dict[str, Any]) -> Where | Malformed:
    user = _user_id(body)
    if user is None:
        return Malformed("no user in the click")
    container = _dict(body.get("container"))
    channel = container.get("channel_id") or _dict(body.get("channel")).get("id")
    view, in_view = _dict(body.get("view")), container.get("type") == "view"
    view_id = _str(view.get("id"))
    ts = container.get("message_ts")
    return Where(
        user=user,
        channel=channel if isinstance(channel, str) and _CHANNEL.match(channel) else None,
        message_ts=ts if isinstance(ts, str) and _TS.match(ts) else None,
        trigger_id=_str(body.get("trigger_id")),
        response_url=_str(body.get("response_url")),
        in_home=in_view and view.get("type") == "home",
        modal_id=view_id if in_view and view.get("type") == "modal" else None,
    )


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _user_id(body: dict[str, Any]) -> str | None:
    user = body.get("user")
    uid = user.get("id") if isinstance(user, dict) else None
    return uid if is_slack_user(uid) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value and len(value) <= 1000 else None
