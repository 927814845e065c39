"""The console's WSGI app under `/ui/`: sign-in and out, the runs, a run's story, the inbox, and an
approval's page with Approve / Deny / Edit, each a form bound to the approval id and the digest the
page showed, decided by `Runner.decide` and `Runner.edit` as a Slack click is.

Every page but sign-in needs a session; every form a CSRF token; every answer a strict
Content-Security-Policy (no script at all) and no caching.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape

from signoff.bot.console import pages
from signoff.bot.console.oidc import EmailLookup, Issuer, SignInError, slack_user
from signoff.bot.console.sessions import (
    LOGIN_COOKIE,
    LOGIN_SECONDS,
    SESSION_COOKIE,
    SESSION_SECONDS,
    Session,
    Signer,
    cookie_header,
    new_token,
    read_cookies,
)
from signoff.bot.console.words import decision_words, edit_words
from signoff.runtime.records import Decided, DecisionOutcome, Done
from signoff.runtime.runner import Runner
from signoff.runtime.schema import STATUSES
from signoff.runtime.step_up import SignIn

log = logging.getLogger("signoff.bot.console")

PREFIX = "/ui/"
HERE = Path(__file__).resolve().parent
CSP = ("default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; "
       "base-uri 'none'")
MAX_FORM_BYTES = 64_000
_APPROVAL = re.compile(r"^/ui/approvals/(?P<id>[A-Za-z0-9_-]{1,64})(?P<action>/decide|/edit)?$")
_RUN = re.compile(r"^/ui/runs/(?P<id>run-[0-9a-f]{1,32})$")

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    form: dict[str, str]
    cookies: dict[str, str]
    session: Session | None


@dataclass
class Answer:
    status: str
    body: bytes = b""
    headers: list[tuple[str, str]] | None = None
    content_type: str = "text/html; charset=utf-8"


class Console:
    """The console for `runner`'s runs, signing people in at `issuer`.

    `public_url`: where people reach Signoff (cookies are Secure when it is https). `lookup`: the
    Slack user id of an email (`users.lookupByEmail`); `team`: the workspace's id, where known.
    `drive`: hands a decided run to a worker, as a Slack click does."""

    def __init__(self, runner: Runner, issuer: Issuer, secret: str, public_url: str, *, lookup: EmailLookup,
                 drive: Callable[[str], None], team: Callable[[], str | None] = lambda: None) -> None:
        self.runner, self.issuer, self.lookup, self.drive, self.team = runner, issuer, lookup, drive, team
        self.public_url = public_url.rstrip("/")
        self.secure = self.public_url.startswith("https://")
        self.signer = Signer(secret)
        self.templates = Environment(loader=FileSystemLoader(HERE / "templates"),
                                     autoescape=select_autoescape(default=True), trim_blocks=True, lstrip_blocks=True)

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        try:
            answer = self._answer(environ)
        except SignInError as exc:
            answer = self._page("message.html", None, status="400 Bad Request", title="Sign-in failed",
                                text=str(exc), again=True)
        headers = [("Content-Type", answer.content_type), ("Content-Length", str(len(answer.body))),
                   ("Content-Security-Policy", CSP), ("X-Content-Type-Options", "nosniff"),
                   ("Referrer-Policy", "same-origin"), ("Cache-Control", "no-store"), *(answer.headers or [])]
        start_response(answer.status, headers)
        return [answer.body]

    # -- routing -----------------------------------------------------------------------------------

    def _answer(self, environ: dict[str, Any]) -> Answer:
        request = self._request(environ)
        if request is None:
            return self._plain("413 Payload Too Large", "the form is too large")
        path, method = request.path, request.method
        if path == "/ui/static/console.css" and method in ("GET", "HEAD"):
            return Answer("200 OK", (HERE / "static" / "console.css").read_bytes(), content_type="text/css")
        if path == "/ui/login" and method == "GET":
            return self._login(request)
        if path == "/ui/callback" and method == "GET":
            return self._callback(request)
        if request.session is None:
            if method == "GET" and (path == PREFIX or _RUN.match(path) or _APPROVAL.match(path) or path == "/ui/approvals"):
                return self._page("signin.html", None, status="401 Unauthorized", title="Sign in",
                                  login=self._login_link(path))
            return self._plain("401 Unauthorized", "sign in first")
        if method == "POST" and not request.session.csrf_ok(request.form.get("csrf")):
            return self._plain("403 Forbidden", "this form is stale or was not sent from Signoff's page; reload it")
        return self._signed_in(request, request.session)

    def _signed_in(self, request: Request, session: Session) -> Answer:
        path, method = request.path, request.method
        if path == "/ui/logout" and method == "POST":
            return self._page("message.html", None, title="Signed out", text="You are signed out.", again=True,
                              headers=[cookie_header(SESSION_COOKIE, "", secure=self.secure, max_age=0)])
        if path == PREFIX and method == "GET":
            wanted = {k: request.query.get(k, "") for k in pages.FILTERS}
            listed = pages.visible_runs(self.runner, session.user, wanted, request.query.get("older_than") or None)
            older = urlencode({**{k: v for k, v in wanted.items() if v}, "older_than": listed.older_than})
            return self._page("runs.html", session, title="Runs", rows=listed.rows, wanted=wanted, statuses=STATUSES,
                              older=f"{PREFIX}?{older}" if listed.older_than else None)
        if path == "/ui/approvals" and method == "GET":
            return self._page("inbox.html", session, title="Waiting on you", waiting=pages.waiting(self.runner, session.user))
        if (found := _RUN.match(path)) and method == "GET":
            run = self.runner.get_run(found["id"], history=False)
            if run is None or self.runner.visibility_refusal(session.user, run) is not None:
                return self._not_found(session)
            return self._page("run.html", session, title=f"Run {run.run_id}", story=pages.story(self.runner, run))
        if found := _APPROVAL.match(path):
            return self._approval(request, session, found["id"], found["action"])
        return self._not_found(session)

    # -- approvals ---------------------------------------------------------------------------------

    def _approval(self, request: Request, session: Session, approval_id: str, action: str | None) -> Answer:
        approval = self.runner.get_approval(approval_id)
        run = self.runner.get_run(approval.run_id, history=False) if approval is not None else None
        if approval is None or run is None or self.runner.visibility_refusal(session.user, run) is not None:
            return self._not_found(session)
        if action == "/decide" and request.method == "POST":
            approved = request.form.get("decision") == "approve"
            outcome = self.runner.decide(approval_id, request.form.get("digest", ""), session.user, approved=approved,
                                         note=request.form.get("note", "").strip()[:2000], drive=True, show=False,
                                         signed_in=self._sign_in(session))
            self._after(outcome)
            said = decision_words(outcome)
            return self._approval_page(session, approval_id, said=said, status="200 OK")
        if action == "/edit" and request.method == "POST":
            return self._edit(request, session, approval_id)
        if action is None and request.method == "GET":
            return self._approval_page(session, approval_id)
        return self._not_found(session)

    def _approval_page(self, session: Session, approval_id: str, *, said: str | None = None,
                       edit_error: str | None = None, edited_text: str | None = None, status: str = "200 OK") -> Answer:
        approval = self.runner.get_approval(approval_id)
        run = self.runner.get_run(approval.run_id, history=False) if approval is not None else None
        if approval is None or run is None:
            return self._not_found(session)
        now = self.runner.policy_now(run, approval)
        refusal = self.runner.approval_refusal(session.user, run, approval, now)
        step_up = self.runner.step_up_needed(run, approval, now)
        fresh = step_up is None or (session.auth_time is not None and
                                    datetime.now(UTC).timestamp() - session.auth_time <= step_up.total_seconds())
        view = pages.approval_view(self.runner, run, approval, self.runner.timeline(run.run_id))
        return self._page("approval.html", session, status=status, title=f"Approve {approval.tool}?", run=run,
                          view=view, refusal=refusal, said=said, fresh=fresh,
                          step_up_seconds=int(step_up.total_seconds()) if step_up else None,
                          relogin=self._login_link(f"/ui/approvals/{approval_id}",
                                                   int(step_up.total_seconds()) if step_up else None),
                          edit_error=edit_error,
                          edited_text=edited_text or json.dumps(approval.args, indent=2, ensure_ascii=False))

    def _edit(self, request: Request, session: Session, approval_id: str) -> Answer:
        text = request.form.get("arguments", "")
        try:
            args = json.loads(text)
        except ValueError as exc:
            return self._approval_page(session, approval_id, edit_error=f"not JSON: {exc}", edited_text=text,
                                       status="400 Bad Request")
        outcome = self.runner.edit(approval_id, request.form.get("digest", ""), session.user, args)
        if isinstance(outcome, Done):
            self.drive(outcome.run.run_id)  # its worker asks afresh about the edited call
        said, error = edit_words(outcome)
        return self._approval_page(session, approval_id, said=said, edit_error=error, edited_text=text if error else None)

    def _after(self, outcome: DecisionOutcome) -> None:
        """As after a Slack click: the run goes on here first, then its card is brought in line."""
        if isinstance(outcome, Decided):
            self.drive(outcome.approval.run_id)
        self.runner.show_decision(outcome)

    def _sign_in(self, session: Session) -> SignIn | None:
        if session.auth_time is None:
            return None
        return SignIn(self.issuer.issuer, datetime.fromtimestamp(session.auth_time, UTC))

    # -- signing in and out ------------------------------------------------------------------------

    def _login_link(self, back: str, max_age: int | None = None) -> str:
        return "/ui/login?" + urlencode({"next": back, **({"max_age": str(max_age)} if max_age else {})})

    def _login(self, request: Request) -> Answer:
        back = _safe_next(request.query.get("next"))
        max_age = request.query.get("max_age", "")
        started = self.issuer.start(max_age=int(max_age) if max_age.isdigit() and 0 < int(max_age) <= 86400 else None)
        kept = self.signer.sign("login", {**started.kept, "next": back}, LOGIN_SECONDS)
        return Answer("303 See Other", headers=[("Location", started.url),
                                               cookie_header(LOGIN_COOKIE, kept, secure=self.secure, max_age=LOGIN_SECONDS)])

    def _callback(self, request: Request) -> Answer:
        kept = self.signer.read("login", request.cookies.get(LOGIN_COOKIE))
        if kept is None:
            raise SignInError("this sign-in was not started in this browser, or took too long; sign in again")
        claims = self.issuer.finish(kept, request.query)
        user = slack_user(claims, self.lookup, self.team())
        auth_time = claims.get("auth_time")
        session = Session(user=user, subject=str(claims["sub"]), name=str(claims.get("name") or claims.get("email") or user),
                          auth_time=auth_time if isinstance(auth_time, int) else None, csrf=new_token())
        log.info("console: %s signed in as Slack user %s", claims["sub"], user)
        cookie = self.signer.sign("session", session.to_json(), SESSION_SECONDS)
        return Answer("303 See Other", headers=[
            ("Location", _safe_next(kept.get("next"))),
            cookie_header(SESSION_COOKIE, cookie, secure=self.secure, max_age=SESSION_SECONDS),
            cookie_header(LOGIN_COOKIE, "", secure=self.secure, max_age=0)])

    # -- reading and writing HTTP ------------------------------------------------------------------

    def _request(self, environ: dict[str, Any]) -> Request | None:
        method = environ.get("REQUEST_METHOD", "GET")
        form: dict[str, str] = {}
        if method == "POST":
            try:
                size = int(environ.get("CONTENT_LENGTH") or 0)
            except ValueError:
                return None
            if size > MAX_FORM_BYTES or size < 0:
                return None
            form = dict(parse_qsl(environ["wsgi.input"].read(size).decode("utf-8", "replace"), keep_blank_values=True))
        cookies = read_cookies(environ.get("HTTP_COOKIE", ""))
        session = Session.from_json(self.signer.read("session", cookies.get(SESSION_COOKIE)))
        query = dict(parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True))
        return Request(method, environ.get("PATH_INFO", ""), query, form, cookies, session)

    def _page(self, template: str, session: Session | None, *, status: str = "200 OK",
              headers: list[tuple[str, str]] | None = None, **values: Any) -> Answer:
        body = self.templates.get_template(template).render(session=session, **values)
        return Answer(status, body.encode(), headers)

    def _not_found(self, session: Session | None) -> Answer:
        return self._page("message.html", session, status="404 Not Found", title="Not found",
                          text="There is nothing here that you may see.")

    def _plain(self, status: str, text: str) -> Answer:
        return Answer(status, text.encode(), content_type="text/plain; charset=utf-8")


def _safe_next(value: Any) -> str:
    """Where to go after signing in: a console path only, never another site."""
    text = str(value or "")
    return text if text.startswith(PREFIX) and not text.startswith("//") and "\\" not in text else PREFIX
