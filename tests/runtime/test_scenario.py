"""The issue's scenario end to end: search, propose an email, pause, and settle it from a JSON checkpoint.

Every resume builds new tool and policy objects from nothing but the blob, as a new process would.
"""

from __future__ import annotations

from typing import Any

import pytest
from agent_fakes import Outbox, call, final, standard_tools

from signoff.runtime import Agent, InvalidTransition

GOAL = "Find our refund policy and email it to ops@example.com"
EMAIL = {"to": "ops@example.com", "subject": "Refund policy", "body": "Refunds within 30 days."}


class ScenarioModel:
    """Searches, proposes the email, then reports what became of it; a pure function of the history."""

    def __init__(self) -> None:
        self.seen: list[list[dict[str, Any]]] = []

    def __call__(self, history: list[dict[str, Any]]) -> dict[str, Any]:
        self.seen.append(history)
        last = history[-1]
        if last["role"] == "user":
            return call("search", query="refund policy")
        if last["tool"] == "search":
            return call("send_email", **EMAIL)
        if "error" in last:
            return final(f"Not sent ({last['error']}).")
        return final("Sent the refund policy to ops.")


def scenario_policy() -> ScenarioModel:
    return ScenarioModel()


@pytest.fixture
def blob() -> str:
    outbox = Outbox()
    agent = Agent(scenario_policy(), standard_tools(outbox), max_steps=8, run_id="run-1")
    assert agent.start(GOAL) == "awaiting_approval"
    assert agent.state["pending"]["key"] == "run-1:2"
    assert outbox.of("send_email") == []
    assert [r[0] for r in outbox.runs] == ["search"]
    return agent.checkpoint()


def test_approving_sends_exactly_once_with_its_key_and_finishes(blob):
    outbox = Outbox()
    agent = Agent.resume(blob, scenario_policy(), standard_tools(outbox))
    assert agent.decide(True) == "done"
    assert outbox.runs == [("send_email", EMAIL, "run-1:2")]
    assert agent.state["answer"] == "Sent the refund policy to ops."
    with pytest.raises(InvalidTransition):
        agent.decide(True)
    assert len(outbox.runs) == 1


def test_denying_the_same_blob_sends_nothing_and_the_model_sees_the_denial(blob):
    outbox = Outbox()
    policy = scenario_policy()
    agent = Agent.resume(blob, policy, standard_tools(outbox))
    assert agent.decide(False, note="ops already has it") == "done"
    assert outbox.runs == []
    assert policy.seen[-1][-1]["error"] == "denied by human: ops already has it"
    assert agent.state["answer"] == "Not sent (denied by human: ops already has it)."


def test_resuming_with_max_steps_2_stops_right_after_the_approved_send(blob):
    outbox = Outbox()
    policy = scenario_policy()
    agent = Agent.resume(blob, policy, standard_tools(outbox), max_steps=2)
    assert agent.decide(True) == "budget_exhausted"
    assert outbox.runs == [("send_email", EMAIL, "run-1:2")]
    assert policy.seen == []
    assert agent.state["history"][-1]["result"] == {"message_id": "msg-run-1:2"}
    assert agent.state["stop"]["budget"] == "max_steps"


def test_both_branches_start_from_one_untouched_blob(blob):
    approved = Agent.resume(blob, scenario_policy(), standard_tools(Outbox()))
    denied = Agent.resume(blob, scenario_policy(), standard_tools(Outbox()))
    approved.decide(True)
    assert denied.checkpoint() == blob
    denied.decide(False)
    assert approved.state["answer"] != denied.state["answer"]
