"""The loop as values: each transition is a pure function of the state and what just happened,
returning the next state, its events and what to do next; only the driver does I/O.

Before, the loop called into its caller (an executor lambda, `on_checkpoint`) from inside its
transitions, so a database failure while starting a call had to be a `BaseException` to get past
the loop's handler for tool errors.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from agent_fakes import Outbox, Script, call, final, search_tool, send_email_tool

from signoff.runtime import Agent, Budget, requests
from signoff.runtime.agent import Checkpoint
from signoff.runtime.call_outcomes import after_call
from signoff.runtime.judging import Context
from signoff.runtime.loop import AskApproval, CallModel, Finish, Reply, RunTool, Stop
from signoff.runtime.replies import after_reply, budget_stop
from signoff.runtime.schema import RunState
from signoff.runtime.state import DEFAULT_REDACT_KEYS
from signoff.runtime.tool_calls import Outcome, Ran, Unknown

RUNTIME = Path(__file__).resolve().parents[2] / "runtime"


def context(outbox: Outbox) -> Context:
    tools = {tool.name: tool for tool in (search_tool(outbox), send_email_tool(outbox))}
    return Context(tools, DEFAULT_REDACT_KEYS)


def started(goal: str = "email Ana") -> RunState:
    return requests.start(RunState.fresh("run-1", Budget(max_steps=8).to_json()), goal).state


def test_a_turn_is_computed_without_running_anything():
    outbox = Outbox()
    ctx = context(outbox)
    first = requests.start(RunState.fresh("run-1", Budget(max_steps=8).to_json()), "find the refund policy")
    assert first.then == CallModel() and first.state.status == "running"
    assert [e.type for e in first.events] == ["run_started"]

    looked = after_reply(first.state, ctx, Reply(call("search", query="refunds")))
    assert isinstance(looked.then, RunTool) and looked.then.in_turn
    assert looked.then.call.key == "run-1:1" and looked.then.call.args == {"query": "refunds", "limit": 3}
    assert outbox.runs == []  # the step says what to run; it ran nothing

    seen = after_call(looked.state, ctx, looked.then, Ran({"hits": 2}, 0.01))
    assert seen.then == CallModel()
    assert seen.state.history[-1].result == {"hits": 2}
    assert [e.type for e in seen.events] == ["tool_executed"]


def test_a_side_effect_is_asked_about_and_only_the_asked_call_can_run():
    ctx = context(Outbox())
    asked = after_reply(started(), ctx, Reply(call("send_email", to="ana@example.com", subject="Refund", body="hi")))
    assert isinstance(asked.then, AskApproval)
    assert asked.state.status == "awaiting_approval" and asked.state.pending is not None
    assert asked.state.pending.key == "run-1:1"

    approved = requests.decide(asked.state, ctx, True, by="U0LEAD")
    assert isinstance(approved.then, RunTool) and approved.then.call == asked.state.pending
    denied = requests.decide(asked.state, ctx, False, "not today", by="U0LEAD")
    assert denied.then == CallModel() and denied.state.pending is None
    assert denied.state.history[-1].error == "denied by human: not today"

    unknown = after_call(approved.state, ctx, approved.then, Unknown("started before, no outcome"))
    assert unknown.then == Stop("needs_reconciliation") and unknown.state.pending == asked.state.pending


def test_transitions_are_deterministic_and_leave_their_input_alone():
    ctx = context(Outbox())
    state = started()
    before = state.model_dump()
    one = after_reply(state, ctx, Reply(final("done")))
    two = after_reply(state, ctx, Reply(final("done")))
    assert one == two and one.then == Finish("done")
    assert state.model_dump() == before and state.status == "running"


def test_the_budget_is_a_step_too():
    state = started()
    assert budget_stop(state) is None
    spent = state.model_copy(update={"steps": 8})
    stop = budget_stop(spent)
    assert stop is not None and stop.then == Stop("budget_exhausted")
    assert stop.as_events()[0]["budget"] == "max_steps"


class BrokenStore:
    """Ports whose database fails while a side effect is being started."""

    def __init__(self) -> None:
        self.saved: list[Checkpoint] = []

    def run(self, action: RunTool) -> Outcome:
        if action.tool.side_effect:
            raise ConnectionError("the database went away")
        return Ran({"hits": 0}, 0.0)

    def save(self, checkpoint: Checkpoint) -> bool:
        self.saved.append(checkpoint)
        return True


def test_a_port_failure_is_an_ordinary_exception_and_no_tool_is_blamed():
    ports = BrokenStore()
    agent = Agent(Script(call("send_email", to="ana@example.com", subject="Refund", body="hi")), [send_email_tool(Outbox())],
                  ports=ports)
    assert agent.start("email Ana") == "awaiting_approval"
    with pytest.raises(ConnectionError):
        agent.decide(True)
    types = [e["type"] for checkpoint in ports.saved for e in checkpoint.events]
    assert "tool_failed" not in types and "tool_executed" not in types


class StopAfter:
    """Ports that take `n` steps and then say stop (a request arrived for the run)."""

    def __init__(self, n: int) -> None:
        self.n, self.saved = n, 0

    def run(self, action: RunTool) -> Outcome:
        return Ran({"hits": 1}, 0.0)

    def save(self, checkpoint: Checkpoint) -> bool:
        self.saved += 1
        return self.saved < self.n


def test_a_port_that_says_stop_stops_the_driver_after_that_commit():
    policy = Script(*[call("search", query=f"q{i}") for i in range(6)])
    agent = Agent(policy, [search_tool(Outbox())], ports=StopAfter(3), stall_after=None)
    assert agent.start("look around") == "running"
    assert agent.run_state.steps == 2 and policy.calls == 2  # the goal, then two turns; no third ask


def _imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("module", ["loop.py", "judging.py", "call_outcomes.py", "batches.py", "replies.py",
                                    "requests.py", "edits.py", "commands.py", "schema.py", "values.py", "history.py",
                                    "pending_calls.py", "budget.py", "rules.py", "loop_events.py", "call_events.py"])
def test_the_step_functions_read_no_clock_and_touch_no_thread_file_or_socket(module: str):
    forbidden = {"time", "datetime", "threading", "os", "io", "socket", "subprocess", "random", "secrets", "queue"}
    assert _imported(RUNTIME / module) & forbidden <= ({"datetime"} if module == "rules.py" else set())


def _no_base_exception_subclass(path: Path) -> list[str]:
    return [node.name for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.ClassDef)
            and any(isinstance(base, ast.Name) and base.id == "BaseException" for base in node.bases)]


def test_nothing_in_the_runner_or_the_loop_needs_a_base_exception_to_get_past_the_loop():
    found: dict[str, Any] = {name: _no_base_exception_subclass(RUNTIME / name)
                             for name in ("agent.py", "loop.py", "judging.py", "call_outcomes.py", "batches.py",
                                          "replies.py", "requests.py", "runner.py", "worker.py")}
    assert found == {name: [] for name in found}


def test_a_policy_that_writes_into_a_history_entry_fails_visibly_and_changes_nothing():
    def vandal(history: list[dict[str, Any]]) -> dict[str, Any]:
        history[0]["content"] = "hijacked"  # the entries are the run's own, shown read-only
        return final("ok")

    agent = Agent(vandal, [search_tool(Outbox())])
    assert agent.start("go") == "failed"
    assert agent.state["history"][0] == {"role": "user", "content": "go"}
    assert agent.state["stop"]["reason"] == "policy error"
    assert "read-only" in agent.state["stop"]["detail"]


def test_ports_and_an_executor_together_are_refused_rather_than_one_silently_ignored():
    with pytest.raises(ValueError, match="not both"):
        Agent(Script(), [search_tool(Outbox())], ports=StopAfter(1), on_checkpoint=lambda checkpoint: None)
