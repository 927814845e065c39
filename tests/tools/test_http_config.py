"""The HTTP tools file without sending a request: what an operator writes, the tools and gates it makes,
and every mistake refused at start-up in one line naming the API, the tool and the problem."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml

from signoff.tools.http import HttpConfigError, HttpGate, api_tools, http_gate, load_config, resolve_gate
from signoff.tools.http.config import DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_TIMEOUT_S, parse_config
from signoff.tools.registry import ToolsetError, load_toolsets

SECRET = "tk-0123456789-secret"

TICKETS: dict[str, Any] = {
    "base_url": "https://tickets.example.com/api/",
    "headers": {"Authorization": "Bearer ${TICKETS_TOKEN}", "Accept-Language": "en"},
    "timeout": 10,
    "tools": [
        {"name": "get_ticket", "method": "GET", "path": "/tickets/{ticket_id}", "description": "Read one ticket.",
         "args": {"type": "object", "properties": {"ticket_id": {"type": "string"}}, "required": ["ticket_id"]}},
        {"name": "add_comment", "method": "post", "path": "/tickets/{ticket_id}/comments",
         "description": "Add a comment to a ticket.",
         "args": {"type": "object", "properties": {"ticket_id": {"type": "string"}, "text": {"type": "string"}},
                  "required": ["ticket_id", "text"]}},
        {"name": "search", "method": "GET", "path": "/search", "description": "Search tickets.", "timeout": 3,
         "args": {"type": "object", "properties": {"q": {"type": "string"}}}},
    ],
}
ENV = {"TICKETS_TOKEN": SECRET}


def document(**changes: Any) -> dict[str, Any]:
    """The tickets API with `changes` to its entry; `tool_<n>` keys replace keys of the nth tool."""
    api = copy.deepcopy(TICKETS)
    for key, value in changes.items():
        if key.startswith("tool_"):
            api["tools"][int(key.removeprefix("tool_"))].update(value)
        else:
            api[key] = value
    return {"apis": {"tickets": api}}


def problems(data: Any, environ: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(HttpConfigError) as caught:
        parse_config(data, ENV if environ is None else environ, path="apis.yaml")
    assert not any(SECRET in problem for problem in caught.value.problems)
    return caught.value.problems


# -- the file ---------------------------------------------------------------------------------------


def test_a_yaml_file_makes_one_tool_per_endpoint_named_after_its_api(tmp_path):
    path = tmp_path / "apis.yaml"
    path.write_text(yaml.safe_dump(document()))
    config = load_config(path, ENV)
    api = config.apis["tickets"]
    assert (api.base_url, api.host, api.max_response_bytes) == (
        "https://tickets.example.com/api", "tickets.example.com", DEFAULT_MAX_RESPONSE_BYTES)
    assert api.headers["Authorization"] == f"Bearer {SECRET}" and SECRET not in repr(config)
    tools = {tool.name: tool for tool in api_tools(api)}
    assert list(tools) == ["http__tickets__get_ticket", "http__tickets__add_comment", "http__tickets__search"]
    comment = tools["http__tickets__add_comment"]
    assert comment.description == ("Add a comment to a ticket. "
                                   "(POST tickets.example.com/api/tickets/{ticket_id}/comments)")
    assert comment.json_schema()["required"] == ["ticket_id", "text"]
    assert not any(SECRET in tool.description or SECRET in json.dumps(tool.json_schema()) for tool in tools.values())


def test_the_same_document_as_json_loads_the_same(tmp_path):
    (tmp_path / "apis.yaml").write_text(yaml.safe_dump(document()))
    (tmp_path / "apis.json").write_text(json.dumps(document()))
    assert load_config(tmp_path / "apis.json", ENV).apis == load_config(tmp_path / "apis.yaml", ENV).apis


def test_a_missing_variable_names_the_api_the_header_and_the_variable_never_a_value():
    assert problems(document(), environ={}) == [
        "apis.yaml: api tickets: headers.Authorization uses ${TICKETS_TOKEN}, which is not set in the environment"]
    assert parse_config(document(headers={"X-Env": "${STAGE:-dev}"}), {}).apis["tickets"].headers == {"X-Env": "dev"}


def test_an_unknown_key_is_refused_with_the_api_and_the_tool_named():
    assert problems(document(tool_1={"side_efect": False}, retries=3)) == [
        "apis.yaml: api tickets: retries: not a key Signoff knows (a typo?)",
        "apis.yaml: api tickets, tool add_comment: side_efect: not a key Signoff knows (a typo?)",
    ]


def test_every_bad_entry_is_reported_at_once_one_line_each():
    found = problems({"apis": {
        "ftp": {**TICKETS, "base_url": "ftp://files.example.com"},
        "creds": {**TICKETS, "base_url": "https://ana:pw@tickets.example.com"},
        "a__b": TICKETS,
        "empty": {"base_url": "https://e.example.com", "tools": []},
        "verbs": {**TICKETS, "tools": [{**TICKETS["tools"][0], "method": "TRACE"}]},
        "headers": {**TICKETS, "headers": {"Idempotency-Key": "mine"}},
        "twice": {**TICKETS, "tools": [TICKETS["tools"][0], TICKETS["tools"][0]]},
    }})
    assert "apis.yaml: api ftp: base_url: expected an http(s) URL such as https://api.example.com/v1" in found
    assert any(p.startswith("apis.yaml: api creds: base_url: may not hold credentials") for p in found)
    assert any(p.startswith("apis.yaml: api a__b: name: ") for p in found)
    assert any(p.startswith("apis.yaml: api empty: tools: expected a list of tools") for p in found)
    assert ("apis.yaml: api verbs, tool get_ticket: method: expected one of GET, HEAD, POST, PUT, PATCH, DELETE"
            in found)
    assert "apis.yaml: api headers: headers: Idempotency-Key is set by Signoff or the HTTP client, not by the file" in found
    assert "apis.yaml: api twice, tool get_ticket: name: given twice" in found
    assert len(found) == 7


@pytest.mark.parametrize(("path", "why"), [
    ("https://evil.example/x", "must start with '/'"),
    ("//evil.example/x", "must start with '/'"),
    ("/tickets/../admin", "'..' segments"),
    ("/tickets?id={ticket_id}", "may not hold '?' or '#'"),
    ("/tickets/{ticket_id", "unmatched"),
    ("/tickets/{id}", "placeholder {id} must be a property of args, and required"),
    ("/tickets/{ticket-id}", "is not a name"),
    ("/tick ets/{ticket_id}", "characters a URL path cannot"),
])
def test_a_path_template_can_only_name_a_path_below_the_base_url(path, why):
    [problem] = problems(document(tool_0={"path": path}))
    assert problem.startswith("apis.yaml: api tickets, tool get_ticket: ") and why in problem


def test_a_placeholder_must_be_a_required_scalar_argument():
    optional = {"type": "object", "properties": {"ticket_id": {"type": "string"}}}
    listed = {"type": "object", "properties": {"ticket_id": {"type": "array"}}, "required": ["ticket_id"]}
    assert "must be a property of args, and required" in problems(document(tool_0={"args": optional}))[0]
    assert "must be a string, integer or number" in problems(document(tool_0={"args": listed}))[0]
    assert "args: the input schema is not valid JSON Schema" in problems(
        document(tool_0={"args": {"type": "object", "properties": {"ticket_id": {"type": 7}}}}))[0]


def test_a_redacted_argument_may_not_go_in_the_url_and_a_get_has_no_body():
    [in_query] = problems(document(tool_2={"redact": ["q"]}))
    assert in_query == ("apis.yaml: api tickets, tool search: redact: q would go in the URL, which servers and "
                        "proxies log; send it in the body (args_in: body)")
    assert "a GET request has no body" in problems(document(tool_2={"args_in": "body"}))[0]
    assert api_tools(parse_config(document(tool_1={"redact": ["text"]}), ENV).apis["tickets"])[1].redact == ("text",)


def test_yaml_that_gives_a_key_twice_or_does_not_parse_is_refused(tmp_path):
    path = tmp_path / "apis.yaml"
    path.write_text("apis:\n  tickets:\n    base_url: https://a.example\n    base_url: https://b.example\n")
    with pytest.raises(HttpConfigError, match=r"line 4, column 5\): the key 'base_url' is given twice"):
        load_config(path, {})
    path.write_text("apis: [")
    with pytest.raises(HttpConfigError, match="not valid YAML or JSON"):
        load_config(path, {})
    path.write_text("tools: []")
    with pytest.raises(HttpConfigError, match='expected one key, "apis"'):
        load_config(path, {})
    with pytest.raises(HttpConfigError, match="SIGNOFF_HTTP_TOOLS: cannot read"):
        load_config(tmp_path / "missing.yaml", {})


# -- gates ------------------------------------------------------------------------------------------


def gates(data: dict[str, Any]) -> dict[str, HttpGate]:
    api = parse_config(data, ENV).apis["tickets"]
    return {tool.name: resolve_gate(api, tool) for tool in api.tools}


def test_get_and_head_run_unasked_and_every_other_method_waits_for_approval():
    endpoints = [{"name": m.lower(), "method": m, "path": f"/{m.lower()}", "description": m}
                 for m in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")]
    found = gates(document(tools=endpoints))
    assert {name for name, gate in found.items() if not gate.side_effect} == {"get", "head"}
    assert found["get"] == HttpGate(side_effect=False, idempotent=False, timeout_s=10, side_effect_from="method",
                                    idempotent_from="default", timeout_from="api")
    assert found["delete"].summary() == "approval (method), not idempotent (default), 10s (api)"
    assert gates(document(timeout=None))["search"].timeout_s == 3
    assert gates(document(timeout=None))["get_ticket"].timeout_s == DEFAULT_TIMEOUT_S


def test_an_override_may_always_make_a_tool_stricter():
    found = gates(document(tool_0={"side_effect": True}, tool_1={"idempotent": False}))
    assert found["get_ticket"].summary() == "approval (override), not idempotent (default), 10s (api)"
    assert (found["add_comment"].side_effect, found["add_comment"].idempotent_from) == (True, "override")


def test_loosening_a_gate_needs_the_api_to_be_trusted():
    assert problems(document(tool_1={"side_effect": False, "idempotent": True})) == [
        'apis.yaml: api tickets, tool add_comment: side_effect: false on a POST needs "trusted: true" on the API']
    [idempotent] = problems(document(tool_1={"idempotent": True}))
    assert idempotent.startswith('apis.yaml: api tickets, tool add_comment: idempotent: true needs "trusted: true"')
    trusted = gates(document(trusted=True, tool_1={"idempotent": True}))
    assert trusted["add_comment"].summary() == "approval (method), idempotent (override), 10s (api)"
    assert gates(document(trusted=True, tool_1={"side_effect": False}))["add_comment"].side_effect is False


# -- toolsets ---------------------------------------------------------------------------------------


def test_http_entries_pick_apis_from_the_file(tmp_path):
    path = tmp_path / "apis.yaml"
    other = {**TICKETS, "base_url": "https://billing.example.com", "headers": {}}
    path.write_text(yaml.safe_dump({"apis": {"tickets": TICKETS, "billing": other}}))
    picked = load_toolsets("demo,http:billing", outbox=tmp_path, http_config=path, environ=ENV)
    assert [name for name in picked if name.startswith("http__")] == [
        "http__billing__get_ticket", "http__billing__add_comment", "http__billing__search"]
    everything = load_toolsets("http:*,http:tickets", outbox=tmp_path, http_config=path, environ=ENV)
    assert len(everything) == 6
    gate = http_gate(everything["http__tickets__add_comment"])
    assert gate is not None and gate.side_effect and http_gate(picked["search_handbook"]) is None


def test_http_entries_need_a_file_that_names_the_api(tmp_path):
    with pytest.raises(ToolsetError, match='no HTTP APIs are configured .*SIGNOFF_HTTP_TOOLS'):
        load_toolsets("demo,http:tickets", outbox=tmp_path)
    path = tmp_path / "apis.yaml"
    path.write_text(yaml.safe_dump(document()))
    with pytest.raises(ToolsetError) as caught:
        load_toolsets("http:tikets", outbox=tmp_path, http_config=path, environ=ENV)
    assert caught.value.problems == [f"http:tikets: {path} has no API 'tikets' (it has: tickets)"]
    with pytest.raises(ToolsetError) as caught:
        load_toolsets("http:tickets", outbox=tmp_path, http_config=path, environ={})
    assert caught.value.problems == [f"{path}: api tickets: headers.Authorization uses ${{TICKETS_TOKEN}}, "
                                     "which is not set in the environment"]


def test_the_file_is_not_read_unless_an_entry_picks_an_api(tmp_path):
    assert "send_email" in load_toolsets("demo", outbox=tmp_path, http_config=tmp_path / "missing.yaml")


def test_signoff_check_says_which_apis_are_picked_and_names_each_problem(tmp_path):
    from signoff.bot.cli.toolview import check_http
    from signoff.bot.settings import Settings

    path = tmp_path / "apis.yaml"
    path.write_text(yaml.safe_dump({"apis": {"tickets": TICKETS, "billing": {**TICKETS, "headers": {}}}},
                                   sort_keys=False))
    settings = Settings.from_env({"SIGNOFF_HTTP_TOOLS": str(path), "SIGNOFF_TOOLS": "demo,http:tickets"})
    lines = check_http(settings, ENV)
    assert lines[0] == "ok http tickets: https://tickets.example.com/api -> 3 tools · headers: Authorization, Accept-Language"
    assert lines[4] == "ok http billing: https://tickets.example.com/api -> 3 tools (not in SIGNOFF_TOOLS)"
    assert lines[2].split() == ["http__tickets__add_comment", "POST", "/tickets/{ticket_id}/comments", "approval",
                                "(method),", "not", "idempotent", "(default),", "10s", "(api)"]
    assert check_http(settings, {}) == [f"FAIL http: {path}: api tickets: headers.Authorization uses "
                                        "${TICKETS_TOKEN}, which is not set in the environment"]
    assert check_http(Settings.from_env({}), ENV) == []
    assert not any(SECRET in line for line in lines)
