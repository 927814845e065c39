"""Budgets: checked before every policy call, counted across resumes, recorded when they run out."""

from __future__ import annotations

from typing import Any

import pytest
from agent_fakes import ManualClock, Outbox, Recorder, Script, call, final, search_tool, standard_tools

from signoff.runtime import Agent, Budget, InvalidTransition, Tool


def searching_forever(**usage: Any) -> Script:
    decision = {**call("search", query="more"), **({"usage": usage} if usage else {})}
    return Script(then=decision)


def test_max_steps_ends_the_run_as_budget_exhausted():
    script = searching_forever()
    agent = Agent(script, standard_tools(Outbox()), max_steps=3)
    assert agent.start("go") == "budget_exhausted"
    assert script.calls == 3 and agent.state["steps"] == 3
    assert agent.state["stop"]["budget"] == "max_steps"
    assert agent.state["stop"]["limits"]["max_steps"] == {"used": 3, "limit": 3}


def test_budget_is_checked_before_the_policy_call_not_after():
    script = Script(call("search", query="a"), final("ok"))
    agent = Agent(script, standard_tools(Outbox()), max_steps=2)
    assert agent.start("go") == "done"
    assert script.calls == 2


def test_max_tool_calls_stops_before_the_next_policy_call():
    outbox = Outbox()
    script = searching_forever()
    agent = Agent(script, standard_tools(outbox), budget=Budget(max_steps=50, max_tool_calls=2))
    assert agent.start("go") == "budget_exhausted"
    assert agent.state["stop"]["budget"] == "max_tool_calls"
    assert len(outbox.runs) == 2 and script.calls == 2


def test_max_tokens_counts_input_and_output_tokens_reported_by_the_policy():
    script = searching_forever(input_tokens=60, output_tokens=40)
    agent = Agent(script, standard_tools(Outbox()), budget=Budget(max_steps=50, max_tokens=250))
    assert agent.start("go") == "budget_exhausted"
    assert agent.state["stop"]["budget"] == "max_tokens"
    assert script.calls == 3
    usage = agent.state["usage"]
    assert (usage["input_tokens"], usage["output_tokens"]) == (180, 120)
    assert agent.state["stop"]["limits"]["max_tokens"] == {"used": 300, "limit": 250}


def test_max_cost_usd_stops_the_run():
    script = searching_forever(input_tokens=1, output_tokens=1, cost_usd=0.1)
    agent = Agent(script, standard_tools(Outbox()), budget=Budget(max_steps=50, max_cost_usd=0.25))
    assert agent.start("go") == "budget_exhausted"
    assert agent.state["stop"]["budget"] == "max_cost_usd"
    assert agent.state["usage"]["cost_usd"] == pytest.approx(0.3)
    assert script.calls == 3


def test_usage_is_not_part_of_the_decision_but_is_recorded_with_its_turn():
    script = Script({**final("ok"), "usage": {"input_tokens": 5, "output_tokens": 2, "cost_usd": 0.01}})
    agent = Agent(script, [])
    assert agent.start("go") == "done"
    entry = agent.state["history"][-1]
    assert {k: entry[k] for k in ("role", "step", "final")} == {"role": "assistant", "step": 1, "final": "ok"}
    assert entry["usage"] == {"input_tokens": 5, "output_tokens": 2, "cost_usd": 0.01}
    assert set(entry) == {"role", "step", "final", "usage", "versions"}


@pytest.mark.parametrize("usage", [
    {"input_tokens": "lots", "output_tokens": -5, "cost_usd": None},
    {"input_tokens": float("inf"), "output_tokens": float("nan"), "cost_usd": float("inf")},
    "ten tokens",
], ids=["junk", "non-finite", "not-a-dict"])
def test_unusable_usage_figures_count_as_zero(usage):
    agent = Agent(Script({**final("ok"), "usage": usage}), [], budget=Budget(max_cost_usd=1.0))
    assert agent.start("go") == "done"
    u = agent.state["usage"]
    assert (u["input_tokens"], u["output_tokens"], u["cost_usd"]) == (0, 0, 0.0)


def slow_search(clock: ManualClock, seconds: float) -> Tool:
    def search(args: dict[str, Any], key: str) -> str:
        clock.advance(seconds)
        return "slow result"

    return Tool("search", search)


def test_max_seconds_stops_a_run_within_a_single_call_to_run():
    clock = ManualClock()
    script = searching_forever()
    agent = Agent(script, [slow_search(clock, 10)], budget=Budget(max_steps=50, max_seconds=25), clock=clock)
    assert agent.start("go") == "budget_exhausted"
    assert agent.state["stop"]["budget"] == "max_seconds"
    assert script.calls == 3
    assert agent.state["usage"]["seconds"] == 30


