"""One HTTP tool call: the request its arguments make, sent with httpx, and what the model is told.

- The URL is `base_url` plus the tool's path template, each `{placeholder}` filled with its argument
  URL-quoted; a value that could leave its segment (`/`, `\\`, `?`, `#`, `%`, `..`) is refused, so
  no argument can reach another path, let alone another host. Redirects are not followed.
- The other arguments go in the query or as a JSON body. A side effect carries
  `Idempotency-Key: <run_id:step>`, the key of the call that was approved.
- A 2xx answer is `{"status": 200, "body": ...}`, the body read as JSON when the server says it is
  JSON, else as text, and cut at the API's `max_response_bytes` (read as a stream: no more than
  that, plus the longest form of a secret and one network read, is ever held) with `"truncated"`
  saying so.
- Anything else is a `ToolFailed` with the status and a short body (read as JSON too when it is
  JSON), except a side effect cut short after it was sent (a timeout, the connection dropped, a
  gateway's 504): whether it took effect is unknown (`ToolOutcomeUnknown`), so it is never retried.

The values the headers take from the environment are scrubbed (`scrub.Scrubber`) from every result
and message, in every form a server could echo them in: a body after it is decoded, and as text
before it is cut, so no part of a secret survives at the cut.
"""

from __future__ import annotations

import codecs
import contextlib
import functools
import json
import ssl
from typing import Any
from urllib.parse import quote, urljoin, urlsplit

import httpx

from signoff.tools.base import ToolFailed, ToolOutcomeUnknown
from signoff.tools.http.config import SECRET_MIN_LENGTH, ApiConfig, EndpointConfig
from signoff.tools.http.gates import HttpGate
from signoff.tools.http.scrub import Scrubber

FORBIDDEN_IN_SEGMENT = ("/", "\\", "?", "#", "%")
"""What a path argument may not hold: each could end its segment, or be decoded into something that does."""
ERROR_BODY_CHARS = 300
"""How much of a failed response's body the model is shown."""
GATEWAY_TIMEOUT = 504
"""The one failed status that says nothing about whether the request took effect (a proxy gave up waiting)."""
_ACCEPT = "application/json, text/*;q=0.9, */*;q=0.5"
_USER_AGENT = "signoff"


def path_problems(tool: EndpointConfig, args: dict[str, Any]) -> list[str]:
    """Why the arguments cannot fill `tool`'s path, one problem per argument (never its value)."""
    problems = []
    for name in dict.fromkeys(tool.placeholders):
        value = args.get(name)
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            problems.append(f"{name}: must be a string or a number (it goes in the URL path)")
        elif str(value) in ("", ".") or ".." in str(value) or any(c in str(value) for c in FORBIDDEN_IN_SEGMENT):
            problems.append(f"{name}: may not be empty or hold '/', '\\', '?', '#', '%' or '..' "
                            "(it goes in the URL path)")
    return problems


def request_url(api: ApiConfig, tool: EndpointConfig, args: dict[str, Any]) -> str:
    """The URL `args` make of `tool`'s path template on `api`; raises `ToolFailed` for arguments that
    cannot fill it (already refused when the call was validated: this is the last line of defence)."""
    problems = path_problems(tool, args)
    if problems:
        raise ToolFailed("invalid arguments: " + "; ".join(problems))
    path = "".join(quote(str(args[part]), safe="") if odd else part
                   for odd, part in _alternate(tool.path))
    url = api.base_url + path
    if urlsplit(url).netloc != api.host or urlsplit(url).scheme != urlsplit(api.base_url).scheme:
        raise ToolFailed(f"refused: the request would leave {api.host}")
    return url


def _alternate(template: str) -> list[tuple[bool, str]]:
    """The template's literal parts (False) and placeholder names (True), in order."""
    parts = template.replace("}", "{").split("{")
    return [(index % 2 == 1, part) for index, part in enumerate(parts)]


