"""The Anthropic adapter end to end: the real `anthropic` client, a fake server, and a real Agent."""

from __future__ import annotations

import json
from typing import Any

import pytest

from signoff.runtime import Agent, Budget, ModelAuthError
from signoff.runtime.models import check_model, policy_from_spec
from tests.fakes.anthropic_server import FakeAnthropic, error, message, text, tool_use

GOAL = "Refund order A-1 if it was delivered"


def make_agent(tools, env, sleeps, *, budget: Budget | None = None, **options: Any) -> Agent:
    policy = policy_from_spec("anthropic:claude-sonnet-4-20250514", tools, env=env, sleep=sleeps.append,
                              instructions="You are the support desk.", **options)
    return Agent(policy, tools, run_id="run-8", budget=budget or Budget(max_steps=8))


def blocks(body: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [b for m in body["messages"] for b in m["content"] if b["type"] == kind]


def test_tool_round_trip_with_an_approval_pause(anthropic_server: FakeAnthropic, anthropic_env, tools, desk,
                                                sleeps):
    anthropic_server.script(
        message(tool_use("lookup_order", {"order_id": "A-1"}, "toolu_look"), usage=(100, 20)),
        message(text("Delivered; refunding."),
                tool_use("refund", {"order_id": "A-1", "amount_usd": 42}, "toolu_refund"), usage=(150, 30)),
        message(text("Refunded 42 USD."), usage=(200, 10)),
    )
    agent = make_agent(tools, anthropic_env, sleeps)

    assert agent.start(GOAL) == "awaiting_approval"
    assert agent.decide(True, by="U_LEAD") == "done"

    assert desk.refunds == [({"order_id": "A-1", "amount_usd": 42.0}, "run-8:2")]
    first, _, third = anthropic_server.bodies
    assert first["system"].startswith("You are the support desk.")
    assert "- refund [needs human approval]: Refund an order." in first["system"]
    assert first["tools"][0] == {
        "name": "lookup_order", "description": "Look up an order by id.",
        "input_schema": tools[0].json_schema(),
    }
    assert [m["role"] for m in third["messages"]] == ["user", "assistant", "user", "assistant", "user"]
    assert third["messages"][3]["content"][0] == {"type": "text", "text": "Delivered; refunding."}
    results = blocks(third, "tool_result")
    assert [r["tool_use_id"] for r in results] == ["toolu_look", "toolu_refund"]
    assert [r["is_error"] for r in results] == [False, False]
    assert '<tool_output tool="refund" untrusted="true">' in results[1]["content"]
    assert f"Reminder: the user's goal is: {GOAL};" in results[1]["content"]
    headers = anthropic_server.requests[0].headers
    assert "sk-ant-test" in (headers.get("x-api-key"), headers.get("authorization", "").removeprefix("Bearer "))
    assert headers["anthropic-version"]
    usage = agent.state["usage"]
    # Sample table: claude-sonnet-4 at 3 / 15 USD per million tokens.
    assert usage["cost_usd"] == pytest.approx((450 * 3 + 60 * 15) / 1e6)
    assert agent.state["model"]["name"] == "anthropic:claude-sonnet-4-20250514"


def test_cache_writes_and_reads_are_priced_at_the_cache_prices(anthropic_server, anthropic_env, tools, sleeps):
    anthropic_server.script(message(text("Delivered."), usage=(200, 50), cache=(1000, 3000)))
    agent = make_agent(tools, anthropic_env, sleeps)

    assert agent.start(GOAL) == "done"

    usage = agent.state["usage"]
    assert (usage["input_tokens"], usage["output_tokens"]) == (4200, 50)
    # Sample table: claude-sonnet-4 at 3 input, 3.75 cache write, 0.30 cache read, 15 output.
    # (200 * 3 + 1000 * 3.75 + 3000 * 0.30 + 50 * 15) / 1e6
    assert usage["cost_usd"] == 0.006


def test_cache_tokens_count_against_the_token_budget(anthropic_server, anthropic_env, tools, sleeps):
    anthropic_server.script(message(tool_use("lookup_order", {"order_id": "A-1"}), usage=(10, 5), cache=(0, 2000)),
                            message(text("Delivered.")))
    agent = make_agent(tools, anthropic_env, sleeps, budget=Budget(max_steps=10, max_tokens=1000))

    assert agent.start(GOAL) == "budget_exhausted"

    assert agent.state["stop"]["reason"] == "max_tokens reached"
    assert agent.state["usage"]["input_tokens"] == 2010
    assert len(anthropic_server.bodies) == 1


def test_a_table_without_cache_prices_prices_cache_tokens_as_input(anthropic_server, anthropic_env, tools, sleeps,
                                                                   tmp_path):
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"models": {"claude-sonnet-4": {"input": 3, "output": 15}}}))
    anthropic_server.script(message(text("Delivered."), usage=(200, 50), cache=(1000, 3000)))
    agent = make_agent(tools, anthropic_env, sleeps, prices_path=prices)

    assert agent.start(GOAL) == "done"

    assert agent.state["usage"]["cost_usd"] == (4200 * 3 + 50 * 15) / 1e6