def test_time_waiting_for_a_human_is_not_charged():
    clock = ManualClock()
    outbox = Outbox()
    script = Script(call("search", query="a"), call("send_email", to="a@x", subject="hi"), final("sent"))
    tools = [slow_search(clock, 4), standard_tools(outbox)[1]]
    agent = Agent(script, tools, budget=Budget(max_seconds=10), clock=clock)
    assert agent.start("go") == "awaiting_approval"
    clock.advance(3600)
    assert agent.decide(True) == "done"
    assert agent.state["usage"]["seconds"] == 4


@pytest.mark.parametrize("settle", ["cancel", "expire"])
def test_ending_a_paused_run_does_not_charge_the_wait(settle):
    clock = ManualClock()
    agent = Agent(Script(call("send_email", to="a@x", subject="hi")), standard_tools(Outbox()), clock=clock)
    agent.start("go")
    clock.advance(86400)
    getattr(agent, settle)()
    assert agent.state["usage"]["seconds"] == 0


def test_running_the_approved_call_is_charged():
    clock = ManualClock()

    def slow_send(args: dict[str, Any], key: str) -> str:
        clock.advance(7)
        return "sent"

    script = Script(call("send", to="a"), final("sent"))
    agent = Agent(script, [Tool("send", slow_send, side_effect=True)], clock=clock)
    agent.start("go")
    clock.advance(600)
    assert agent.decide(True) == "done"
    assert agent.state["usage"]["seconds"] == 7


def test_budgets_count_across_resumes():
    clock = ManualClock()
    script = Script(call("search", query="a"), call("send_email", to="a@x", subject="hi"),
                    then=call("search", query="again"))
    tools = [slow_search(clock, 5), standard_tools(Outbox())[1]]
    agent = Agent(script, tools, budget=Budget(max_steps=4, max_seconds=100), clock=clock)
    agent.start("go")
    blob = agent.checkpoint()

    resumed = Agent.resume(blob, Script(*script.decisions, then=script.then), tools, clock=clock)
    assert resumed.state["usage"] == agent.state["usage"]
    assert resumed.decide(True) == "budget_exhausted"
    assert resumed.state["steps"] == 4 and resumed.state["stop"]["budget"] == "max_steps"
    assert resumed.state["usage"]["seconds"] == 5 + 5 + 5
    assert resumed.state["usage"]["model_calls"] == 4


def test_budget_exhausted_event_carries_the_limit_and_usage():
    recorder = Recorder()
    agent = Agent(searching_forever(), standard_tools(Outbox()), max_steps=2, **recorder.hooks())
    agent.start("go")
    (event,) = recorder.of("budget_exhausted")
    assert event["budget"] == "max_steps"
    assert event["usage"]["model_calls"] == 2


def test_extend_raises_the_limit_and_continues():
    script = Script(call("search", query="a"), call("search", query="b"), final("ok"))
    agent = Agent(script, [search_tool(Outbox())], max_steps=2)
    assert agent.start("go") == "budget_exhausted"
    assert agent.extend(max_steps=5) == "done"
    assert agent.state["stop"] is None
    assert agent.state["budget"]["max_steps"] == 5
    assert agent.state["steps"] == 3


def test_extend_that_does_not_lift_the_exhausted_limit_stops_again():
    agent = Agent(searching_forever(), standard_tools(Outbox()), budget=Budget(max_steps=2, max_tool_calls=9))
    agent.start("go")
    assert agent.extend(max_tool_calls=20) == "budget_exhausted"
    assert agent.state["stop"]["budget"] == "max_steps"


def test_extend_rejects_unknown_or_invalid_limits():
    agent = Agent(searching_forever(), standard_tools(Outbox()), max_steps=1)
    agent.start("go")
    with pytest.raises(ValueError, match="max_parrots"):
        agent.extend(max_parrots=3)
    with pytest.raises(ValueError):
        agent.extend(max_steps=-1)
    assert agent.status == "budget_exhausted"


def test_extend_a_finished_run_raises():
    agent = Agent(Script(final("ok")), [])
    agent.start("go")
    with pytest.raises(InvalidTransition):
        agent.extend(max_steps=10)


@pytest.mark.parametrize("limits", [
    {"max_steps": 0}, {"max_steps": None}, {"max_tool_calls": -1}, {"max_cost_usd": 0}, {"max_seconds": "10"},
])
def test_budget_rejects_limits_that_are_not_positive(limits):
    with pytest.raises(ValueError):
        Budget(**limits)
