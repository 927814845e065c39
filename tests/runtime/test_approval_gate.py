"""The approval gate: a side effect runs only on a human's approval, exactly once, with its key."""

from __future__ import annotations

from typing import Any

import pytest
from agent_fakes import Outbox, Script, call, final, last_observation, standard_tools

from signoff.runtime import Agent, InvalidTransition, Tool

EMAIL = {"to": "ops@example.com", "subject": "Refund policy"}


def paused_agent(*after: Any, outbox: Outbox, run_id: str = "run-1") -> tuple[Agent, Script]:
    script = Script(call("search", query="refund policy"), call("send_email", **EMAIL), *after)
    agent = Agent(script, standard_tools(outbox), run_id=run_id)
    assert agent.start("email ops the refund policy") == "awaiting_approval"
    return agent, script


def test_side_effect_call_pauses_with_the_exact_call_and_its_key():
    outbox = Outbox()
    agent, _ = paused_agent(outbox=outbox)
    pending = agent.state["pending"]
    assert pending["tool"] == "send_email"
    assert pending["args"] == {**EMAIL, "body": ""}
    assert pending["key"] == "run-1:2"
    assert outbox.of("send_email") == []


def test_key_is_run_id_and_step_of_the_proposing_policy_call():
    agent = Agent(Script({"junk": True}, call("send_email", **EMAIL)), standard_tools(Outbox()), run_id="ops-7")
    agent.start("go")
    assert agent.state["pending"]["key"] == "ops-7:2"


def test_read_only_tools_run_without_approval():
    outbox = Outbox()
    agent = Agent(Script(call("search", query="a"), final("ok")), standard_tools(outbox))
    assert agent.start("go") == "done"
    assert len(outbox.runs) == 1


def test_approval_runs_exactly_the_pending_call_once_with_its_key_then_continues():
    outbox = Outbox()
    agent, script = paused_agent(final("sent"), outbox=outbox)
    assert agent.decide(True) == "done"
    assert outbox.of("send_email") == [("send_email", {**EMAIL, "body": ""}, "run-1:2")]
    assert last_observation(agent.state)["result"] == {"message_id": "msg-run-1:2"}
    assert script.seen[-1][-1]["result"] == {"message_id": "msg-run-1:2"}
    assert agent.state["pending"] is None


def test_denial_tells_the_model_and_runs_nothing():
    outbox = Outbox()
    agent, script = paused_agent(final("ok, not sending"), outbox=outbox)
    assert agent.decide(False, note="wrong recipient") == "done"
    assert outbox.of("send_email") == []
    told = script.seen[-1][-1]
    assert told["error"] == "denied by human: wrong recipient"
    assert told["error_kind"] == "denied"
    assert told["call_id"] == "call-2"


def test_denial_without_a_note_still_says_why():
    agent, _ = paused_agent(outbox=Outbox())
    agent.decide(False)
    assert last_observation(agent.state)["error"] == "denied by human: no reason given"


def test_double_approval_raises_and_the_call_runs_once():
    outbox = Outbox()
    agent, _ = paused_agent(final("sent"), outbox=outbox)
    agent.decide(True)
    with pytest.raises(InvalidTransition):
        agent.decide(True)
    assert len(outbox.of("send_email")) == 1


@pytest.mark.parametrize("prepare", ["idle", "done", "budget_exhausted"])
def test_decide_with_nothing_pending_raises(prepare):
    agent = Agent(Script(final("ok")) if prepare == "done" else Script(then=call("search", query="a")),
                  standard_tools(Outbox()), max_steps=1)
    if prepare != "idle":
        agent.start("go")
    assert agent.status == prepare
    with pytest.raises(InvalidTransition):
        agent.decide(True)


def test_identical_call_after_execution_is_refused_not_reproposed():
    outbox = Outbox()
    # The same call again, with keys reordered and the default spelled out: canonically identical.
    again = call("send_email", subject=EMAIL["subject"], body="", to=EMAIL["to"])
    agent, script = paused_agent(again, final("done"), outbox=outbox)
    assert agent.decide(True) == "done"
    assert len(outbox.of("send_email")) == 1
    refusal = script.seen[-1][-1]
    assert refusal["error_kind"] == "duplicate"
    assert "already executed" in refusal["error"] and "run-1:2" in refusal["error"]


def test_identical_call_after_denial_is_refused_not_reproposed():
    outbox = Outbox()
    agent, script = paused_agent(call("send_email", **EMAIL), final("gave up"), outbox=outbox)
    assert agent.decide(False, note="no") == "done"
    assert outbox.of("send_email") == []
    assert "already denied" in script.seen[-1][-1]["error"]


def test_a_different_call_to_the_same_tool_asks_again():
    outbox = Outbox()
    agent, _ = paused_agent(call("send_email", **{**EMAIL, "to": "cfo@example.com"}), outbox=outbox)
    assert agent.decide(False, note="not ops") == "awaiting_approval"
    assert agent.state["pending"]["args"]["to"] == "cfo@example.com"
    assert agent.state["pending"]["key"] == "run-1:3"


def test_a_tool_that_mutates_its_arguments_cannot_change_the_recorded_call():
    sent: list[str] = []

    def consume(args: dict[str, Any], key: str) -> str:
        sent.append(args.pop("to"))
        return "sent"

    tools = [Tool("notify", consume, side_effect=True)]
    agent = Agent(Script(call("notify", to="a"), call("notify", to="a"), final("ok")), tools)
    agent.start("go")
    assert agent.decide(True) == "done"
    assert sent == ["a"]
    assert agent.state["history"][1]["args"] == {"to": "a"}
    assert agent.state["history"][-2]["error_kind"] == "duplicate"


def test_cancel_while_awaiting_approval_runs_nothing():
    outbox = Outbox()
    agent, _ = paused_agent(outbox=outbox)
    assert agent.cancel("not today") == "cancelled"
    assert outbox.of("send_email") == []
    with pytest.raises(InvalidTransition):
        agent.decide(True)


def test_expired_approval_ends_the_run_without_running_anything():
    outbox = Outbox()
    agent, _ = paused_agent(outbox=outbox)
    assert agent.expire() == "expired"
    kept = agent.state["pending"]  # kept, unexecuted, for its requester to request again
    assert kept is not None and kept["tool"] == "send_email"
    assert outbox.of("send_email") == []
    with pytest.raises(InvalidTransition):
        agent.decide(True)


def test_an_expired_call_requested_again_waits_for_a_fresh_decision_then_runs_once():
    outbox = Outbox()
    agent, _ = paused_agent(outbox=outbox)
    agent.expire()
    kept = agent.state["pending"]
    assert agent.request_again(by="U0ASKER") == "awaiting_approval"
    assert agent.state["pending"]["key"] == kept["key"] and agent.state["pending"]["args"] == kept["args"]
    assert agent.state["stop"] is None
    assert outbox.of("send_email") == []
    with pytest.raises(InvalidTransition):
        agent.request_again()  # it is waiting again, not expired
    agent.decide(True)
    assert len(outbox.of("send_email")) == 1


def test_only_an_expired_run_that_kept_its_call_can_be_requested_again():
    agent, _ = paused_agent(outbox=Outbox())
    with pytest.raises(InvalidTransition, match="did not expire"):
        agent.request_again()
    agent.cancel("no")
    with pytest.raises(InvalidTransition, match="did not expire"):
        agent.request_again()


def test_expire_when_not_awaiting_approval_raises():
    agent = Agent(Script(final("ok")), [])
    agent.start("go")
    with pytest.raises(InvalidTransition):
        agent.expire()
