"""An argument the args model does not declare is refused, so what is approved is what runs."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from signoff.runtime import Agent
from signoff.tools.base import Tool


class EmailArgs(BaseModel):
    to: str
    body: str


class OpenArgs(BaseModel):
    model_config = ConfigDict(extra="allow")
    to: str


def send(args: dict[str, Any], key: str) -> None:
    return None


def test_an_undeclared_argument_is_refused_by_name_without_its_value():
    tool = Tool("send_email", send, side_effect=True, args_model=EmailArgs)
    with pytest.raises(ValueError) as caught:
        tool.validate({"to": "ana@example.com", "body": "hi", "bcc": "attacker@evil.example"})
    assert str(caught.value) == "invalid arguments: bcc: Extra inputs are not permitted"


def test_a_model_that_allows_extra_arguments_keeps_them_so_they_are_shown():
    tool = Tool("send_email", send, side_effect=True, args_model=OpenArgs)
    assert tool.validate({"to": "ana@example.com", "bcc": "x@example.com"}) == {
        "to": "ana@example.com", "bcc": "x@example.com"}


def test_the_model_is_told_which_argument_was_unexpected_and_nothing_waits_for_approval():
    proposals = iter([{"tool": "send_email", "args": {"to": "ana@example.com", "body": "hi", "bcc": "evil"}},
                      {"final": "gave up"}])
    agent = Agent(lambda history: next(proposals), [Tool("send_email", send, side_effect=True, args_model=EmailArgs)])
    assert agent.start("email Ana") == "done"
    [observed] = [e for e in agent.state["history"] if e["role"] == "tool"]
    assert observed["error_kind"] == "invalid_args" and "bcc" in observed["error"]
    assert agent.state["pending"] is None
