"""A server that echoes the credential its API's headers carry, escaped as servers write things (PHP's
`\\/`, `\\u` escapes in either case or in part, percent-encoding, base64 of the token or of the whole
header, HTML references), in any body on any status: no form of it reaches a result, an error or a
stored run."""

from __future__ import annotations

import base64
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import yaml
from http_harness import FakeApi
from test_http_run import SCRIPT, drive, runner

from scenarios.leaks import forms
from signoff.runtime.tool_calls import run_tool
from signoff.tools.base import ToolFailed
from signoff.tools.registry import load_toolsets

TOKEN = "Zq9/secret/tok3n"
KEY = "run-0a1b2c3d4e:3"
TOKEN_FORMS = forms(TOKEN, f"Bearer {TOKEN}")


def shown(text: str, secret_forms: dict[str, str]) -> list[str]:
    """The forms `text` shows: whole, or the middle half of one (the part that is the secret's own)."""
    return [name for name, form in secret_forms.items()
            if form in text or form[len(form) // 4: 3 * len(form) // 4] in text]


@pytest.fixture
def api() -> Iterator[FakeApi]:
    with FakeApi() as server:
        yield server


def read_tool(tmp_path: Path, url: str, header: str = "Bearer ${TOKEN}", environ: dict[str, str] | None = None,
              **entry: Any) -> Any:
    """`call(path)` GETs `path` from the API as the runner calls the tool, with the credential in a header."""
    config = {"apis": {"echo": {"base_url": url, "headers": {"Authorization": header}, "timeout": 5, **entry,
                                "tools": [{"name": "get", "method": "GET", "path": "/{path}",
                                           "description": "Read a thing.",
                                           "args": {"type": "object", "properties": {"path": {"type": "string"}},
                                                    "required": ["path"]}}]}}}
    (tmp_path / "apis.yaml").write_text(yaml.safe_dump(config))
    tool = load_toolsets("http:echo", outbox=tmp_path, http_config=tmp_path / "apis.yaml",
                         environ=environ or {"TOKEN": TOKEN})["http__echo__get"]

    def call(path: str) -> str:
        """What the model is told: the result as JSON, or the failure's message."""
        try:
            return json.dumps(run_tool(tool, tool.validate({"path": path}), KEY), ensure_ascii=False)
        except ToolFailed as exc:
            return str(exc)

    return call


def bodies(form: str) -> dict[str, tuple[bytes, str]]:
    """The form in a JSON error as PHP writes one, as a JSON key, and in an HTML page."""
    return {
        "json-value": (b'{"error": "token ' + form.encode() + b' is not valid here"}', "application/json"),
        "json-key": (b'{"' + form.encode() + b'": "rejected"}', "application/problem+json"),
        "html": (b"<html><body><p>Token " + form.encode() + b" is not valid.</p></body></html>", "text/html"),
    }


@pytest.mark.parametrize("name", list(TOKEN_FORMS))
def test_no_escaped_form_of_the_token_reaches_an_error_or_a_result(tmp_path, api, name):
    call = read_tool(tmp_path, api.url)
    for status in (401, 403, 500, 200):
        for kind, (body, content_type) in bodies(TOKEN_FORMS[name]).items():
            api.answer("GET", f"/{status}-{kind}", status=status, body=body, content_type=content_type)
            told = call(f"{status}-{kind}")
            assert shown(told, TOKEN_FORMS) == [], (status, kind, told)
            assert "***" in told, (status, kind, told)
    assert api.requests[0].header("Authorization") == f"Bearer {TOKEN}"  # sent, only never shown


def test_a_json_error_body_is_shown_decoded_and_scrubbed(tmp_path, api):
    call = read_tool(tmp_path, api.url)
    api.answer("GET", "/x", status=401, content_type="application/json",
               body=b'{"error": "token Zq9\\/secret\\/tok3n is not valid here", "hint": "caf\\u00e9"}')
    assert call("x") == 'HTTP 401 Unauthorized: {"error": "token *** is not valid here", "hint": "café"}'


def test_a_basic_credential_is_hidden_encoded_decoded_and_by_its_password(tmp_path, api):
    credential = base64.b64encode(b"ada:Pa55/word!").decode()
    call = read_tool(tmp_path, api.url, header="Basic ${CREDENTIAL}", environ={"CREDENTIAL": credential})
    secret_forms = {**forms("ada:Pa55/word!", f"Basic {credential}"), **forms("Pa55/word!")}
    secret_forms |= {f"{name} of the header value": form for name, form in forms(credential).items()}
    for status in (401, 200):
        for name, form in secret_forms.items():
            api.answer("GET", "/who", status=status, body=f"you sent {form}, which we refuse".encode(),
                       content_type="text/plain")
            told = call("who")
            assert shown(told, secret_forms) == [], (status, name, told)


def test_a_redirect_names_its_host_but_never_what_its_location_carries(tmp_path, api):
    call = read_tool(tmp_path, api.url)
    location = f"https://ada:{quote(TOKEN, safe='')}@evil.example/callback?token={quote(TOKEN, safe='')}"
    api.answer("GET", "/moved", status=302, headers={"Location": location})
    told = call("moved")
    assert told.startswith("HTTP 302 Found: a redirect to evil.example, which is not followed")
    assert shown(told, TOKEN_FORMS) == [] and "ada" not in told


@pytest.mark.parametrize("name", ["plain", "php-json", "unicode-upper", "percent", "base64"])
def test_a_token_across_the_cap_is_hidden_whole_not_cut_to_a_prefix(tmp_path, api, name):
    call = read_tool(tmp_path, api.url, max_response_bytes=1000)
    form = TOKEN_FORMS.get(name, TOKEN)
    lead = "x" * (1000 - len(form) // 2)  # the cap falls in the middle of the form
    api.answer("GET", "/long", body=(lead + form + "y" * 5000).encode(), content_type="text/plain")
    result = json.loads(call("long"))
    # A base64 core takes the character before it too (it holds a few of the token's bits).
    assert result["body"] == (lead[:-1] if name == "base64" else lead) + "***"
    assert result["truncated"] == "cut at 1000 bytes (max_response_bytes); the rest was not read"
    assert shown(result["body"], TOKEN_FORMS) == [] and not result["body"].endswith(form[:4])


def test_an_error_body_cut_mid_token_shows_no_prefix_of_it(tmp_path, api):
    call = read_tool(tmp_path, api.url)
    # Spaces fold to one in the message, so what lay past the read cap is what the model would see.
    api.answer("GET", "/err", status=500, body=(" " * 1195 + TOKEN + " is not valid").encode(),
               content_type="text/plain")
    assert call("err") == "HTTP 500 Internal Server Error: ***"


def test_a_run_stores_no_form_of_the_token_a_server_echoed(tmp_path, api):
    secret = "tk-0123456789-secret"  # the token `test_http_run.runner` gives the API's header
    secret_forms = forms(secret, f"Bearer {secret}")
    api.answer("GET", "/tickets/T-1", content_type="application/json",
               body=json.dumps({"id": "T-1", "seen": list(secret_forms.values())}).encode())
    api.answer("POST", "/tickets/T-1/comments", status=401, content_type="text/html",
               body=" ".join(f"<p>{form}</p>" for form in secret_forms.values()).encode())
    work = runner(tmp_path, api, SCRIPT)
    run_id = work.start_run("comment on T-1", requester="cli:ana").run_id
    assert drive(work, run_id, [True]) == "done"
    assert [r.method for r in api.requests] == ["GET", "POST"]
    with sqlite3.connect(tmp_path / "signoff.db") as db:
        stored = "\n".join(db.iterdump())
    assert "HTTP 401 Unauthorized" in stored  # the failure was recorded, scrubbed
    assert shown(stored, secret_forms) == [] and shown(stored.replace("\\\\", "\\"), secret_forms) == []
