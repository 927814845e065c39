"""Timeouts, unknown outcomes, reconciliation, and the executor hook."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from agent_fakes import Outbox, Recorder, Script, call, final, last_observation, standard_tools

from signoff.runtime import (
    Agent,
    Budget,
    DispatchRefused,
    InvalidTransition,
    OutcomeUnknown,
    Tool,
    ToolTimeout,
    run_tool,
)


class Hang:
    """A tool body that blocks until released, counting its calls."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls: list[str] = []

    def __call__(self, args: dict[str, Any], key: str) -> str:
        self.calls.append(key)
        self.release.wait(5)
        return "finished late"


@pytest.fixture
def hang() -> Iterator[Hang]:
    body = Hang()
    yield body
    body.release.set()  # let the abandoned worker thread end


def test_run_tool_returns_the_result_or_raises_the_tools_error():
    def double(args: dict[str, Any], key: str) -> int:
        if args["n"] < 0:
            raise ValueError("negative")
        return args["n"] * 2

    tool = Tool("double", double, timeout_s=1)
    assert run_tool(tool, {"n": 2}, "k") == 4
    with pytest.raises(ValueError, match="negative"):
        run_tool(tool, {"n": -1}, "k")


def test_run_tool_raises_tool_timeout_after_timeout_s(hang):
    with pytest.raises(ToolTimeout, match="slow did not finish within 0.05s"):
        run_tool(Tool("slow", hang, timeout_s=0.05), {}, "k")


def test_a_hung_call_never_delays_the_next_one(hang):
    """Tool threads are reused, but a busy one is never shared: the next call starts at once."""
    with pytest.raises(ToolTimeout):
        run_tool(Tool("slow", hang, timeout_s=0.05), {}, "k1")
    threads = set()

    def where(args: dict[str, Any], key: str) -> str:
        threads.add(threading.current_thread())  # held, so no two threads can look alike
        return key

    quick = Tool("quick", where, timeout_s=0.5)
    assert [run_tool(quick, {}, f"q{i}") for i in range(20)] == [f"q{i}" for i in range(20)]
    assert hang.calls == ["k1"]  # still hanging, and never handed a second call
    assert threading.main_thread() not in threads
    assert len(threads) <= 2  # idle threads are kept for the next call rather than started anew


def test_read_only_timeout_becomes_an_observation_and_the_run_goes_on(hang):
    agent = Agent(Script(call("slow"), final("gave up")), [Tool("slow", hang, timeout_s=0.05)])
    assert agent.start("go") == "done"
    observation = last_observation(agent.state)
    assert observation["error_kind"] == "timeout"
    assert observation["error"] == "timeout: slow did not finish within 0.05s"


def test_timed_out_calls_count_towards_max_tool_calls(hang):
    script = Script(then=call("slow"))
    agent = Agent(script, [Tool("slow", hang, timeout_s=0.02)], budget=Budget(max_steps=10, max_tool_calls=2))
    assert agent.start("go") == "budget_exhausted"
    assert agent.state["stop"]["budget"] == "max_tool_calls"
    assert len(hang.calls) == 2


def side_effect_timeout(hang: Hang, *after: Any) -> Agent:
    tools = [Tool("deploy", hang, side_effect=True, timeout_s=0.05), *standard_tools(Outbox())]
    agent = Agent(Script(call("deploy", service="api"), *after), tools)
    assert agent.start("deploy api") == "awaiting_approval"
    return agent


def test_side_effect_that_timed_out_needs_reconciliation_and_is_not_retried(hang):
    agent = side_effect_timeout(hang, final("deployed"))
    assert agent.decide(True) == "needs_reconciliation"
    assert hang.calls == ["run-1:1"]
    assert agent.state["pending"]["key"] == "run-1:1"
    assert "timed out" in agent.state["stop"]["reason"]
    assert agent.run() == "needs_reconciliation"
    with pytest.raises(InvalidTransition):
        agent.decide(True)
    assert hang.calls == ["run-1:1"]


def test_reconcile_done_records_the_real_result_and_continues(hang):
    agent = side_effect_timeout(hang, call("deploy", service="api"), final("deployed"))
    agent.decide(True)
    assert agent.reconcile("done", {"version": "v42"}) == "done"
    assert agent.state["history"][2]["result"] == {"version": "v42"}
    assert agent.state["history"][-2]["error_kind"] == "duplicate"
    assert hang.calls == ["run-1:1"]
    assert agent.state["pending"] is None


def test_reconcile_retry_runs_the_call_again_with_the_same_key(hang):
    agent = side_effect_timeout(hang, final("deployed"))
    agent.decide(True)
    hang.release.set()
    assert agent.reconcile("retry") == "done"
    assert hang.calls == ["run-1:1", "run-1:1"]
    assert last_observation(agent.state)["result"] == "finished late"


