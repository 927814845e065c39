"""What is refused before Bolt sees a request: bodies Slack never sends, which Bolt would crash on.
Pure: bytes in, a reason (or None) out.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

_TIMESTAMP = re.compile(r"^\d{1,12}$")


@dataclass(frozen=True)
class NotSlack:
    """Why a request is refused before Bolt sees it, with the HTTP status that says so."""

    status: str
    reason: str


def screen_request(body: bytes, content_type: str, timestamp: str | None) -> NotSlack | None:
    """Why this request is not something Slack sends, or None if Bolt may have it."""
    if timestamp is not None and not _TIMESTAMP.match(timestamp):
        # Bolt's signature check calls `int()` on it: anything else would be a 500, not a 401.
        return NotSlack("401 Unauthorized", "the request timestamp is not a number")
    problem = screen_body(body, content_type)
    return NotSlack("400 Bad Request", problem) if problem else None


def screen_body(body: bytes, content_type: str) -> str | None:
    """Why a request body is not something Slack sends, or None if Bolt may have it.

    Bolt parses a body before it verifies the signature and assumes Slack's shapes, so a body
    that is not JSON where JSON is due, or whose payload has the wrong shape, would crash inside
    it: a 500 and a traceback for anyone who can reach the port. These are refused first (400).
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return "the body is not UTF-8"
    if "json" in content_type.lower() or text.lstrip().startswith("{"):
        parsed = _json_object(text)
        if parsed is None:
            return "the body is not a JSON object"
        return _screen_payload(parsed)
    form = parse_qs(text, keep_blank_values=True)
    if "payload" not in form:
        return None  # a slash command: plain form fields, which Bolt reads as strings
    if len(form["payload"]) != 1:
        return "more than one payload"  # Bolt would read the last, this screen the first
    payload = _json_object(form["payload"][0])
    if payload is None:
        return "the payload is not a JSON object"
    return _screen_payload(payload)


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    # ValueError also covers an integer too long to convert (over 4300 digits), which is not a
    # JSONDecodeError; RecursionError is nesting deeper than the parser goes.
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


# Fields Bolt reads without checking their type, whatever the payload's type says.
_FIELD_TYPES: dict[str, type] = {
    "actions": list, "user": dict, "view": dict, "event": dict, "challenge": str, "team": dict,
    "channel": dict, "container": dict, "message": dict, "enterprise": dict, "authorizations": list,
}


_NEVER_NULL = frozenset({"actions", "user", "view", "event"})


def _screen_payload(payload: dict[str, Any]) -> str | None:
    kind = payload.get("type")
    if kind is not None and not isinstance(kind, str):
        return "the payload type is not a string"
    for field, expected in _FIELD_TYPES.items():
        # Slack sends `null` for some fields (enterprise, channel), never for these four.
        present = field in payload if field in _NEVER_NULL else payload.get(field) is not None
        if present and not isinstance(payload[field], expected):
            return f"{field} is not a {'list' if expected is list else 'string' if expected is str else 'object'}"
    if not all(isinstance(a, dict) for a in payload.get("actions") or []):
        return "an action is not an object"
    if kind == "block_actions" and not payload.get("actions"):
        return "a click without any action"  # Slack always sends the action that was clicked
    if "view" in payload and not isinstance(payload["view"].get("type"), str):
        return "a view without a type"  # Slack's views are always "modal" or "home"
    # Bolt's matchers index these without checking; Slack always sends them as strings.
    if kind in ("view_submission", "view_closed") and not isinstance(payload.get("view", {}).get("callback_id"), str):
        return "a view without a callback_id"
    if not all(isinstance(a.get("action_id"), str) for a in payload.get("actions") or []):
        return "an action without an action_id"
    if "user" in payload and not isinstance(payload["user"].get("id"), str):
        return "a user without an id"
    if "event" in payload and not isinstance(payload["event"].get("type"), str):
        return "an event without a type"
    if not all(isinstance(a, dict) for a in payload.get("authorizations") or []):
        return "an authorization is not an object"
    return None
