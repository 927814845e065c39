"""The agent loop: steps, history, final answers, and every way a decision or tool can go wrong."""

from __future__ import annotations

from typing import Any

import pytest
from agent_fakes import Outbox, Script, call, final, last_observation, observations, standard_tools

from signoff.runtime import Agent, ModelUnavailable, Tool, ToolFailed
from signoff.runtime.agent import NoReply


def make_agent(*decisions: Any, outbox: Outbox | None = None, **options: Any) -> Agent:
    return Agent(Script(*decisions), standard_tools(outbox or Outbox()), **options)


def test_agent_and_tool_are_public_names_of_runtime():
    from signoff import runtime
    from signoff.tools import base

    assert {"Agent", "Tool"} <= set(runtime.__all__)
    assert runtime.Tool is base.Tool


def test_new_agent_state_has_the_documented_shape():
    agent = Agent(Script(), [], max_steps=5, run_id="run-9")
    state = agent.state
    assert state["run_id"] == "run-9"
    assert state["history"] == [] and state["steps"] == 0
    assert state["status"] == "idle" and agent.status == "idle"
    assert state["pending"] is None and state["answer"] is None
    assert state["schema_version"] == 2
    assert state["budget"]["max_steps"] == 5
    assert state["usage"] == {"model_calls": 0, "tool_calls": 0, "input_tokens": 0,
                              "output_tokens": 0, "cost_usd": 0.0, "seconds": 0.0}


def test_goal_is_the_first_history_entry():
    agent = make_agent(final("hi"))
    agent.start("say hi")
    assert agent.state["history"][0] == {"role": "user", "content": "say hi"}
    assert agent.state["goal"] == "say hi"


def test_a_policy_with_no_turn_to_give_yet_stops_the_driver_with_the_run_still_running():
    replies: list[Any] = [NoReply(), final("42")]
    events: list[dict] = []
    agent = Agent(lambda history: replies.pop(0), [], on_event=events.append)
    assert agent.start("answer") == "running"
    assert agent.state["steps"] == 0 and agent.state["usage"]["model_calls"] == 0
    assert [e["type"] for e in events] == ["run_started"]
    assert agent.run() == "done" and agent.state["answer"] == "42"


def without_provenance(entry: dict) -> dict:
    """A model turn's entry without what it records about where it came from (`usage`, `versions`)."""
    return {k: v for k, v in entry.items() if k not in ("usage", "versions")}


def test_final_decision_ends_the_run_with_its_answer():
    agent = make_agent(final("42"))
    assert agent.start("answer") == "done"
    assert agent.state["answer"] == "42"
    assert agent.state["steps"] == 1
    assert without_provenance(agent.state["history"][-1]) == {"role": "assistant", "step": 1, "final": "42"}


def test_tool_decision_appends_call_then_result_and_continues():
    outbox = Outbox()
    agent = make_agent(call("search", query="refunds"), final("found it"), outbox=outbox)
    assert agent.start("find refunds") == "done"
    _, call_entry, result_entry, _ = agent.state["history"]
    assert without_provenance(call_entry) == {"role": "assistant", "step": 1, "tool": "search",
                                              "args": {"query": "refunds"}, "call_id": "call-1"}
    assert result_entry == {"role": "tool", "step": 1, "tool": "search", "call_id": "call-1",
                            "result": {"hits": ["refunds #1", "refunds #2", "refunds #3"]}}
    assert outbox.runs == [("search", {"query": "refunds", "limit": 3}, "run-1:1")]
    assert agent.state["usage"]["tool_calls"] == 1
    assert agent.state["usage"]["model_calls"] == 2


def test_each_policy_call_is_one_step():
    agent = make_agent(call("search", query="a"), call("search", query="b"), {"nonsense": 1}, final("ok"))
    agent.start("go")
    assert agent.state["steps"] == 4
    assert [e["step"] for e in agent.state["history"] if e["role"] == "assistant"] == [1, 2, 3, 4]


def test_policy_sees_the_history_so_far():
    script = Script(call("search", query="a"), final("ok"))
    Agent(script, standard_tools(Outbox())).start("go")
    first, second = script.seen
    assert first == [{"role": "user", "content": "go"}]
    assert [e["role"] for e in second] == ["user", "assistant", "tool"]


def test_policy_mutating_its_history_does_not_change_the_run():
    def vandal(history: list[dict[str, Any]]) -> dict[str, Any]:
        n = len(history)
        history.clear()
        history.append({"role": "user", "content": "hijacked"})
        return final("ok") if n > 1 else call("search", query="a")

    agent = Agent(vandal, standard_tools(Outbox()))
    agent.start("go")
    assert agent.state["history"][0] == {"role": "user", "content": "go"}
    assert [e["role"] for e in agent.state["history"]] == ["user", "assistant", "tool", "assistant"]


def test_tool_exception_becomes_an_observation():
    agent = make_agent(call("search", query="  "), final("gave up"))
    assert agent.start("go") == "done"
    assert last_observation(agent.state)["error"] == "ValueError: empty query"
    assert last_observation(agent.state)["error_kind"] == "exception"


