"""Checkpoints: canonical JSON that a fresh agent resumes exactly, and state we refuse to guess at."""

from __future__ import annotations

import json
from typing import Any

import pytest
from agent_fakes import ManualClock, Outbox, Script, call, final, standard_tools

from signoff.runtime import SCHEMA_VERSION, Agent, IncompatibleState, ModelUnavailable, SignoffError, Tool

DECISIONS = (call("search", query="refunds"), {"junk": 1}, call("send_email", to="a@x", subject="s"),
             {**call("search", query="more"), "usage": {"input_tokens": 10, "output_tokens": 5, "cost_usd": 0.002}},
             final("all done"))


def fresh(decisions: tuple[Any, ...] = DECISIONS, outbox: Outbox | None = None) -> tuple[Script, list[Tool]]:
    """A policy and tools as a new process would build them."""
    return Script(*decisions), standard_tools(outbox or Outbox())


def paused(**options: Any) -> Agent:
    agent = Agent(*fresh(), clock=ManualClock(), **options)
    assert agent.start("go") == "awaiting_approval"
    return agent


def test_checkpoint_is_canonical_json_of_the_state():
    agent = paused()
    blob = agent.checkpoint()
    assert json.loads(blob) == agent.state
    assert blob == json.dumps(json.loads(blob), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert json.loads(blob)["schema_version"] == SCHEMA_VERSION


def failed_agent() -> Agent:
    def down(history: list[dict[str, Any]]) -> Any:
        raise ModelUnavailable("503")

    agent = Agent(down, [], clock=ManualClock())
    agent.start("go")
    return agent


def finished_agent() -> Agent:
    agent = paused()
    agent.decide(True)
    return agent


def exhausted_agent() -> Agent:
    agent = Agent(Script(then=call("search", query="a")), standard_tools(Outbox()), max_steps=2, clock=ManualClock())
    agent.start("go")
    return agent


@pytest.mark.parametrize("make", [paused, failed_agent, finished_agent, exhausted_agent],
                         ids=["awaiting_approval", "failed", "done", "budget_exhausted"])
def test_resumed_agent_checkpoints_to_the_same_blob(make):
    blob = make().checkpoint()
    assert Agent.resume(blob, *fresh()).checkpoint() == blob


def test_resume_accepts_the_state_as_a_dict_and_leaves_it_alone():
    agent = paused()
    state = json.loads(agent.checkpoint())
    resumed = Agent.resume(state, *fresh(), clock=ManualClock())
    resumed.decide(True)
    assert state == json.loads(agent.checkpoint())


def test_resumed_agent_continues_exactly_as_the_original_would():
    original_outbox, resumed_outbox = Outbox(), Outbox()
    original = Agent(*fresh(outbox=original_outbox), clock=ManualClock())
    original.start("go")
    blob = original.checkpoint()
    original.decide(True)

    resumed = Agent.resume(blob, *fresh(outbox=resumed_outbox), clock=ManualClock())
    assert resumed.state["usage"] == json.loads(blob)["usage"]
    resumed.decide(True)
    assert resumed.checkpoint() == original.checkpoint()
    assert resumed_outbox.runs == original_outbox.runs[1:]  # the search before the pause is not re-run
    assert resumed.state["usage"]["input_tokens"] == 10


def test_resume_with_max_steps_replaces_the_stored_limit():
    blob = paused().checkpoint()
    resumed = Agent.resume(blob, *fresh(), max_steps=20)
    assert resumed.state["budget"]["max_steps"] == 20
    assert resumed.state["steps"] == 3


def test_unknown_schema_version_is_refused_with_a_clear_message():
    state = json.loads(paused().checkpoint())
    state["schema_version"] = 99
    with pytest.raises(IncompatibleState, match="schema version 99.*reads version 2"):
        Agent.resume(json.dumps(state), *fresh())


@pytest.mark.parametrize(("mangle", "message"), [
    (lambda blob: blob[: len(blob) // 2], "not valid JSON"),
    (lambda blob: "", "not valid JSON"),
    (lambda blob: "[1, 2]", "not a JSON object"),
    (lambda blob: json.dumps({k: v for k, v in json.loads(blob).items() if k != "history"}), "missing history"),
    (lambda blob: blob.replace('"status":"awaiting_approval"', '"status":"napping"'), "unknown status 'napping'"),
    (lambda blob: blob.replace('"steps":3', '"steps":"3"'), "malformed: steps: Input should be a valid integer"),
], ids=["truncated", "empty", "array", "missing-key", "unknown-status", "steps-not-int"])
def test_corrupted_state_is_refused(mangle, message):
    with pytest.raises(IncompatibleState, match=message):
        Agent.resume(mangle(paused().checkpoint()), *fresh())


def test_incompatible_state_is_a_signoff_error():
    assert issubclass(IncompatibleState, SignoffError)