def query_params(args: dict[str, Any]) -> list[tuple[str, str]]:
    """Arguments as query parameters: a list repeats its name, `null` is left out, anything nested is JSON."""
    params: list[tuple[str, str]] = []
    for name, value in args.items():
        for item in value if isinstance(value, list) else [value]:
            if item is not None:
                params.append((name, _query_value(item)))
    return params


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class HttpCall:
    """`Tool.fn` of an HTTP tool, carrying its API, endpoint and gate (what `signoff tools` shows)."""

    def __init__(self, api: ApiConfig, tool: EndpointConfig, gate: HttpGate) -> None:
        self.api, self.tool, self.gate = api, tool, gate
        self._scrubber = _scrubber(api.secrets)

    def __repr__(self) -> str:
        return f"HttpCall({self.tool.method} {self.api.host}{self.tool.path})"

    def __call__(self, args: dict[str, Any], key: str) -> Any:
        try:
            return self._send(args, key)
        except ToolFailed as exc:
            raise ToolFailed(self._scrubber.text(str(exc))) from None
        except ToolOutcomeUnknown as exc:
            raise ToolOutcomeUnknown(self._scrubber.text(str(exc))) from None

    def _send(self, args: dict[str, Any], key: str) -> Any:
        api, tool = self.api, self.tool
        url = request_url(api, tool, args)
        rest = {name: value for name, value in args.items() if name not in tool.placeholders}
        # The file's headers win over our defaults (an API may want its own Accept or User-Agent).
        headers = httpx.Headers({"Accept": _ACCEPT, "Accept-Encoding": "identity", "User-Agent": _USER_AGENT})
        headers.update(api.headers)
        if self.gate.side_effect:
            headers["Idempotency-Key"] = key
        body = rest if tool.sends_in == "body" else None
        params = tuple(query_params(rest)) if tool.sends_in == "query" else None
        where = f"{tool.method} {api.host}"
        try:
            # A client per call: nothing is shared between calls, threads or runs, and an abandoned
            # call (past its time limit) closes its own connection when it ends.
            with httpx.Client(timeout=httpx.Timeout(self.gate.timeout_s), follow_redirects=False,
                              trust_env=False, verify=_tls()) as client:
                request = client.build_request(tool.method, url, params=params, json=body, headers=headers)
                response = client.send(request, stream=True)
                try:
                    return self._answer(url, response)
                finally:
                    response.close()
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol) as exc:
            raise ToolFailed(f"{where}: could not connect ({_reason(exc)}); nothing was sent") from None
        except httpx.LocalProtocolError as exc:
            raise ToolFailed(f"{where}: the request could not be sent ({_reason(exc)})") from None
        except httpx.RequestError as exc:
            if self.gate.side_effect:
                raise ToolOutcomeUnknown(f"{where}: the request was sent but no answer came back "
                                         f"({_reason(exc)}); it may or may not have taken effect") from None
            raise ToolFailed(f"{where}: no answer ({_reason(exc)})") from None

    def _answer(self, url: str, response: httpx.Response) -> Any:
        status = response.status_code
        if response.is_redirect or 300 <= status < 400:
            # The host alone: a Location's user:password@ or path could carry what the server was sent.
            target = urlsplit(urljoin(url, response.headers.get("location", ""))).netloc.rpartition("@")[2]
            raise ToolFailed(f"HTTP {status} {response.reason_phrase}: a redirect to {target or self.api.host}, "
                             f"which is not followed (requests go only to {self.api.host} as configured)")
        if status == GATEWAY_TIMEOUT and self.gate.side_effect:
            raise ToolOutcomeUnknown(f"HTTP {status} {response.reason_phrase}: a gateway in front of "
                                     f"{self.api.host} gave up waiting; it may or may not have taken effect")
        if not response.is_success:
            body, _ = self._body(response, min(self.api.max_response_bytes, 4 * ERROR_BODY_CHARS))
            text = " ".join((body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)).split())
            short = text if len(text) <= ERROR_BODY_CHARS else text[: ERROR_BODY_CHARS - 1] + "…"
            raise ToolFailed(f"HTTP {status} {response.reason_phrase}" + (f": {short}" if short else ""))
        body, stopped = self._body(response, self.api.max_response_bytes)
        result: dict[str, Any] = {"status": status, "body": body}
        if stopped is not None:
            result["truncated"] = self._scrubber.text(stopped)
        return result

    def _body(self, response: httpx.Response, cap: int) -> tuple[Any, str | None]:
        """The body, scrubbed: read as JSON when the server says it is JSON (a server that says JSON
        and sends something else: the text), else as text cut at `cap` bytes; and why it is not whole."""
        # Read past the cap by the longest form of a secret: one across the cut is found whole.
        data, more, failure = _read_capped(response, cap + 4 * self._scrubber.reach)
        text = _decode(data, response, whole=not more and failure is None)
        if more or len(data) > cap:
            shown = len(_decode(data[:cap], response, whole=False))
            return self._scrubber.text(text, cut=shown), f"cut at {cap} bytes (max_response_bytes); the rest was not read"
        if failure is not None:
            return self._scrubber.text(text), f"the response stopped after {len(data)} bytes ({failure})"
        if text and _is_json(response):
            with contextlib.suppress(ValueError):
                return self._scrubber.value(json.loads(text)), None
        return self._scrubber.text(text), None


def _read_capped(response: httpx.Response, cap: int) -> tuple[bytes, bool, str | None]:
    """At most `cap` bytes of the body, whether there was more, and why it broke off (None: it did not)."""
    chunks: list[bytes] = []
    held = 0
    try:
        for chunk in response.iter_bytes():
            chunks.append(chunk)
            held += len(chunk)
            if held > cap:
                return b"".join(chunks)[:cap], True, None
    except httpx.RequestError as exc:
        # The answer's status is in: what came of the call is known, only its body is incomplete.
        return b"".join(chunks), False, _reason(exc)
    return b"".join(chunks), False, None


def _decode(data: bytes, response: httpx.Response, *, whole: bool) -> str:
    """The bytes as text in the response's charset; in a body cut short, a character cut in half at
    the end is left out."""
    try:
        decoder = codecs.getincrementaldecoder(response.charset_encoding or "utf-8")(errors="replace")
    except LookupError:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    return decoder.decode(data, final=whole)


def _is_json(response: httpx.Response) -> bool:
    kind = str(response.headers.get("content-type", "")).split(";")[0].strip().lower()
    return kind == "application/json" or kind.endswith("+json")


def _reason(exc: Exception) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


@functools.lru_cache(maxsize=64)
def _scrubber(secrets: tuple[str, ...]) -> Scrubber:
    """One `Scrubber` for all the tools of an API: its patterns take a while to build for a long token."""
    return Scrubber(secrets, SECRET_MIN_LENGTH)


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context for every call (loading the CA bundle costs more than a short request)."""
    return httpx.create_ssl_context(trust_env=False)