def test_tool_failed_message_reaches_the_model():
    def deploy(args: dict[str, Any], key: str) -> None:
        raise ToolFailed("deploy refused: main is red")

    script = Script(call("deploy"), final("could not deploy"))
    Agent(script, [Tool("deploy", deploy)]).start("deploy")
    assert script.seen[-1][-1]["error"] == "ToolFailed: deploy refused: main is red"


def test_unknown_tool_becomes_an_observation():
    outbox = Outbox()
    agent = make_agent(call("launch_rockets", count=3), final("no rockets"), outbox=outbox)
    assert agent.start("go") == "done"
    assert last_observation(agent.state)["error"] == "unknown tool launch_rockets"
    assert outbox.runs == []


def test_invalid_arguments_list_every_field_error_and_run_nothing():
    outbox = Outbox()
    agent = make_agent(call("send_email", subject=7, cc="x"), final("ok"), outbox=outbox)
    assert agent.start("go") == "done"
    error = last_observation(agent.state)["error"]
    assert error.startswith("invalid arguments: ")
    for field in ("to", "subject", "cc"):
        assert f"{field}: " in error
    assert last_observation(agent.state)["error_kind"] == "invalid_args"
    assert agent.state["pending"] is None and outbox.runs == []


@pytest.mark.parametrize("decision", [
    "just text",
    None,
    ["tool", "search"],
    {},
    {"tool": "search", "args": {"query": "a"}, "final": "both"},
    {"tool": 7, "args": {}},
    {"tool": "", "args": {}},
    {"error": "model returned unparseable JSON"},
], ids=["string", "none", "list", "neither", "both", "tool-not-a-string", "tool-empty", "adapter-error"])
def test_malformed_decision_becomes_an_observation_and_the_run_goes_on(decision):
    outbox = Outbox()
    agent = make_agent(decision, final("recovered"), outbox=outbox)
    assert agent.start("go") == "done"
    malformed, feedback = agent.state["history"][1:3]
    assert malformed["role"] == "assistant" and "malformed" in malformed
    assert feedback["role"] == "runtime" and feedback["error"].startswith("malformed decision")
    assert agent.state["answer"] == "recovered"
    assert outbox.runs == []


@pytest.mark.parametrize("args", [["a"], "query=a", 3, None])
def test_arguments_that_are_not_an_object_become_an_observation(args):
    outbox = Outbox()
    agent = make_agent({"tool": "search", "args": args}, final("ok"), outbox=outbox)
    assert agent.start("go") == "done"
    assert "object" in observations(agent.state)[0]["error"]
    assert outbox.runs == []
    assert Agent.resume(agent.checkpoint(), Script(), []).checkpoint() == agent.checkpoint()


def test_arguments_that_are_not_json_do_not_break_the_checkpoint():
    outbox = Outbox()
    agent = make_agent({"tool": "search", "args": {"query": {1, 2}}}, final("ok"), outbox=outbox)
    assert agent.start("go") == "done"
    assert "error" in observations(agent.state)[0]
    assert Agent.resume(agent.checkpoint(), Script(), []).checkpoint() == agent.checkpoint()


@pytest.mark.parametrize(("answer", "text"), [({"total": 3}, '{"total": 3}'), (7, "7"), ({1, 2}, "{1, 2}")])
def test_non_string_final_answer_is_kept_as_text(answer, text):
    agent = make_agent({"final": answer})
    assert agent.start("go") == "done"
    assert agent.state["answer"] == text
    assert Agent.resume(agent.checkpoint(), Script(), []).checkpoint() == agent.checkpoint()


def test_policy_bug_fails_the_run_instead_of_raising():
    def broken(history: list[dict[str, Any]]) -> dict[str, Any]:
        raise KeyError("choices")

    agent = Agent(broken, [])
    assert agent.start("go") == "failed"
    assert agent.state["stop"]["reason"] == "policy error"
    assert "KeyError" in agent.state["stop"]["detail"]


def test_model_unavailable_fails_the_run_and_retry_continues_it():
    outages = [ModelUnavailable("HTTP 503 after 3 attempts")]

    def flaky(history: list[dict[str, Any]]) -> dict[str, Any]:
        if outages:
            raise outages.pop()
        return final("back")

    agent = Agent(flaky, [])
    assert agent.start("go") == "failed"
    assert agent.state["stop"]["reason"] == "model unavailable"
    assert agent.state["steps"] == 0
    assert agent.retry() == "done"
    assert agent.state["answer"] == "back" and agent.state["steps"] == 1


def test_retry_when_not_failed_raises():
    from signoff.runtime import InvalidTransition

    agent = make_agent(final("ok"))
    agent.start("go")
    with pytest.raises(InvalidTransition):
        agent.retry()


def test_starting_twice_raises():
    from signoff.runtime import InvalidTransition

    agent = make_agent(final("ok"))
    agent.start("go")
    with pytest.raises(InvalidTransition):
        agent.start("again")


def test_cancel_ends_the_run():
    from signoff.runtime import InvalidTransition

    agent = make_agent(call("send_email", to="a@x", subject="s"))
    agent.start("go")
    assert agent.cancel("changed my mind") == "cancelled"
    assert agent.state["stop"]["reason"] == "changed my mind"
    assert agent.state["pending"] is None
    with pytest.raises(InvalidTransition):
        agent.cancel()
