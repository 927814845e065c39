"""FakeSlack: the Slack Web API methods Signoff calls, served on 127.0.0.1:0 with Slack's real shapes.

It checks the bearer token, enforces Block Kit limits (answering `invalid_blocks` as Slack does),
records every call with its decoded body, keeps the messages it was sent so tests can read them
back, and can be told to fail (500, 429 with Retry-After) or to be slow.
"""

from __future__ import annotations

import base64
import copy
import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

MESSAGE_METHODS = ("chat.postMessage", "chat.update", "chat.postEphemeral")


@dataclass
class Call:
    method: str
    body: dict[str, Any]
    token: str | None
    status: int = 200
    response: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == 200 and bool(self.response.get("ok"))


@dataclass
class _Fault:
    times: int
    status: int = 500
    retry_after: int | None = None
    delay: float = 0.0


class FakeSlack:
    """A local Slack Web API. `url` is the base URL to give `WebClient(base_url=...)`."""

    def __init__(
        self, token: str = "xoxb-test", *, app_token: str = "xapp-test", bot_user: str = "U0SIGNOFF",
        usergroups: dict[str, list[str]] | None = None, channels: dict[str, list[str]] | None = None,
        socket_url: str | None = None, emails: dict[str, str] | None = None,
    ) -> None:
        self.token, self.app_token, self.bot_user = token, app_token, bot_user
        self.usergroups: dict[str, list[str]] = dict(usergroups or {})
        self.channels: dict[str, list[str]] = dict(channels or {})
        """Members of each channel the bot is in, for `conversations.members`; other channels are not found."""
        self.emails: dict[str, str] = dict(emails or {})
        """Each user's id by their email, for `users.lookupByEmail`; other emails are not found."""
        self.socket_url = socket_url
        self.calls: list[Call] = []
        self.messages: dict[tuple[str, str], dict[str, Any]] = {}
        self.views: dict[str, dict[str, Any]] = {}
        self.modals: dict[str, dict[str, Any]] = {}
        """Open modals by view id, as last opened or updated (each carries its `id` and `hash`)."""
        self.responses: list[dict[str, Any]] = []
        self._faults: dict[str, list[_Fault]] = {}
        self._held: dict[str, threading.Event] = {}
        self._triggers: set[str] = set()
        self._lock = threading.Lock()
        self._ts = itertools.count(1)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="fake-slack", daemon=True)

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def base(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def url(self) -> str:
        return f"{self.base}/api/"

    def response_url(self, name: str = "r") -> str:
        """A `response_url` that lands here, as Slack's hooks.slack.com URLs would."""
        return f"{self.base}/respond/{name}"

    def start(self) -> FakeSlack:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeSlack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- test controls -----------------------------------------------------------------------------

    def fail(self, method: str, times: int = 1, *, status: int = 500, retry_after: int | None = None,
             delay: float = 0.0) -> None:
        """Answer the next `times` calls to `method` with `status` (429 adds Retry-After) after `delay` s."""
        with self._lock:
            self._faults.setdefault(method, []).append(_Fault(times, status, retry_after, delay))

    def heal(self, method: str) -> None:
        """Forget the faults still waiting for `method`: it answers normally again."""
        with self._lock:
            self._faults.pop(method, None)

    def slow(self, method: str, seconds: float, times: int = 1) -> None:
        """Answer the next `times` calls to `method` normally, but only after `seconds`."""
        self.fail(method, times, status=200, delay=seconds)

    # -- reading what happened -----------------------------------------------------------------------

    def hold(self, method: str) -> threading.Event:
        """Keep every call to `method` waiting, unanswered, until the event returned is set (as a
        Slack that hangs would); calls already answered are not affected."""
        released = threading.Event()
        with self._lock:
            self._held[method] = released
        return released

    def calls_to(self, method: str, *, ok_only: bool = True) -> list[dict[str, Any]]:
        with self._lock:
            return [c.body for c in self.calls if c.method == method and (c.ok or not ok_only)]

    def attempts(self, method: str) -> int:
        with self._lock:
            return sum(1 for c in self.calls if c.method == method)

    def last(self, method: str) -> dict[str, Any]:
        found = self.calls_to(method)
        assert found, f"no successful {method} call; calls: {[c.method for c in self.calls]}"
        return found[-1]

    def message(self, channel: str, ts: str) -> dict[str, Any]:
        """A snapshot of the message as it is now."""
        with self._lock:
            return copy.deepcopy(self.messages[(channel, ts)])

    def messages_in(self, channel: str) -> list[dict[str, Any]]:
        """Snapshots of every message in `channel`, oldest first."""
        with self._lock:
            return [copy.deepcopy(m) for m in self.messages.values() if m["channel"] == channel]

    def thread(self, channel: str, ts: str) -> list[dict[str, Any]]:
        """Messages posted in the thread under (channel, ts), oldest first, as they are now."""
        with self._lock:
            return [copy.deepcopy(m) for m in self.messages.values()
                    if m["channel"] == channel and m.get("thread_ts") == ts]

    def modal(self, view_id: str | None = None) -> dict[str, Any]:
        """A snapshot of a modal as it is now (the last one opened when `view_id` is None)."""
        with self._lock:
            assert self.modals, f"no modal was opened; calls: {[c.method for c in self.calls]}"
            return copy.deepcopy(self.modals[view_id or list(self.modals)[-1]])

    def dm_channel(self, user: str) -> str:
        return "D" + user[1:]

    def wait_for(self, predicate: Callable[[], Any], timeout: float = 5.0) -> Any:
        """Poll `predicate` until it returns something truthy (background work posts asynchronously)."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value or time.monotonic() > deadline:
                assert value, "condition not met in time"
                return value
            time.sleep(0.01)

    # -- the API -----------------------------------------------------------------------------------

    def _dispatch(self, method: str, body: dict[str, Any], token: str | None) -> tuple[int, dict[str, Any], dict[str, str]]:
        with self._lock:
            held = self._held.get(method)
        if held is not None and not held.wait(timeout=60):
            return 200, {"ok": False, "error": "fatal_error"}, {}
        fault = self._take_fault(method)
        if fault is not None:
            time.sleep(fault.delay)
            if fault.status == 429:
                return 429, {"ok": False, "error": "ratelimited"}, {"Retry-After": str(fault.retry_after or 1)}
            if fault.status != 200:
                return fault.status, {"ok": False, "error": "fatal_error"}, {}
        expected = self.app_token if method == "apps.connections.open" else self.token
        if not token:
            return 200, {"ok": False, "error": "not_authed"}, {}
        if token != expected:
            return 200, {"ok": False, "error": "invalid_auth"}, {}
        handler = getattr(self, "_api_" + method.replace(".", "_"), None)
        if handler is None:
            return 200, {"ok": False, "error": "unknown_method"}, {}
        with self._lock:
            return 200, handler(body), {}

    def _take_fault(self, method: str) -> _Fault | None:
        with self._lock:
            queue = self._faults.get(method)
            if not queue:
                return None
            fault = queue[0]
            fault.times -= 1
            if fault.times <= 0:
                queue.pop(0)
            return fault

    def _record(self, call: Call) -> None:
        with self._lock:
            self.calls.append(call)

    def _next_ts(self) -> str:
        n = next(self._ts)
        return f"{1_700_000_000 + n}.{n:06d}"

    def _api_auth_test(self, body: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "url": "https://signoff-test.slack.com/", "team": "Signoff Test", "user": "signoff",
                "team_id": "T0TEST", "user_id": self.bot_user, "bot_id": "B0SIGNOFF", "is_enterprise_install": False}

    def _api_chat_postMessage(self, body: dict[str, Any]) -> dict[str, Any]:
        channel = str(body.get("channel") or "")
        if not channel:
            return {"ok": False, "error": "channel_not_found"}
        problem = _message_problems(body)
        if problem:
            return problem
        if channel[0] in "UW":  # Slack delivers a message addressed to a user id to the app's DM
            channel = self.dm_channel(channel)
        ts = self._next_ts()
        message = {"type": "message", "user": self.bot_user, "bot_id": "B0SIGNOFF", "ts": ts,
                   "text": body.get("text", ""), "blocks": body.get("blocks", [])}
        if body.get("thread_ts"):
            message["thread_ts"] = str(body["thread_ts"])
        self.messages[(channel, ts)] = {**message, "channel": channel}
        return {"ok": True, "channel": channel, "ts": ts, "message": message}

    def _api_chat_update(self, body: dict[str, Any]) -> dict[str, Any]:
        channel, ts = str(body.get("channel") or ""), str(body.get("ts") or "")
        if not channel or channel[0] in "UW":
            return {"ok": False, "error": "channel_not_found"}
        if (channel, ts) not in self.messages:
            return {"ok": False, "error": "message_not_found"}
        problem = _message_problems(body)
        if problem:
            return problem
        stored = self.messages[(channel, ts)]
        stored.update(text=body.get("text", ""), blocks=body.get("blocks", []), edited=True)
        message = {k: v for k, v in stored.items() if k != "channel"}
        return {"ok": True, "channel": channel, "ts": ts, "text": stored["text"], "message": message}

    def _api_chat_postEphemeral(self, body: dict[str, Any]) -> dict[str, Any]:
        if not body.get("channel"):
            return {"ok": False, "error": "channel_not_found"}
        if not body.get("user"):
            return {"ok": False, "error": "user_not_found"}
        problem = _message_problems(body)
        if problem:
            return problem
        return {"ok": True, "message_ts": self._next_ts()}

    def _api_conversations_open(self, body: dict[str, Any]) -> dict[str, Any]:
        users = str(body.get("users") or "")
        if not users or "," in users:
            return {"ok": False, "error": "users_list_not_supplied" if not users else "not_implemented"}
        return {"ok": True, "no_op": True, "already_open": True, "channel": {"id": self.dm_channel(users)}}

    def _api_users_lookupByEmail(self, body: dict[str, Any]) -> dict[str, Any]:
        user = self.emails.get(str(body.get("email") or ""))
        if user is None:
            return {"ok": False, "error": "users_not_found"}
        return {"ok": True, "user": {"id": user, "team_id": "T0TEST", "name": user.lower(), "deleted": False,
                                     "profile": {"email": body["email"]}}}

    def _api_views_open(self, body: dict[str, Any]) -> dict[str, Any]:
        trigger = str(body.get("trigger_id") or "")
        if not trigger:
            return {"ok": False, "error": "invalid_trigger_id"}
        if trigger in self._triggers:
            return {"ok": False, "error": "exchanged_trigger_id"}
        self._triggers.add(trigger)
        view = body.get("view")
        problem = _view_problems(view)
        if problem:
            return problem
        view_id = f"V{len(self._triggers):08d}"
        self.modals[view_id] = {**view, "id": view_id, "team_id": "T0TEST", "hash": self._next_ts()}
        return {"ok": True, "view": copy.deepcopy(self.modals[view_id])}

    def _api_views_update(self, body: dict[str, Any]) -> dict[str, Any]:
        view_id = str(body.get("view_id") or "")
        if not view_id:
            return {"ok": False, "error": "invalid_arguments"}
        if view_id not in self.modals:
            return {"ok": False, "error": "not_found"}
        if body.get("hash") and body["hash"] != self.modals[view_id]["hash"]:
            return {"ok": False, "error": "hash_conflict"}
        view = body.get("view")
        problem = _view_problems(view)
        if problem:
            return problem
        self.modals[view_id] = {**view, "id": view_id, "team_id": "T0TEST", "hash": self._next_ts()}
        return {"ok": True, "view": copy.deepcopy(self.modals[view_id])}

    def _api_views_publish(self, body: dict[str, Any]) -> dict[str, Any]:
        user = str(body.get("user_id") or "")
        if not user:
            return {"ok": False, "error": "invalid_arguments"}
        view = body.get("view")
        problem = _view_problems(view)
        if problem:
            return problem
        self.views[user] = view
        return {"ok": True, "view": {"id": f"VH{user}", "team_id": "T0TEST", **view}}

    def _api_usergroups_users_list(self, body: dict[str, Any]) -> dict[str, Any]:
        group = str(body.get("usergroup") or "")
        if group not in self.usergroups:
            return {"ok": False, "error": "no_such_subteam"}
        return {"ok": True, "users": list(self.usergroups[group])}

    def _api_conversations_members(self, body: dict[str, Any]) -> dict[str, Any]:
        channel = str(body.get("channel") or "")
        if channel not in self.channels:
            return {"ok": False, "error": "channel_not_found"}
        members = list(self.channels[channel])
        limit = max(1, min(int(body.get("limit") or 100), 1000))
        start = int(base64.b64decode(str(body.get("cursor") or "")).decode().removeprefix("member:") or 0)
        end = start + limit
        more = base64.b64encode(f"member:{end}".encode()).decode() if end < len(members) else ""
        return {"ok": True, "members": members[start:end], "response_metadata": {"next_cursor": more}}

    def _api_apps_connections_open(self, body: dict[str, Any]) -> dict[str, Any]:
        if not self.socket_url:
            return {"ok": False, "error": "not_allowed_token_type"}
        return {"ok": True, "url": self.socket_url}


# -- Block Kit limits ------------------------------------------------------------------------------

BLOCK_TYPES = {"section", "header", "context", "actions", "divider", "input", "image", "rich_text"}
LIMITS = {
    "message_blocks": 50, "view_blocks": 100, "section_text": 3000, "field_text": 2000, "fields": 10,
    "header": 150, "context_elements": 10, "context_text": 2000, "actions_elements": 25,
    "button_text": 75, "button_value": 2000, "action_id": 255, "block_id": 255, "modal_title": 24,
    "modal_button": 24, "private_metadata": 3000, "callback_id": 255, "message_chars": 12_000,
    "label": 2000,
}


def block_kit_problems(blocks: Any, *, kind: str = "message") -> list[str]:
    """Every Block Kit rule a list of blocks breaks, as Slack's `[ERROR] ... [json-pointer:...]` lines."""
    problems: list[str] = []

    def err(text: str, pointer: str) -> None:
        problems.append(f"[ERROR] {text} [json-pointer:{pointer}]")

    if not isinstance(blocks, list):
        return ["[ERROR] blocks must be an array [json-pointer:/blocks]"]
    cap = LIMITS["message_blocks"] if kind == "message" else LIMITS["view_blocks"]
    if len(blocks) > cap:
        err(f"no more than {cap} items allowed", "/blocks")
    block_ids = set()
    for i, block in enumerate(blocks):
        at = f"/blocks/{i}"
        if not isinstance(block, dict) or block.get("type") not in BLOCK_TYPES:
            err("unsupported block type", at)
            continue
        if "block_id" in block:
            if len(str(block["block_id"])) > LIMITS["block_id"]:
                err("must be less than 256 characters", at + "/block_id")
            if block["block_id"] in block_ids:
                err("duplicate block_id", at + "/block_id")
            block_ids.add(block["block_id"])
        _check_block(block, at, err)
    total = sum(len(t) for t in _texts(blocks))
    if kind == "message" and total > LIMITS["message_chars"]:
        err(f"message blocks hold {total} characters; keep under {LIMITS['message_chars']}", "/blocks")
    return problems


def _check_block(block: dict[str, Any], at: str, err: Callable[[str, str], None]) -> None:
    match block["type"]:
        case "section":
            if "text" not in block and "fields" not in block:
                err("must provide text or fields", at)
            if "text" in block:
                _check_text(block["text"], LIMITS["section_text"], at + "/text", err)
            for j, f in enumerate(block.get("fields", [])):
                _check_text(f, LIMITS["field_text"], f"{at}/fields/{j}", err)
            if len(block.get("fields", [])) > LIMITS["fields"]:
                err("no more than 10 items allowed", at + "/fields")
        case "header":
            _check_text(block.get("text"), LIMITS["header"], at + "/text", err, plain=True)
        case "context":
            elements = block.get("elements") or []
            if not elements or len(elements) > LIMITS["context_elements"]:
                err("must have 1 to 10 elements", at + "/elements")
            for j, e in enumerate(elements):
                _check_text(e, LIMITS["context_text"], f"{at}/elements/{j}", err)
        case "actions":
            elements = block.get("elements") or []
            if not elements or len(elements) > LIMITS["actions_elements"]:
                err("must have 1 to 25 elements", at + "/elements")
            seen = set()
            for j, e in enumerate(elements):
                _check_element(e, f"{at}/elements/{j}", err)
                if e.get("action_id") in seen:
                    err("action_id must be unique within the block", f"{at}/elements/{j}/action_id")
                seen.add(e.get("action_id"))
        case "input":
            _check_text(block.get("label"), LIMITS["label"], at + "/label", err, plain=True)
            element = block.get("element")
            if not isinstance(element, dict) or "type" not in element:
                err("must provide an element", at + "/element")
            elif len(str(element.get("action_id", ""))) > LIMITS["action_id"]:
                err("must be less than 256 characters", at + "/element/action_id")


def _check_element(element: Any, at: str, err: Callable[[str, str], None]) -> None:
    if not isinstance(element, dict) or element.get("type") != "button":
        err("unsupported element type", at)
        return
    _check_text(element.get("text"), LIMITS["button_text"], at + "/text", err, plain=True)
    if not element.get("action_id") or len(str(element["action_id"])) > LIMITS["action_id"]:
        err("action_id must be 1 to 255 characters", at + "/action_id")
    if len(str(element.get("value", ""))) > LIMITS["button_value"]:
        err("must be less than 2001 characters", at + "/value")
    if element.get("style") not in (None, "primary", "danger"):
        err("style must be primary or danger", at + "/style")


def _check_text(obj: Any, limit: int, at: str, err: Callable[[str, str], None], *, plain: bool = False) -> None:
    if not isinstance(obj, dict) or obj.get("type") not in ("plain_text", "mrkdwn"):
        err("must be a text object", at)
        return
    if plain and obj["type"] != "plain_text":
        err("must be plain_text", at + "/type")
    text = obj.get("text")
    if not isinstance(text, str) or not text:
        err("must be a non-empty string", at + "/text")
    elif len(text) > limit:
        err(f"must be less than {limit + 1} characters", at + "/text")


def _texts(value: Any) -> list[str]:
    if isinstance(value, dict):
        found = [value["text"]] if isinstance(value.get("text"), str) else []
        return found + [t for k, v in value.items() if k != "text" for t in _texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in _texts(v)]
    return []


def view_problems(view: Any) -> list[str]:
    """Every rule a modal or Home tab view breaks."""
    if not isinstance(view, dict) or view.get("type") not in ("modal", "home"):
        return ["[ERROR] view type must be modal or home [json-pointer:/view/type]"]
    problems = block_kit_problems(view.get("blocks"), kind="view")
    if view["type"] == "modal":
        for key in ("title", "submit", "close"):
            obj = view.get(key)
            if key == "title" or obj is not None:
                text = obj.get("text", "") if isinstance(obj, dict) else ""
                if not text or len(text) > LIMITS["modal_title"]:
                    problems.append(f"[ERROR] must be 1 to 24 characters [json-pointer:/view/{key}/text]")
    if len(str(view.get("private_metadata", ""))) > LIMITS["private_metadata"]:
        problems.append("[ERROR] must be less than 3001 characters [json-pointer:/view/private_metadata]")
    if len(str(view.get("callback_id", ""))) > LIMITS["callback_id"]:
        problems.append("[ERROR] must be less than 256 characters [json-pointer:/view/callback_id]")
    return problems


def _message_problems(body: dict[str, Any]) -> dict[str, Any] | None:
    blocks = body.get("blocks")
    if not body.get("text"):
        # Slack accepts blocks without text but then notifications are blank; we require the fallback.
        return {"ok": False, "error": "no_text" if not blocks else "missing_text_fallback"}
    if blocks is not None:
        problems = block_kit_problems(blocks)
        if problems:
            return {"ok": False, "error": "invalid_blocks", "errors": problems,
                    "response_metadata": {"messages": problems}}
    return None


def _view_problems(view: Any) -> dict[str, Any] | None:
    problems = view_problems(view)
    if problems:
        return {"ok": False, "error": "invalid_arguments", "response_metadata": {"messages": problems}}
    return None


# -- HTTP -------------------------------------------------------------------------------------------


def _decode(raw: bytes, content_type: str, query: str) -> dict[str, Any]:
    body: dict[str, Any] = dict(parse_qsl(query))
    if raw:
        if "json" in content_type:
            body.update(json.loads(raw))
        else:
            body.update(parse_qsl(raw.decode()))
    for key in ("blocks", "view", "attachments", "metadata"):
        if isinstance(body.get(key), str):  # form-encoded calls send these as JSON text
            body[key] = json.loads(body[key])
    return body


def _handler(fake: FakeSlack) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in two writes: with Nagle's algorithm the body would wait for the
        # client's delayed ACK (40 ms) on a kept-alive connection, which Slack's servers do not make.
        disable_nagle_algorithm = True

        def log_message(self, *args: Any) -> None:  # keep test output clean
            pass

        def do_GET(self) -> None:
            self._serve()

        def do_POST(self) -> None:
            self._serve()

        def _serve(self) -> None:
            parts = urlsplit(self.path)
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = _decode(raw, self.headers.get("Content-Type", ""), parts.query)
            if parts.path.startswith("/respond/"):
                with fake._lock:
                    fake.responses.append(body)
                    fake.calls.append(Call("response_url", body, None, 200, {"ok": True}))
                self._send(200, {"ok": True}, {})
                return
            method = parts.path.removeprefix("/api/")
            auth = self.headers.get("Authorization", "")
            token = auth.removeprefix("Bearer ").strip() or body.pop("token", None)
            status, response, headers = fake._dispatch(method, body, token)
            fake._record(Call(method, body, token, status, response))
            self._send(status, response, headers)

        def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

    return Handler


# -- Socket Mode ------------------------------------------------------------------------------------


class FakeSocketMode:
    """A Socket Mode endpoint on 127.0.0.1:0: says hello, sends envelopes, collects the app's acks.

    Point `FakeSlack(socket_url=fake.url)` at it; `apps.connections.open` then hands this URL out.
    """

    GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

    def __init__(self) -> None:
        import socket

        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(10)
        self.acks: list[dict[str, Any]] = []
        self._conn: Any = None
        self._acked = threading.Condition()
        self._connected = threading.Event()
        threading.Thread(target=self._accept, daemon=True, name="fake-socket-mode-accept").start()

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self._listener.getsockname()[1]}/link/?ticket=test"

    def wait_connected(self, timeout: float = 120.0) -> None:
        """Wait until the app has connected and been greeted; `timeout` only bounds an app that never
        connects (a loaded machine can take many seconds to get a fresh process that far)."""
        assert self._connected.wait(timeout), "the app never connected"

    def _accept(self) -> None:
        """Take the app's connection, complete the WebSocket handshake and say hello."""
        import base64
        import hashlib

        try:
            conn, _ = self._listener.accept()
        except OSError:
            return
        request = b""
        while b"\r\n\r\n" not in request:
            request += conn.recv(1024)
        key = next(line.split(":", 1)[1].strip() for line in request.decode().split("\r\n")
                   if line.lower().startswith("sec-websocket-key:"))
        accept = base64.b64encode(hashlib.sha1((key + self.GUID).encode()).digest()).decode()
        conn.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                      f"Sec-WebSocket-Accept: {accept}\r\n\r\n").encode())
        self._conn = conn
        threading.Thread(target=self._read, daemon=True, name="fake-socket-mode").start()
        self.send({"type": "hello", "num_connections": 1, "connection_info": {"app_id": "A0SIGNOFF"},
                   "debug_info": {"host": "fake", "approximate_connection_time": 3600}})
        self._connected.set()

    def send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message).encode()
        if len(data) < 126:
            size = bytes([len(data)])
        elif len(data) < 65536:
            size = bytes([126]) + len(data).to_bytes(2, "big")
        else:
            size = bytes([127]) + len(data).to_bytes(8, "big")
        self._conn.sendall(bytes([0x81]) + size + data)  # FIN + text frame; servers do not mask

    def envelope(self, kind: str, payload: dict[str, Any], envelope_id: str) -> dict[str, Any]:
        """Send one envelope (e.g. `slash_commands`) and wait for the app's ack of it."""
        self.send({"envelope_id": envelope_id, "type": kind, "payload": payload, "accepts_response_payload": True})
        with self._acked:
            assert self._acked.wait_for(lambda: any(a.get("envelope_id") == envelope_id for a in self.acks), 10)
            return next(a for a in self.acks if a.get("envelope_id") == envelope_id)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._listener.close()

    def _read(self) -> None:
        while True:
            try:
                opcode, payload = self._frame()
            except OSError:
                return
            if opcode == 0x8 or opcode is None:
                return
            if opcode == 0x9:  # ping: answer pong
                self._conn.sendall(bytes([0x8A, len(payload)]) + payload)
            elif opcode == 0x1:
                with self._acked:
                    self.acks.append(json.loads(payload))
                    self._acked.notify_all()

    def _frame(self) -> tuple[int | None, bytes]:
        head = self._recv(2)
        if not head:
            return None, b""
        opcode, size = head[0] & 0x0F, head[1] & 0x7F
        if size == 126:
            size = int.from_bytes(self._recv(2), "big")
        elif size == 127:
            size = int.from_bytes(self._recv(8), "big")
        mask = self._recv(4) if head[1] & 0x80 else b"\0\0\0\0"
        data = self._recv(size)
        return opcode, bytes(b ^ mask[i % 4] for i, b in enumerate(data))

    def _recv(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self._conn.recv(n - len(data))
            if not chunk:
                return b""
            data += chunk
        return data
