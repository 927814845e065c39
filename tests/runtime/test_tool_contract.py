"""The `Tool` contract: what a tool must be, and how it validates the arguments a model proposes."""

from __future__ import annotations

from typing import Any

import pytest
from agent_fakes import EmailArgs
from pydantic import BaseModel

from signoff.runtime import Tool


def noop(args: dict[str, Any], key: str) -> None:
    return None


def test_tool_defaults():
    tool = Tool("lookup", noop)
    assert (tool.side_effect, tool.args_model, tool.description) == (False, None, "")
    assert (tool.timeout_s, tool.idempotent, tool.redact) == (30.0, False, ())


@pytest.mark.parametrize("name", ["", "1abc", "has space", "a" * 65, "dots.not.allowed", None])
def test_tool_names_must_be_simple_identifiers(name):
    with pytest.raises(ValueError, match="invalid tool name"):
        Tool(name, noop)


@pytest.mark.parametrize("options", [
    {"fn": "not callable"},
    {"args_model": dict},
    {"args_model": EmailArgs(to="a", subject="s")},
])
def test_tool_rejects_a_bad_fn_or_args_model(options):
    with pytest.raises(TypeError):
        Tool("lookup", **{"fn": noop, **options})


@pytest.mark.parametrize("timeout_s", [0, -1])
def test_tool_timeout_must_be_positive(timeout_s):
    with pytest.raises(ValueError, match="timeout_s"):
        Tool("lookup", noop, timeout_s=timeout_s)


def test_validate_returns_plain_json_with_defaults_filled_in():
    tool = Tool("send_email", noop, args_model=EmailArgs)
    assert tool.validate({"to": "a@x", "subject": "s"}) == {"to": "a@x", "subject": "s", "body": ""}


def test_validate_lists_each_field_error_without_echoing_values():
    tool = Tool("send_email", noop, args_model=EmailArgs)
    with pytest.raises(ValueError) as caught:
        tool.validate({"subject": ["s3cr3t-value"], "cc": "x"})
    message = str(caught.value)
    assert message.startswith("invalid arguments: ")
    assert "to: Field required" in message and "subject: " in message and "cc: " in message
    assert "s3cr3t-value" not in message


def test_validate_without_a_model_accepts_any_object_but_nothing_else():
    tool = Tool("free", noop)
    assert tool.validate({"anything": [1, 2]}) == {"anything": [1, 2]}
    with pytest.raises(ValueError, match="must be a JSON object, got list"):
        tool.validate([1, 2])


def test_json_schema_is_what_the_model_sees():
    class Args(BaseModel):
        query: str

    assert Tool("search", noop, args_model=Args).json_schema()["required"] == ["query"]
    assert Tool("free", noop).json_schema() == {"type": "object", "properties": {}, "additionalProperties": True}


def test_agent_refuses_two_tools_with_one_name():
    from signoff.runtime import Agent

    with pytest.raises(ValueError, match="duplicate tool name 'lookup'"):
        Agent(lambda history: {"final": "x"}, [Tool("lookup", noop), Tool("lookup", noop)])
    with pytest.raises(TypeError, match="expected a Tool"):
        Agent(lambda history: {"final": "x"}, [noop])
