"""HTTP tools against a real local server: the request each call sends, what the model gets back, how
every way a call can go wrong is reported, and that no secret or stray request leaves Signoff."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from http_harness import FakeApi

from signoff.runtime.tool_calls import run_tool
from signoff.tools.base import Tool, ToolFailed, ToolOutcomeUnknown
from signoff.tools.registry import load_toolsets

SECRET = "tk-0123456789-secret"
KEY = "run-0a1b2c3d4e:3"


def ticket_args(*extra: str) -> dict[str, Any]:
    properties = {"ticket_id": {"type": "string"}, **{name: {"type": "string"} for name in extra}}
    return {"type": "object", "properties": properties, "required": ["ticket_id"]}


def endpoints() -> list[dict[str, Any]]:
    return [
        {"name": "get_ticket", "method": "GET", "path": "/tickets/{ticket_id}", "description": "Read one ticket.",
         "args": ticket_args()},
        {"name": "search", "method": "GET", "path": "/search", "description": "Search tickets.",
         "args": {"type": "object", "properties": {"q": {"type": "string"}, "tag": {"type": "array"},
                                                  "open": {"type": "boolean"}, "limit": {"type": "integer"}}}},
        {"name": "exists", "method": "HEAD", "path": "/tickets/{ticket_id}", "description": "Whether it exists.",
         "args": ticket_args()},
        {"name": "add_comment", "method": "POST", "path": "/tickets/{ticket_id}/comments",
         "description": "Comment on a ticket.", "args": ticket_args("text")},
        {"name": "close", "method": "DELETE", "path": "/tickets/{ticket_id}", "description": "Close a ticket.",
         "args": ticket_args("reason")},
        {"name": "audit_read", "method": "GET", "path": "/audit/{ticket_id}", "side_effect": True,
         "description": "Read the audit trail (every read is logged).", "args": ticket_args()},
    ]


@pytest.fixture
def api() -> Iterator[FakeApi]:
    with FakeApi() as server:
        yield server


class Tools:
    """The tools of one configured API, called as the runner calls them (validated, then with a time limit)."""

    def __init__(self, tmp_path: Path, url: str, **entry: Any) -> None:
        config = {"apis": {"tickets": {"base_url": url, "headers": {"Authorization": "Bearer ${TICKETS_TOKEN}"},
                                       "timeout": 5, "tools": endpoints(), **entry}}}
        (tmp_path / "apis.yaml").write_text(yaml.safe_dump(config))
        self.tools = load_toolsets("http:tickets", outbox=tmp_path, http_config=tmp_path / "apis.yaml",
                                   environ={"TICKETS_TOKEN": SECRET})

    def __getitem__(self, name: str) -> Tool:
        return self.tools[f"http__tickets__{name}"]

    def call(self, name: str, args: dict[str, Any], key: str = KEY) -> Any:
        tool = self[name]
        return run_tool(tool, tool.validate(args), key)


@pytest.fixture
def tools(tmp_path: Path, api: FakeApi) -> Tools:
    return Tools(tmp_path, api.url + "/v2")


# -- requests ---------------------------------------------------------------------------------------


def test_a_get_fills_the_path_and_sends_the_headers_but_no_idempotency_key(tools, api):
    api.answer("GET", "/v2/tickets/T-1", body={"id": "T-1", "title": "Printer on fire"})
    assert tools.call("get_ticket", {"ticket_id": "T-1"}) == {
        "status": 200, "body": {"id": "T-1", "title": "Printer on fire"}}
    [sent] = api.requests
    assert (sent.method, sent.path, sent.body) == ("GET", "/v2/tickets/T-1", b"")
    assert sent.header("Authorization") == f"Bearer {SECRET}" and sent.header("Idempotency-Key") is None


def test_the_files_headers_win_over_signoffs_defaults(tmp_path, api):
    tools = Tools(tmp_path, api.url, headers={"accept": "application/vnd.tickets+json", "User-Agent": "ops-bot"})
    api.answer("GET", "/tickets/T-1", body={"id": "T-1"})
    tools.call("get_ticket", {"ticket_id": "T-1"})
    [sent] = api.requests
    assert (sent.header("Accept"), sent.header("User-Agent")) == ("application/vnd.tickets+json", "ops-bot")


def test_query_arguments_are_encoded_as_a_server_reads_them(tools, api):
    api.answer("GET", "/v2/search", body=[])
    tools.call("search", {"q": "on fire & smoking", "tag": ["hw", "urgent"], "open": True, "limit": 5})
    [sent] = api.requests
    assert sent.query == [("q", "on fire & smoking"), ("tag", "hw"), ("tag", "urgent"), ("open", "true"),
                          ("limit", "5")]


def test_a_post_sends_its_arguments_as_json_with_the_approved_key(tools, api):
    api.answer("POST", "/v2/tickets/T-1/comments", status=201, body={"comment": 7})
    assert tools.call("add_comment", {"ticket_id": "T-1", "text": "On it."}) == {"status": 201,
                                                                                "body": {"comment": 7}}
    [sent] = api.requests
    assert sent.json == {"text": "On it."} and sent.header("Content-Type") == "application/json"
    assert sent.header("Idempotency-Key") == KEY


def test_a_delete_sends_its_arguments_in_the_query_and_the_key(tools, api):
    api.answer("DELETE", "/v2/tickets/T-1", status=204)
    assert tools.call("close", {"ticket_id": "T-1", "reason": "duplicate"}) == {"status": 204, "body": ""}
    [sent] = api.requests
    assert sent.query == [("reason", "duplicate")] and sent.header("Idempotency-Key") == KEY


def test_a_get_made_a_side_effect_waits_for_approval_and_carries_the_key(tools, api):
    assert tools["audit_read"].side_effect and not tools["get_ticket"].side_effect
    api.answer("GET", "/v2/audit/T-1", body={"reads": 3})
    tools.call("audit_read", {"ticket_id": "T-1"})
    assert api.requests[0].header("Idempotency-Key") == KEY


def test_a_placeholder_value_is_quoted_into_one_segment(tools, api):
    api.answer("GET", "/v2/tickets/T%201%3A%C3%A9", body={})
    tools.call("get_ticket", {"ticket_id": "T 1:é"})
    assert api.requests[0].path == "/v2/tickets/T%201%3A%C3%A9"  # the path as it went over the wire


@pytest.mark.parametrize("value", ["../admin", "..", "a/b", "http://evil.example/x", "x?admin=1", "x#y",
                                   "%2e%2e", "a\\b", ""])
def test_a_value_that_would_leave_its_path_segment_is_refused_before_anyone_is_asked(tools, api, value):
    with pytest.raises(ValueError, match=r"invalid arguments: ticket_id: may not be empty or hold '/'") as caught:
        tools["add_comment"].validate({"ticket_id": value, "text": "hi"})
    assert value not in str(caught.value) or value in ("", "..")  # never echoed back
    with pytest.raises(ToolFailed, match="invalid arguments"):
        tools["add_comment"].fn({"ticket_id": value, "text": "hi"}, KEY)  # nor sent if asked directly
    assert api.requests == []


def test_an_undeclared_argument_is_refused_so_what_is_approved_is_what_is_sent(tools):
    with pytest.raises(ValueError, match="url: Extra inputs are not permitted"):
        tools["add_comment"].validate({"ticket_id": "T-1", "text": "hi", "url": "https://evil.example"})


# -- responses --------------------------------------------------------------------------------------


def test_text_stays_text_and_json_is_read_when_the_server_says_it_is_json(tools, api):
    api.answer("GET", "/v2/tickets/T-1", body="plain words")
    assert tools.call("get_ticket", {"ticket_id": "T-1"}) == {"status": 200, "body": "plain words"}
    api.answer("GET", "/v2/tickets/T-2", body=b'{"a": 1}', content_type="application/problem+json")
    assert tools.call("get_ticket", {"ticket_id": "T-2"})["body"] == {"a": 1}
    api.answer("GET", "/v2/tickets/T-3", body=b'{"a": 1}', content_type="text/plain")
    assert tools.call("get_ticket", {"ticket_id": "T-3"})["body"] == '{"a": 1}'
    api.answer("GET", "/v2/tickets/T-4", body=b"{not json", content_type="application/json")
    assert tools.call("get_ticket", {"ticket_id": "T-4"})["body"] == "{not json"


def test_a_head_answers_with_its_status(tools, api):
    api.answer("HEAD", "/v2/tickets/T-1", body={"ignored": True})
    assert tools.call("exists", {"ticket_id": "T-1"}) == {"status": 200, "body": ""}


def test_a_long_body_is_cut_at_the_cap_and_says_so(tmp_path, api):
    tools = Tools(tmp_path, api.url, max_response_bytes=1000)
    api.answer("GET", "/tickets/T-1", body={"log": "é" * 5000})
    result = tools.call("get_ticket", {"ticket_id": "T-1"})
    assert result["truncated"] == "cut at 1000 bytes (max_response_bytes); the rest was not read"
    assert isinstance(result["body"], str) and result["body"].startswith('{"log": "')
    assert len(result["body"].encode()) <= 1000 and "\ufffd" not in result["body"]  # no character cut in half


def test_an_endless_body_is_read_only_up_to_the_cap(tmp_path, api, monkeypatch):
    received: list[int] = []
    iter_bytes = httpx.Response.iter_bytes

    def counted(response: httpx.Response, *args: Any, **kwargs: Any) -> Iterator[bytes]:
        for chunk in iter_bytes(response, *args, **kwargs):
            received.append(len(chunk))
            yield chunk

    monkeypatch.setattr(httpx.Response, "iter_bytes", counted)
    tools = Tools(tmp_path, api.url, max_response_bytes=4096)
    api.answer("GET", "/tickets/T-1", body=b"x" * 65536, content_type="text/plain", endless=True)
    result = tools.call("get_ticket", {"ticket_id": "T-1"})
    assert result["body"] == "x" * 4096 and "cut at 4096 bytes" in result["truncated"]
    assert sum(received) <= 4096 + 65536  # the cap, and at most one network read past it


def test_an_error_status_is_a_failure_the_model_sees_with_a_short_body(tools, api):
    api.answer("POST", "/v2/tickets/T-1/comments", status=422, body={"error": "text is too short"})
    with pytest.raises(ToolFailed) as caught:
        tools.call("add_comment", {"ticket_id": "T-1", "text": "x"})
    assert str(caught.value) == 'HTTP 422 Unprocessable Entity: {"error": "text is too short"}'
    api.answer("GET", "/v2/tickets/T-9", status=500, body="<html>" + "boom " * 500 + "</html>")
    with pytest.raises(ToolFailed, match=r"^HTTP 500 Internal Server Error: <html>boom boom .*…$") as caught:
        tools.call("get_ticket", {"ticket_id": "T-9"})
    assert len(str(caught.value)) < 340
    with pytest.raises(ToolFailed, match=r"^HTTP 404 Not Found: "):
        tools.call("get_ticket", {"ticket_id": "nope"})


def test_a_redirect_is_not_followed_and_names_where_it_pointed(tmp_path, api):
    with FakeApi() as elsewhere:
        tools = Tools(tmp_path, api.url)
        api.answer("POST", "/tickets/T-1/comments", status=307,
                   headers={"Location": f"{elsewhere.url}/steal?token=x"})
        with pytest.raises(ToolFailed) as caught:
            tools.call("add_comment", {"ticket_id": "T-1", "text": "hi"})
        assert elsewhere.requests == [] and len(api.requests) == 1
    host = elsewhere.url.removeprefix("http://")
    assert str(caught.value) == (f"HTTP 307 Temporary Redirect: a redirect to {host}, which is not followed "
                                 f"(requests go only to {api.url.removeprefix('http://')} as configured)")


# -- failures ---------------------------------------------------------------------------------------


def test_a_read_that_times_out_is_a_failure_and_a_write_has_an_unknown_outcome(tmp_path, api):
    tools = Tools(tmp_path, api.url, timeout=0.5)
    api.answer("GET", "/tickets/T-1", body={}, delay_s=2)
    api.answer("POST", "/tickets/T-1/comments", body={}, delay_s=2)
    with pytest.raises(ToolFailed, match=r"^GET 127\.0\.0\.1:\d+: no answer \(timed out\)$"):
        tools["get_ticket"].fn({"ticket_id": "T-1"}, KEY)
    with pytest.raises(ToolOutcomeUnknown, match="the request was sent but no answer came back .*may or may not"):
        tools["add_comment"].fn({"ticket_id": "T-1", "text": "hi"}, KEY)


def test_a_gateway_timeout_of_a_write_has_an_unknown_outcome(tools, api):
    api.answer("POST", "/v2/tickets/T-1/comments", status=504, body="upstream timed out")
    with pytest.raises(ToolOutcomeUnknown, match="HTTP 504 Gateway Timeout: .*may or may not have taken effect"):
        tools.call("add_comment", {"ticket_id": "T-1", "text": "hi"})
    api.answer("GET", "/v2/tickets/T-1", status=504, body="upstream timed out")
    with pytest.raises(ToolFailed, match="HTTP 504"):
        tools.call("get_ticket", {"ticket_id": "T-1"})


def test_nothing_listening_is_a_plain_failure_even_for_a_write(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    tools = Tools(tmp_path, f"http://127.0.0.1:{port}")
    with pytest.raises(ToolFailed, match=r"^POST 127\.0\.0\.1:\d+: could not connect .*; nothing was sent$"):
        tools.call("add_comment", {"ticket_id": "T-1", "text": "hi"})


# -- secrets ----------------------------------------------------------------------------------------


def test_a_token_the_server_echoes_back_is_scrubbed_from_results_errors_and_logs(tools, api, caplog):
    caplog.set_level(logging.DEBUG)
    echo = {"seen": {"authorization": f"Bearer {SECRET}"}, f"key-{SECRET}": [SECRET]}
    api.answer("GET", "/v2/tickets/T-1", body=echo)
    api.answer("POST", "/v2/tickets/T-1/comments", status=401, body=f"bad token {SECRET}")
    result = tools.call("get_ticket", {"ticket_id": "T-1"})
    assert result["body"] == {"seen": {"authorization": "Bearer ***"}, "key-***": ["***"]}
    with pytest.raises(ToolFailed) as caught:
        tools.call("add_comment", {"ticket_id": "T-1", "text": "hi"})
    assert str(caught.value) == "HTTP 401 Unauthorized: bad token ***"
    assert api.requests[0].header("Authorization") == f"Bearer {SECRET}"  # it was sent, only never shown
    assert caplog.records and SECRET not in caplog.text
    assert not any(SECRET in repr(tool) or SECRET in tool.description for tool in tools.tools.values())
