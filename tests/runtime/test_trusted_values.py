"""The loop builds values without validating them again (`Value.trusted`, `Value.evolved`) where
their parts were validated where they came in. Property: every state a run reaches that way is
exactly what validation would make of it, field for field and with the same fields left out, and
the read-only JSON the agent shows is that state's JSON.

Hypothesis drives an agent with replies and tool results of awkward shapes (string subclasses,
tuples, non-string keys, values JSON cannot hold, usage and model metadata) and people's requests.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from agent_fakes import Outbox, Script, search_tool, send_email_tool
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from signoff.runtime import Agent, Budget, Tool
from signoff.runtime.decisions import is_plain_json, jsonable
from signoff.runtime.history import ToolCall, ToolResult, Versions
from signoff.runtime.schema import RunState


class Name(str):
    """A string subclass, which validation turns into a plain string."""


ODD_VALUES = st.sampled_from([
    ("a", 1), {"k": (1, 2)}, {1: "one"}, {"nested": {"x": [1, {"y": None}]}}, {1, 2}, b"bytes", 1.5, True,
    Name("sub"), {"s": Name("sub")}, object(), [float("inf")], "plain",
])

CALLS = st.one_of(
    st.builds(lambda q, args: {"tool": "search", "args": {"query": q, **args}},
              st.sampled_from(["refunds", "pricing", ""]), st.sampled_from([{}, {"limit": 2}, {"limit": "2"}])),
    st.builds(lambda to, subject: {"tool": "send_email", "args": {"to": to, "subject": subject}},
              st.sampled_from(["ops@example.com", "cfo@example.com"]), st.sampled_from(["Refunds", "Q3"])),
    st.builds(lambda value: {"tool": "echo", "args": {"value": value}}, ODD_VALUES),
    st.builds(lambda value: {"tool": Name("echo"), "args": {"value": value}, "text": Name("said"),
                             "note": "dropped one", "call_id": 7}, ODD_VALUES),
    st.builds(lambda value: {"tool": "echo", "args": value}, ODD_VALUES),
    st.just({"tool": "unknown_tool", "args": {}}),
)

REPLIES = st.builds(
    lambda decision, usage, model: {**decision, **({"usage": usage} if usage else {}),
                                    **({"model": model} if model else {})},
    st.one_of(CALLS, CALLS, st.builds(lambda text: {"final": text}, st.sampled_from(["done", Name("done")]))),
    st.none() | st.fixed_dictionaries({"input_tokens": st.integers(0, 50), "output_tokens": st.sampled_from([3, "4"]),
                                       "cost_usd": st.sampled_from([0.001, None, (1,)])}),
    st.none() | st.sampled_from([{"name": "model-a"}, {"name": "model-b", "system_prompt_sha256": "f" * 64},
                                 {"name": 3, "extra": (1, 2)}]),
) | st.sampled_from(["plain text", None, 42, {"tool": 3}, {"error": "unparseable"}])

REQUESTS = st.sampled_from(["approve", "deny", "cancel", "extend", "reconcile"])


def echo_tool() -> Tool:
    """Returns its argument as it is: whatever the policy put there, JSON or not."""
    return Tool("echo", lambda args, key: args.get("value"), timeout_s=None)


def shape(value: Any) -> Any:
    """`value` with the exact type of every part: a string subclass equals its string, but is not it."""
    if isinstance(value, dict):
        return {(type(k), k): shape(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value), [shape(v) for v in value]
    return type(value), value


def assert_as_validation_makes_it(agent: Agent) -> None:
    run = agent.run_state
    assert RunState.model_validate(run.model_dump()) == run
    assert shape(RunState.model_validate(run.model_dump()).model_dump()) == shape(run.model_dump())
    revalidated = RunState.model_validate(run.to_json())
    assert revalidated == run
    assert revalidated.to_json() == run.to_json()  # the same optional fields left out
    dumped = run.model_dump(mode="python", exclude_unset=True)
    assert run.to_json() == {**dumped, "history": list(dumped["history"])}
    assert agent.state == run.to_json()
    assert json.loads(agent.checkpoint()) == json.loads(json.dumps(run.to_json()))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(replies=st.lists(REPLIES, min_size=1, max_size=10), requests=st.lists(REQUESTS, max_size=6),
       results=st.lists(ODD_VALUES, max_size=6))
def test_every_state_a_run_reaches_is_what_validation_makes_of_it(replies, requests, results):
    outbox = Outbox()
    agent = Agent(Script(*replies, then={"final": "out of script"}),
                  [search_tool(outbox), send_email_tool(outbox), echo_tool()], budget=Budget(max_steps=12))
    agent.start("check the values")
    assert_as_validation_makes_it(agent)
    for request, result in zip(requests, [*results, *[None] * len(requests)], strict=False):
        if agent.status in ("done", "cancelled", "expired"):
            break
        match request:
            case "approve" | "deny" if agent.status == "awaiting_approval":
                agent.decide(request == "approve", note="checked")
            case "reconcile" if agent.status == "needs_reconciliation":
                agent.reconcile("done", result=result)
            case "extend" if agent.status in ("budget_exhausted", "stalled", "running", "awaiting_approval"):
                agent.extend(max_steps=agent.run_state.budget.max_steps + 2)
            case "cancel":
                agent.cancel("enough")
            case _:
                continue
        assert_as_validation_makes_it(agent)


def test_a_trusted_value_equals_the_validated_one_and_refuses_unknown_or_missing_fields():
    versions = Versions(model=None, prompt=None, tools="abc")
    fields = {"role": "assistant", "step": 1, "tool": "search", "args": {"query": "q"}, "call_id": "call-1",
              "versions": versions}
    trusted, validated = ToolCall.trusted(**fields), ToolCall(**fields)
    assert trusted == validated
    assert trusted.to_json() == validated.to_json() == validated.model_dump(exclude_unset=True)
    assert list(trusted.__dict__) == list(validated.__dict__)  # the fields in the same order
    with pytest.raises(TypeError, match="unknown fields \\['colour'\\]"):
        ToolResult.trusted(role="tool", step=1, tool="t", call_id="c", result=1, colour="red")
    with pytest.raises(TypeError, match="missing \\['call_id'\\]"):
        ToolResult.trusted(role="tool", step=1, tool="t", result=1)


@given(ODD_VALUES | st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                                 lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner)
                                 | st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=12))
def test_jsonable_gives_what_a_json_round_trip_gives(value: Any):
    try:
        expected = json.loads(json.dumps(value))
    except (TypeError, ValueError):
        expected = repr(value)
    made = jsonable(value)
    assert made == expected
    assert json.dumps(made) == json.dumps(expected)  # the same types too (no tuple, no subclass left)
    assert is_plain_json(made) or isinstance(made, str)
