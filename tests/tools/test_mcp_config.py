"""The MCP configuration, the gates and the argument schemas, without starting a server: what an
operator writes, what it makes of each tool, and what a model is told when it gets a call wrong."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel

from signoff.tools.base import Tool
from signoff.tools.mcp.config import DEFAULT_TIMEOUT_S, McpConfigError, load_config, parse_config
from signoff.tools.mcp.gates import Gate, resolve_gate
from signoff.tools.mcp.results import error_text, shaped
from signoff.tools.mcp.schema import InvalidSchema, JsonSchemaArgs
from signoff.tools.mcp.servers import McpServers
from signoff.tools.registry import ToolsetError, load_toolsets

GIT = {"command": "mcp-server-git", "args": ["--repository", "${REPO}"]}
TICKETS = {"url": "https://tickets.example.com/mcp", "headers": {"Authorization": "Bearer ${TICKETS_TOKEN}"}}


def problems(data: object, environ: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(McpConfigError) as caught:
        parse_config(data, environ or {})
    return caught.value.problems


# -- the file ---------------------------------------------------------------------------------------


def test_variables_come_from_the_environment_so_secrets_stay_out_of_the_file(tmp_path):
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"git": GIT, "tickets": TICKETS}}))
    config = load_config(path, {"REPO": "/srv/repo", "TICKETS_TOKEN": "tk-123456"})
    assert list(config.servers) == ["git", "tickets"]
    git, tickets = config.servers["git"], config.servers["tickets"]
    assert (git.transport, git.args, git.where) == ("stdio", ("--repository", "/srv/repo"),
                                                    "mcp-server-git --repository ${REPO}")
    assert (tickets.transport, tickets.headers) == ("http", {"Authorization": "Bearer tk-123456"})
    assert "tk-123456" not in repr(config) and tickets.where == "https://tickets.example.com/mcp"
    keyed = parse_config({"mcpServers": {"k": {"url": "https://k.example/mcp?key=${K}"}}}, {"K": "k-secret"})
    assert (keyed.servers["k"].url, keyed.servers["k"].where) == ("https://k.example/mcp?key=k-secret",
                                                                  "https://k.example/mcp?key=${K}")


def test_a_missing_variable_names_the_server_the_field_and_the_variable():
    assert problems({"mcpServers": {"git": GIT, "tickets": TICKETS}}, {"REPO": "/srv/repo"}) == [
        "server tickets: headers.Authorization uses ${TICKETS_TOKEN}, which is not set in the environment"]


def test_a_default_stands_in_for_a_variable_that_is_not_set():
    config = parse_config({"mcpServers": {"git": {"command": "mcp-server-git", "args": ["-r", "${REPO:-.}"]}}}, {})
    assert config.servers["git"].args == ("-r", ".")


def test_every_bad_entry_is_named_at_once_without_echoing_secret_values():
    found = problems({"mcpServers": {
        "both": {"command": "x", "url": "https://a.example/mcp"},
        "neither": {"args": ["x"]},
        "typo": {"command": "x", "tool": {"a": {"side_effect": True}}},
        "bad override": {"command": "x"},
        "loose": {"command": "x", "tools": {"t": {"side_effect": "sometimes"}}},
        "ftp": {"url": "ftp://files.example", "headers": {"Authorization": "hunter2-secret"}},
        "git__x": {"command": "x"},
    }})
    assert any(p.startswith("server both: ") and '"command"' in p for p in found)
    assert any(p.startswith("server neither: ") for p in found)
    assert "server typo: tool: not a key Signoff knows (a typo?)" in found
    assert any(p.startswith("server bad override: name: ") for p in found)
    assert any(p.startswith("server loose: tools.t.side_effect: ") for p in found)
    assert any(p.startswith("server ftp: url: ") for p in found)
    assert any(p.startswith("server git__x: name: ") for p in found)  # tool names would be ambiguous
    assert not any("hunter2" in p for p in found)


def test_a_file_that_is_not_the_mcp_servers_format_says_what_it_expects(tmp_path):
    path = tmp_path / "mcp.json"
    path.write_text('{"servers": {}}')
    with pytest.raises(McpConfigError, match='expected {"mcpServers"'):
        load_config(path, {})
    path.write_text('{"mcpServers": ')
    with pytest.raises(McpConfigError, match="not valid JSON: .* line 1"):
        load_config(path, {})
    with pytest.raises(McpConfigError, match="cannot read"):
        load_config(tmp_path / "missing.json", {})


def test_mcp_entries_need_a_configuration_and_a_configured_server(tmp_path):
    with pytest.raises(ToolsetError, match="no MCP servers are configured .*SIGNOFF_MCP_CONFIG"):
        load_toolsets("demo,mcp:git", outbox=tmp_path)
    servers = McpServers(parse_config({"mcpServers": {"git": {"command": "x"},
                                                      "old": {"command": "y", "disabled": True}}}, {}))
    with pytest.raises(ToolsetError) as caught:
        load_toolsets("mcp:gti,mcp:old", outbox=tmp_path, mcp=servers)
    assert caught.value.problems == [f"mcp:gti: {servers.config.path} has no server 'gti' (it has: git, old)",
                                     f"mcp:old: the server is disabled in {servers.config.path}"]
    assert servers.select(["*"]) == ["git"]


# -- gates ------------------------------------------------------------------------------------------


def server(**entry: object):
    return parse_config({"mcpServers": {"s": {"command": "x", **entry}}}, {}).servers["s"]


def test_annotations_gate_a_tool_and_no_annotations_means_approval():
    assert resolve_gate(server(), "status", {"readOnlyHint": True}) == Gate(
        side_effect=False, idempotent=False, timeout_s=DEFAULT_TIMEOUT_S, side_effect_from="annotation",
        idempotent_from="default", timeout_from="default")
    commit = resolve_gate(server(), "commit", {"readOnlyHint": False, "idempotentHint": False})
    assert (commit.side_effect, commit.idempotent, commit.side_effect_from) == (True, False, "annotation")
    bare = resolve_gate(server(), "anything", None)
    assert (bare.side_effect, bare.idempotent, bare.side_effect_from, bare.idempotent_from) == (
        True, False, "default", "default")
    # Only `true` counts: a hint of another type fails closed.
    assert resolve_gate(server(), "odd", {"readOnlyHint": "yes"}).side_effect is True


def test_an_override_makes_a_tool_stricter_on_any_server():
    lying = server(tools={"delete_branch": {"side_effect": True}, "add": {"idempotent": False}})
    deleting = resolve_gate(lying, "delete_branch", {"readOnlyHint": True})
    assert (deleting.side_effect, deleting.side_effect_from) == (True, "override")
    adding = resolve_gate(lying, "add", {"idempotentHint": True})
    assert (adding.idempotent, adding.idempotent_from) == (False, "override")


def test_an_override_that_loosens_a_gate_needs_a_trusted_server():
    loose = {"count": {"side_effect": False, "idempotent": True}}
    refused = resolve_gate(server(tools=loose), "count", None)
    assert (refused.side_effect, refused.idempotent, refused.side_effect_from) == (True, False, "default")
    assert refused.refused == ('"side_effect": false needs "trusted": true on the server',
                               '"idempotent": true needs "trusted": true on the server')
    assert "refused: " in refused.summary()
    trusted = resolve_gate(server(tools=loose, trusted=True), "count", None)
    assert (trusted.side_effect, trusted.idempotent, trusted.side_effect_from, trusted.refused) == (
        False, True, "override", ())


def test_time_limits_come_from_the_tool_then_the_server_then_the_default():
    entry = server(timeout=12, tools={"slow": {"timeout": 90}})
    assert (resolve_gate(entry, "slow", None).timeout_s, resolve_gate(entry, "slow", None).timeout_from) == (
        90, "override")
    assert (resolve_gate(entry, "quick", None).timeout_s, resolve_gate(entry, "quick", None).timeout_from) == (
        12, "server")


def test_a_gate_rule_decides_after_everything_else():
    def ask_for_everything(server_name: str, tool: str, gate: Gate) -> Gate:
        return Gate(True, False, gate.timeout_s, "override", "override", gate.timeout_from)

    assert resolve_gate(server(trusted=True, tools={"t": {"side_effect": False}}), "t", None,
                        [ask_for_everything]).side_effect is True


# -- arguments --------------------------------------------------------------------------------------

COMMIT_SCHEMA = {"type": "object", "title": "commitArguments", "required": ["repo_path", "message"],
                 "properties": {"repo_path": {"type": "string"}, "message": {"type": "string", "minLength": 1},
                                "count": {"type": "integer", "maximum": 10}}}


class NoArgs(BaseModel):
    pass


def commit_tool(schema: dict[str, object] = COMMIT_SCHEMA, **flags: object) -> Tool:
    return Tool("mcp__git__git_commit", lambda args, key: None, args_schema=JsonSchemaArgs(dict(schema)),
                **flags)  # type: ignore[arg-type]


def test_the_model_sees_the_servers_schema_and_gets_every_problem_by_name_never_the_value():
    tool = commit_tool(side_effect=True)
    assert tool.json_schema() == COMMIT_SCHEMA
    assert tool.validate({"repo_path": "/r", "message": "Add notes"}) == {"repo_path": "/r", "message": "Add notes"}
    with pytest.raises(ValueError) as caught:
        tool.validate({"repo_path": 7, "message": "", "count": 99, "token": "sk-live-secret"})
    message = str(caught.value)
    assert message == ("invalid arguments: token: Extra inputs are not permitted; count: must be <= 10; "
                       "message: must have at least 1 characters; repo_path: must be of type string")
    with pytest.raises(ValueError, match="^invalid arguments: message: field required$"):
        tool.validate({"repo_path": "/r"})


def test_undeclared_arguments_pass_only_where_the_schema_allows_them():
    open_schema = {**COMMIT_SCHEMA, "additionalProperties": True}
    assert commit_tool(open_schema).validate({"repo_path": "/r", "message": "m", "extra": 1})["extra"] == 1
    patterned = {**COMMIT_SCHEMA, "patternProperties": {"^x-": {"type": "string"}}}
    assert commit_tool(patterned).validate({"repo_path": "/r", "message": "m", "x-trace": "t"})["x-trace"] == "t"
    closed = {**COMMIT_SCHEMA, "additionalProperties": False}
    with pytest.raises(ValueError, match="extra: Extra inputs are not permitted"):
        commit_tool(closed).validate({"repo_path": "/r", "message": "m", "extra": 1})


def test_a_schema_that_cannot_check_arguments_is_refused():
    with pytest.raises(InvalidSchema):
        JsonSchemaArgs({"type": "array"})
    with pytest.raises(InvalidSchema):
        JsonSchemaArgs({"type": "object", "properties": {"a": {"type": "no-such-type"}}})
    with pytest.raises(TypeError, match="not both"):
        Tool("t", lambda a, k: None, args_model=NoArgs, args_schema=JsonSchemaArgs({"type": "object"}))


def test_the_contract_covers_the_schema_and_the_gates():
    base = commit_tool(side_effect=True, idempotent=False)
    assert commit_tool(side_effect=True, idempotent=False).contract == base.contract
    assert commit_tool(side_effect=False).contract != base.contract
    assert commit_tool(side_effect=True, idempotent=True).contract != base.contract
    assert commit_tool(side_effect=True, timeout_s=60).contract != base.contract
    wider = {**COMMIT_SCHEMA, "properties": {**COMMIT_SCHEMA["properties"], "amend": {"type": "boolean"}}}
    assert commit_tool(wider, side_effect=True).contract != base.contract


# -- results ----------------------------------------------------------------------------------------


def test_results_are_structured_content_else_the_text_as_json_where_it_is_json():
    assert shaped({"files": 2}, [{"type": "text", "text": "ignored"}]) == {"files": 2}
    assert shaped(None, [{"type": "text", "text": "Changes committed"}]) == "Changes committed"
    assert shaped(None, [{"type": "text", "text": '{"id": 7}'}]) == {"id": 7}
    assert shaped(None, [{"type": "text", "text": "a"}, {"type": "image", "data": "AAAA", "mimeType": "image/png"}]
                  ) == ["a", {"type": "image", "mimeType": "image/png",
                              "omitted": "4 characters of base64 are not shown"}]
    assert shaped(None, []) is None
    assert error_text([{"type": "text", "text": "Repository path is outside the allowed repository"}]) == (
        "Repository path is outside the allowed repository")
