"""What produced each turn is recorded (model, prompt, tool contracts), and a run that loops stops."""

from __future__ import annotations

import dataclasses
import json

from agent_fakes import Outbox, Script, call, final, search_tool, send_email_tool, standard_tools

from signoff.runtime.agent import Agent


def model(name: str, prompt: str) -> dict[str, str]:
    return {"name": name, "system_prompt_sha256": prompt}


def test_each_turn_records_the_model_prompt_and_tool_contracts_behind_it() -> None:
    outbox = Outbox()
    tools = standard_tools(outbox)
    agent = Agent(Script({**call("search", query="refunds"), "model": model("openai:gpt-x", "ab" * 32)},
                         {**final("done"), "model": model("openai:gpt-y", "cd" * 32)}), tools)
    assert agent.start("find") == "done"
    turns = [e for e in agent.state["history"] if e["role"] == "assistant"]
    assert [t["versions"]["model"] for t in turns] == ["openai:gpt-x", "openai:gpt-y"]
    assert [t["versions"]["prompt"] for t in turns] == ["ab" * 8, "cd" * 8]
    catalogue = turns[0]["versions"]["tools"]
    assert agent.state["contracts"][catalogue] == {t.name: t.contract for t in tools}


def test_a_pending_call_carries_its_tools_contract() -> None:
    outbox = Outbox()
    agent = Agent(Script(call("send_email", to="a@x", subject="hi")), standard_tools(outbox))
    assert agent.start("mail") == "awaiting_approval"
    assert agent.state["pending"]["contract"] == send_email_tool(outbox).contract


def test_a_contract_changes_with_what_the_model_and_approver_are_told_not_with_the_code() -> None:
    outbox = Outbox()
    tool = send_email_tool(outbox)
    same_code_changed = [dataclasses.replace(tool, description="Send an email to a customer."),
                         dataclasses.replace(tool, idempotent=False), dataclasses.replace(tool, timeout_s=5),
                         dataclasses.replace(tool, side_effect=False),
                         dataclasses.replace(tool, args_model=search_tool(outbox).args_model)]
    assert len({tool.contract, *(t.contract for t in same_code_changed)}) == 6
    assert dataclasses.replace(tool, fn=lambda args, key: None).contract == tool.contract


def test_a_model_that_repeats_a_call_and_gets_the_same_result_is_stopped_as_stalled() -> None:
    outbox = Outbox()
    script = Script(call("search", query="refunds"), then=call("search", query="refunds"))
    agent = Agent(script, standard_tools(outbox), max_steps=50)
    assert agent.start("find") == "stalled"
    assert agent.state["steps"] == 4, "one call, then three repeats of it"
    assert agent.state["stop"]["repeats"] == 3 and "repeated earlier calls" in agent.state["stop"]["reason"]
    assert [e for e in agent.state["history"] if e["role"] == "tool"][-1]["result"]  # the last result is kept


def test_repeats_with_new_results_are_progress() -> None:
    results = iter(range(100))
    outbox = Outbox()
    tool = dataclasses.replace(search_tool(outbox), fn=lambda args, key: {"page": next(results)})
    agent = Agent(Script(then=call("search", query="next page")), [tool], max_steps=6)
    assert agent.start("read everything") == "budget_exhausted"


def test_a_stall_is_counted_across_a_resume() -> None:
    """A worker resumes from the checkpoint after two repeats: the third stops the run there."""
    outbox = Outbox()
    checkpoints: list[str] = []
    looping = Script(then=call("search", query="refunds"))
    agent = Agent(looping, standard_tools(outbox), max_steps=3,
                  on_checkpoint=lambda c: checkpoints.append(json.dumps(c.state)))
    assert agent.start("find") == "budget_exhausted"
    after_two_repeats = next(c for c in checkpoints if json.loads(c).get("repeats") == 2)
    resumed = Agent.resume(after_two_repeats, looping, standard_tools(outbox), max_steps=50)
    assert resumed.run() == "stalled"
    assert resumed.state["steps"] == 4


def test_extend_lets_a_stalled_run_go_on_and_forgives_only_the_repeats_so_far() -> None:
    outbox = Outbox()
    agent = Agent(Script(then=call("search", query="refunds")), standard_tools(outbox), max_steps=50)
    assert agent.start("find") == "stalled"
    assert agent.extend() == "stalled"
    assert agent.state["steps"] == 7, "three more repeats after the extension"


def test_stall_detection_can_be_turned_off() -> None:
    outbox = Outbox()
    agent = Agent(Script(then=call("search", query="refunds")), standard_tools(outbox), max_steps=6,
                  stall_after=None)
    assert agent.start("find") == "budget_exhausted"
