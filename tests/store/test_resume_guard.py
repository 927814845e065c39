"""A paused call whose tool changed before it was used (a deploy in between) is asked about again,
or goes back to the model, never run on an approval given for something else."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from pydantic import BaseModel
from store_harness import APPROVER, REQUESTER, SEND, build_runner, make_tools, scripted_policies, side_effects

from signoff.runtime.ports import Store
from signoff.runtime.records import Decided
from signoff.runtime.runner import Runner
from signoff.runtime.runner_config import RunnerConfig


def approved_then_deployed(store: Store, effects: Path, **change: object) -> tuple[Runner, str, str]:
    """A run whose email was approved, and a runner of the next deploy, where the tool is changed."""
    before = build_runner(store, effects, lease=30.0)
    run = before.start_run("tell Ana her refund is approved", REQUESTER, model="scripted:send")
    assert before.execute(run.run_id) == "awaiting_approval"
    approval = before.pending_approval(run.run_id)
    assert isinstance(before.decide(approval.approval_id, approval.digest, APPROVER, True), Decided)
    tools = make_tools(effects)
    tools[SEND] = dataclasses.replace(tools[SEND], **change)  # type: ignore[arg-type]
    after = Runner(store, tools, scripted_policies, dataclasses.replace(before.config))
    return after, run.run_id, approval.approval_id


def test_an_approved_call_whose_tool_changed_is_asked_about_again_under_the_same_key(
        store: Store, effects: Path) -> None:
    runner, run_id, first = approved_then_deployed(store, effects, description="Send an email to anyone at all.")
    assert runner.execute(run_id) == "awaiting_approval"
    assert side_effects(effects) == [], "nothing runs on an approval given for the old tool"
    old, fresh = store.get_approval(first), runner.pending_approval(run_id)
    assert old.status == "superseded"
    assert (fresh.key, fresh.status, fresh.contract) == (old.key, "pending", runner.tools[SEND].contract)
    assert fresh.approval_id != first and fresh.contract != old.contract
    [reconsidered] = [e for e in runner.timeline(run_id) if e["type"] == "call_reconsidered"]
    assert "changed since this call was proposed" in reconsidered["reason"]
    assert (reconsidered["was"], reconsidered["now"]) == (old.contract, fresh.contract)
    # The new request is decided like any other, and the call runs once.
    assert isinstance(runner.decide(fresh.approval_id, fresh.digest, APPROVER, True), Decided)
    assert runner.execute(run_id) == "done"
    assert [k for _, k in side_effects(effects)] == [fresh.key]


def test_a_click_on_the_replaced_request_does_nothing(store: Store, effects: Path) -> None:
    runner, run_id, first = approved_then_deployed(store, effects, timeout_s=5.0)
    runner.execute(run_id)
    old = store.get_approval(first)
    outcome = runner.decide(old.approval_id, old.digest, APPROVER, True)
    assert not isinstance(outcome, Decided)
    assert runner.execute(run_id) == "awaiting_approval" and side_effects(effects) == []


def test_a_call_that_no_longer_fits_its_tool_goes_back_to_the_model(store: Store, effects: Path) -> None:
    class StricterSend(BaseModel):
        to: str
        body: str = ""
        ticket: str  # the new deploy requires a ticket the proposed call never had

    runner, run_id, first = approved_then_deployed(store, effects, args_model=StricterSend)
    assert runner.execute(run_id) == "done"  # the scripted model answers after the observation
    assert side_effects(effects) == []
    [observation] = [e for e in runner.get_run(run_id).state["history"] if e["role"] == "tool"]
    assert observation["error_kind"] == "invalid_args" and "ticket" in observation["error"]
    assert "no longer fits" in observation["error"]


def test_a_changed_model_or_prompt_is_recorded_and_the_run_goes_on(store: Store, effects: Path) -> None:
    """The deploy changed the system prompt between the proposal and the answer."""
    runner = build_runner(store, effects, lease=30.0)
    run = runner.start_run("tell Ana", REQUESTER, model="scripted:send")
    runner.execute(run.run_id)
    approval = runner.pending_approval(run.run_id)
    runner.decide(approval.approval_id, approval.digest, APPROVER, True)

    def with_new_prompt(model: str):  # the same script, as a model built with other instructions
        scripted = scripted_policies(model)

        def policy(history):
            return {**scripted(history), "model": {"name": model, "system_prompt_sha256": "f" * 64}}
        return policy

    later = Runner(store, make_tools(effects), with_new_prompt, RunnerConfig(**{
        f.name: getattr(runner.config, f.name) for f in dataclasses.fields(runner.config)}))
    assert later.execute(run.run_id) == "done"
    [changed] = [e for e in later.timeline(run.run_id) if e["type"] == "versions_changed"]
    assert changed["now"]["prompt"] == "f" * 16 and changed["was"]["prompt"] != changed["now"]["prompt"]


def test_a_call_whose_tool_became_read_only_runs_and_its_approval_is_closed(store: Store, effects: Path) -> None:
    runner, run_id, first = approved_then_deployed(store, effects, side_effect=False)
    assert runner.execute(run_id) == "done"
    assert len(side_effects(effects)) == 1
    assert store.get_approval(first).status == "superseded"
    assert runner.pending_approval(run_id) is None
