"""Previews bound into the approval, on every store: what a call would do is taken when it is asked
about, shown to the approvers and part of the approval's digest; with `preview_must_match` it is
taken again just before the call starts, and a world that changed since voids the approval, runs
nothing and asks afresh, showing what changed. A preview that fails is said, and the call can still
be approved."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict
from store_harness import APPROVER, REQUESTER

from signoff.runtime.agent import Agent
from signoff.runtime.digests import call_digest, preview_digest
from signoff.runtime.models.scripted import ScriptedPolicy
from signoff.runtime.ports import Store
from signoff.runtime.records import Decided, Done
from signoff.runtime.runner import Runner
from signoff.runtime.runner_config import RunnerConfig
from signoff.tools.base import Tool


class RefundArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    order: str
    amount: float


class Shop:
    """Orders with a refundable balance, and refunds that count their keys."""

    def __init__(self) -> None:
        self.refundable = {"A-1": 42.0}
        self.refunds: list[str] = []
        self.preview_fails = False
        self.preview_sleeps = 0.0

    def refund(self, args: dict[str, Any], key: str) -> dict[str, Any]:
        self.refunds.append(key)
        self.refundable[args["order"]] -= args["amount"]
        return {"refunded": args["amount"]}

    def preview(self, args: dict[str, Any], key: str) -> dict[str, Any]:
        time.sleep(self.preview_sleeps)
        if self.preview_fails:
            raise RuntimeError("the orders service is down")
        return {"order": args["order"], "refundable_now": self.refundable[args["order"]], "refund": args["amount"]}

    def tools(self, *, must_match: bool = True) -> dict[str, Tool]:
        return {"issue_refund": Tool("issue_refund", self.refund, side_effect=True, args_model=RefundArgs,
                                     preview=self.preview, preview_must_match=must_match, preview_timeout_s=0.5)}


def runner_for(store: Store, shop: Shop, **tools: Any) -> Runner:
    script = [{"tool": "issue_refund", "args": {"order": "A-1", "amount": 42.0}}, {"final": "refunded"}]
    return Runner(store, shop.tools(**tools), lambda model: ScriptedPolicy(script, name=model),
                  RunnerConfig(model="scripted:refund"))


def paused(runner: Runner) -> tuple[str, Any]:
    run = runner.start_run("refund A-1", REQUESTER)
    assert runner.execute(run.run_id) == "awaiting_approval"
    approval = runner.pending_approval(run.run_id)
    assert approval is not None
    return run.run_id, approval


def test_the_preview_is_shown_with_the_call_and_bound_into_its_approval(store: Store, tmp_path: Path) -> None:
    shop = Shop()
    runner = runner_for(store, shop)
    run_id, approval = paused(runner)
    preview = runner.get_run(run_id).state["pending"]["preview"]
    assert preview["shown"] == {"order": "A-1", "refundable_now": 42.0, "refund": 42.0}
    assert approval.digest == call_digest("issue_refund", approval.args, approval.key,
                                          preview_digest(preview["shown"]))
    assert approval.digest != call_digest("issue_refund", approval.args, approval.key)  # not the bare call's
    assert isinstance(runner.decide(approval.approval_id, approval.digest, APPROVER, True), Decided)
    assert runner.execute(run_id) == "done"
    assert shop.refunds == [approval.key]


def test_a_world_changed_since_the_approval_voids_it_runs_nothing_and_asks_afresh(store: Store) -> None:
    shop = Shop()
    runner = runner_for(store, shop)
    run_id, approval = paused(runner)
    assert isinstance(runner.decide(approval.approval_id, approval.digest, APPROVER, True), Decided)
    shop.refundable["A-1"] = 12.0  # a partial refund elsewhere, between the approval and the dispatch
    assert runner.execute(run_id) == "awaiting_approval"
    assert shop.refunds == []  # nothing ran on the stale approval
    assert runner.get_approval(approval.approval_id).status == "superseded"
    fresh = runner.pending_approval(run_id)
    assert fresh is not None and fresh.key == approval.key and fresh.digest != approval.digest
    preview = runner.get_run(run_id).state["pending"]["preview"]
    assert preview["shown"]["refundable_now"] == 12.0 and preview["was"]["refundable_now"] == 42.0
    [changed] = [e for e in runner.timeline(run_id) if e["type"] == "preview_changed"]
    assert changed["key"] == approval.key
    late = runner.decide(approval.approval_id, approval.digest, APPROVER, True)  # the stale card's button
    assert not isinstance(late, Decided)
    assert isinstance(runner.decide(fresh.approval_id, fresh.digest, APPROVER, True), Decided)
    assert runner.execute(run_id) == "done"
    assert shop.refunds == [approval.key]  # once, with the call's one key


def test_without_must_match_an_approved_call_runs_however_the_world_moved(store: Store) -> None:
    shop = Shop()
    runner = runner_for(store, shop, must_match=False)
    run_id, approval = paused(runner)
    runner.decide(approval.approval_id, approval.digest, APPROVER, True)
    shop.refundable["A-1"] = 12.0
    assert runner.execute(run_id) == "done" and shop.refunds == [approval.key]


def test_a_preview_that_fails_or_runs_late_is_said_and_the_call_can_still_be_approved(store: Store) -> None:
    shop = Shop()
    shop.preview_fails = True
    runner = runner_for(store, shop)
    run_id, approval = paused(runner)
    preview = runner.get_run(run_id).state["pending"]["preview"]
    assert preview == {"error": "RuntimeError: the orders service is down"}
    assert approval.digest == call_digest("issue_refund", approval.args, approval.key)
    assert isinstance(runner.decide(approval.approval_id, approval.digest, APPROVER, True), Decided)
    assert runner.execute(run_id) == "done"  # it still fails at dispatch: nothing was shown, nothing changed
    assert shop.refunds == [approval.key]

    shop.preview_fails, shop.preview_sleeps = False, 1.0
    slow = runner_for(store, shop)
    run_id, _ = paused(slow)
    assert slow.get_run(run_id).state["pending"]["preview"] == {"error": "the preview did not finish within 0.5s"}


def test_an_edited_call_is_previewed_afresh_and_its_approval_bound_to_the_new_preview(store: Store) -> None:
    shop = Shop()
    runner = runner_for(store, shop)
    run_id, approval = paused(runner)
    assert isinstance(runner.edit(approval.approval_id, approval.digest, APPROVER,
                                  {"order": "A-1", "amount": 10.0}), Done)
    assert runner.execute(run_id) == "awaiting_approval"
    fresh = runner.pending_approval(run_id)
    preview = runner.get_run(run_id).state["pending"]["preview"]
    assert preview["shown"] == {"order": "A-1", "refundable_now": 42.0, "refund": 10.0}  # not the 42.0 refund's
    assert fresh.digest == call_digest("issue_refund", fresh.args, fresh.key, preview_digest(preview["shown"]))
    assert isinstance(runner.decide(fresh.approval_id, fresh.digest, APPROVER, True), Decided)
    assert runner.execute(run_id) == "done" and shop.refunds == [fresh.key]


def test_the_in_process_agent_holds_an_approved_call_to_its_preview_as_a_stored_run_does():
    shop = Shop()
    script = [{"tool": "issue_refund", "args": {"order": "A-1", "amount": 42.0}}, {"final": "refunded"}]
    agent = Agent(ScriptedPolicy(script, name="scripted:refund"), shop.tools(), run_id="run-inproc")
    assert agent.start("Refund A-1") == "awaiting_approval"
    seen = agent.run_state.pending
    assert seen is not None and seen.preview is not None and seen.preview.shown["refundable_now"] == 42.0

    shop.refundable["A-1"] = 10.0  # someone refunded part of it meanwhile
    assert agent.decide(True, by=APPROVER) == "awaiting_approval"  # void: asked afresh, nothing ran
    assert shop.refunds == []
    fresh = agent.run_state.pending
    assert fresh is not None and fresh.preview is not None and fresh.preview.shown["refundable_now"] == 10.0
    assert fresh.preview.was == seen.preview.shown  # the new request shows what changed