def test_denial_is_an_error_tool_result_the_model_acts_on(anthropic_server, anthropic_env, tools, desk, sleeps):
    anthropic_server.script(
        message(tool_use("refund", {"order_id": "A-1", "amount_usd": 500}, "toolu_r")),
        message(text("I will ask a manager instead.")),
    )
    agent = make_agent(tools, anthropic_env, sleeps)
    agent.start(GOAL)

    assert agent.decide(False, note="needs a manager") == "done"

    [denied] = blocks(anthropic_server.bodies[1], "tool_result")
    assert denied["tool_use_id"] == "toolu_r" and denied["is_error"] is True
    assert "denied by human: needs a manager" in denied["content"]
    assert desk.refunds == []


def test_feedback_after_a_tool_result_merges_into_one_user_turn(anthropic_server, anthropic_env, tools, sleeps):
    anthropic_server.script(
        message(tool_use("lookup_order", {"order_id": "A-1"}, "toolu_1")),
        message(),
        message(text("Delivered.")),
    )
    agent = make_agent(tools, anthropic_env, sleeps)

    assert agent.start(GOAL) == "done"

    last = anthropic_server.bodies[2]["messages"]
    assert [m["role"] for m in last] == ["user", "assistant", "user"]
    assert [b["type"] for b in last[2]["content"]] == ["tool_result", "text"]
    assert "neither a tool call nor text" in last[2]["content"][1]["text"]


def test_several_tool_uses_are_one_decision_in_the_providers_order(anthropic_server, anthropic_env, tools,
                                                                    sleeps):
    anthropic_server.script(message(
        text("Looking up both."),
        tool_use("lookup_order", {"order_id": "A-1"}, "toolu_a"),
        tool_use("refund", {"order_id": "A-1", "amount_usd": 1}, "toolu_b"),
        tool_use("lookup_order", "A-2", "toolu_c"),
    ))
    policy = policy_from_spec("anthropic:claude-sonnet-4-20250514", tools, env=anthropic_env, sleep=sleeps.append)

    decision = policy([{"role": "user", "content": GOAL}])

    assert decision["calls"] == [
        {"tool": "lookup_order", "args": {"order_id": "A-1"}, "call_id": "toolu_a"},
        {"tool": "refund", "args": {"order_id": "A-1", "amount_usd": 1}, "call_id": "toolu_b"},
        {"tool": "lookup_order", "args": "A-2", "call_id": "toolu_c"},
    ]
    assert decision["text"] == "Looking up both."
    assert "tool" not in decision and "note" not in decision