def test_reconcile_abort_cancels_the_run(hang):
    agent = side_effect_timeout(hang)
    agent.decide(True)
    assert agent.reconcile("abort", note="rolled back by hand") == "cancelled"
    assert "rolled back by hand" in agent.state["stop"]["reason"]
    assert agent.state["pending"] is None


def test_reconcile_rejects_unknown_actions_and_runs_not_waiting_for_it(hang):
    agent = side_effect_timeout(hang)
    with pytest.raises(InvalidTransition):
        agent.reconcile("done", "ok")
    agent.decide(True)
    with pytest.raises(ValueError):
        agent.reconcile("shrug")
    assert agent.status == "needs_reconciliation"


class Gatekeeper:
    """An executor that records every dispatch and answers with a scripted outcome."""

    def __init__(self, refuse: Exception | None = None) -> None:
        self.refuse = refuse
        self.dispatched: list[tuple[str, dict[str, Any], str]] = []

    def __call__(self, tool: Tool, args: dict[str, Any], key: str) -> Any:
        self.dispatched.append((tool.name, args, key))
        if self.refuse is not None and tool.side_effect:
            raise self.refuse
        return run_tool(tool, args, key)


def gated_agent(executor: Gatekeeper, outbox: Outbox) -> Agent:
    script = Script(call("search", query="a"), call("send_email", to="a@x", subject="s"), final("ok"))
    agent = Agent(script, standard_tools(outbox), executor=executor)
    assert agent.start("go") == "awaiting_approval"
    return agent


def test_executor_dispatches_every_call_with_validated_args_and_key():
    outbox, gate = Outbox(), Gatekeeper()
    agent = gated_agent(gate, outbox)
    assert agent.decide(True) == "done"
    assert gate.dispatched == [
        ("search", {"query": "a", "limit": 3}, "run-1:1"),
        ("send_email", {"to": "a@x", "subject": "s", "body": ""}, "run-1:2"),
    ]
    assert len(outbox.runs) == 2


def test_dispatch_refused_stops_the_run_with_its_status_and_runs_nothing():
    outbox = Outbox()
    agent = gated_agent(Gatekeeper(DispatchRefused("approval already consumed", status="expired")), outbox)
    assert agent.decide(True) == "expired"
    assert agent.state["stop"]["reason"] == "not executed: approval already consumed"
    assert outbox.of("send_email") == []


def test_dispatch_refused_defaults_to_failed():
    outbox = Outbox()
    agent = gated_agent(Gatekeeper(DispatchRefused("digest changed")), outbox)
    assert agent.decide(True) == "failed"
    assert outbox.of("send_email") == []


def test_outcome_unknown_needs_reconciliation():
    outbox = Outbox()
    recorder = Recorder()
    agent = gated_agent(Gatekeeper(OutcomeUnknown("an attempt started at 10:02 left no outcome")), outbox)
    agent.on_event = recorder.on_event
    assert agent.decide(True) == "needs_reconciliation"
    assert agent.state["pending"]["key"] == "run-1:2"
    assert "left no outcome" in agent.state["stop"]["reason"]
    assert recorder.types()[-1] == "needs_reconciliation"
    assert outbox.of("send_email") == []


def test_refused_call_leaves_nothing_pending_and_the_model_learns_why_on_retry():
    outbox = Outbox()
    gate = Gatekeeper(DispatchRefused("the approval for run-1:2 is denied"))
    script = Script(call("search", query="a"), call("send_email", to="a@x", subject="s"), final("ok"))
    agent = Agent(script, standard_tools(outbox), executor=gate)
    agent.start("go")
    assert agent.decide(True) == "failed"
    assert agent.state["pending"] is None
    gate.refuse = None
    assert agent.retry() == "done"
    told = script.seen[-1][-1]
    assert (told["call_id"], told["error_kind"]) == ("call-2", "refused")
    assert told["error"] == "not executed: the approval for run-1:2 is denied"
    assert outbox.of("send_email") == [] and agent.state["pending"] is None


def test_approved_tool_missing_after_a_resume_fails_the_run_without_running_it():
    script = Script(call("send_email", to="a@x", subject="s"), final("ok"))
    agent = Agent(script, standard_tools(Outbox()))
    agent.start("go")
    resumed = Agent.resume(agent.checkpoint(), script, [])
    assert resumed.decide(True) == "failed"
    assert "no longer registered" in resumed.state["stop"]["reason"]
    assert resumed.retry() == "done"
    assert "no longer registered" in script.seen[-1][-1]["error"]
    assert resumed.state["pending"] is None


def test_reconciled_result_that_is_not_json_still_checkpoints(hang):
    agent = side_effect_timeout(hang, final("deployed"))
    agent.decide(True)
    assert agent.reconcile("done", {"hosts": {"web-1"}}) == "done"
    assert Agent.resume(agent.checkpoint(), Script(), []).checkpoint() == agent.checkpoint()