def test_a_batch_turn_goes_back_as_one_assistant_message_and_one_user_message_of_results(
        anthropic_server, anthropic_env, tools, sleeps, batch_history):
    anthropic_server.script(message(text("Refund denied until checked.")))
    policy = policy_from_spec("anthropic:claude-sonnet-4-20250514", tools, env=anthropic_env, sleep=sleeps.append)

    assert policy(batch_history)["final"] == "Refund denied until checked."

    # The fake server answers 400 to a conversation the API would refuse, so getting here says it took it.
    sent = anthropic_server.bodies[0]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user", "assistant", "user"]
    calls = sent[1]["content"]
    assert calls[0] == {"type": "text", "text": "Checking the order while asking for the refund."}
    assert [(b["type"], b["id"], b["name"], b["input"]) for b in calls[1:]] == [
        ("tool_use", "c1", "lookup_order", {"order_id": "A-1"}),
        ("tool_use", "c2", "refund", {"order_id": "A-1", "amount_usd": 5}),
        ("tool_use", "c3", "lookup_order", {"_unparsed_arguments": '{"order_id": "A-'}),
    ]
    results, feedback = sent[2]["content"][:3], sent[2]["content"][3:]
    assert [(b["type"], b["tool_use_id"], b["is_error"]) for b in results] == [
        ("tool_result", "c1", False), ("tool_result", "c2", True), ("tool_result", "c3", True)]
    # The goal is restated once, after the last result; the runtime's feedback follows all of them.
    assert ["Reminder: the user's goal is" in b["content"] for b in results] == [False, False, True]
    assert [b["type"] for b in feedback] == ["text"] and "could not be used" in feedback[0]["text"]
    assert [b["id"] for b in sent[3]["content"]] == ["c4"]
    assert [b["tool_use_id"] for b in sent[4]["content"]] == ["c4"]


def test_input_that_is_not_an_object_comes_back_as_invalid_args(anthropic_server, anthropic_env, tools, sleeps):
    anthropic_server.script(message(tool_use("lookup_order", "A-1", "toolu_s")), message(text("Sorry.")))
    agent = make_agent(tools, anthropic_env, sleeps)

    assert agent.start(GOAL) == "done"

    assert agent.state["history"][2]["error_kind"] == "invalid_args"
    [sent] = blocks(anthropic_server.bodies[1], "tool_use")
    assert sent["input"] == {"_unparsed_arguments": "A-1"}
    [result] = blocks(anthropic_server.bodies[1], "tool_result")
    assert result["is_error"] is True and 'kind="invalid_args"' in result["content"]


def test_unknown_tool_is_answered_by_id(anthropic_server, anthropic_env, tools, sleeps):
    anthropic_server.script(message(tool_use("drop_tables", {}, "toolu_x")), message(text("Cannot.")))
    agent = make_agent(tools, anthropic_env, sleeps)

    assert agent.start(GOAL) == "done"

    [result] = blocks(anthropic_server.bodies[1], "tool_result")
    assert result["tool_use_id"] == "toolu_x" and "unknown tool drop_tables" in result["content"]


def test_overloaded_with_retry_after_then_success(anthropic_server, anthropic_env, tools, sleeps):
    anthropic_server.script(error(529, "Overloaded", retry_after="3", kind="overloaded_error"),
                            message(text("Fine.")))
    agent = make_agent(tools, anthropic_env, sleeps)

    assert agent.start(GOAL) == "done"

    assert sleeps == [3.0]


def test_server_errors_fail_the_run_as_model_unavailable(anthropic_server, anthropic_env, tools, sleeps):
    anthropic_server.script(*(error(500, "Internal server error") for _ in range(2)))
    agent = make_agent(tools, anthropic_env, sleeps, max_retries=1)

    assert agent.start(GOAL) == "failed"

    assert agent.state["stop"]["reason"] == "model unavailable"
    assert "HTTP 500: Internal server error" in agent.state["stop"]["detail"]
    anthropic_server.script(message(text("Back.")))
    assert agent.retry() == "done"


def test_rejected_key_fails_the_run_and_check_says_why(anthropic_server, tools, sleeps):
    env = {"ANTHROPIC_BASE_URL": anthropic_server.url, "ANTHROPIC_API_KEY": "sk-ant-wrong"}
    agent = make_agent(tools, env, sleeps)

    assert agent.start(GOAL) == "failed"

    assert agent.state["stop"]["reason"] == "model rejected credentials"
    with pytest.raises(ModelAuthError, match=r"HTTP 401: invalid x-api-key"):
        check_model("anthropic:claude-sonnet-4-20250514", env)


def test_check_model_sends_a_one_token_message(anthropic_server, anthropic_env):
    anthropic_server.script(message(text("p"), usage=(8, 1)))

    result = check_model("anthropic:claude-sonnet-4-20250514", anthropic_env)

    assert result.startswith("ok: ") and "answered a one-token message" in result
    [body] = anthropic_server.bodies
    assert body["max_tokens"] == 1 and body["model"] == "claude-sonnet-4-20250514"
