"""A call starts the one way whoever drives its run: an agent held in this process and the runner
over each store take the preview again before an approved call's first start, and answer a call
that started and left no outcome with the same words, running nothing twice."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest
from store_harness import APPROVER, REQUESTER, ManualClock
from test_previews import Shop

from signoff.runtime.adapters.db import make_engine
from signoff.runtime.adapters.memory import MemoryStore
from signoff.runtime.adapters.sql import SqlStore
from signoff.runtime.agent import Agent, Checkpoint, InProcess
from signoff.runtime.models.scripted import ScriptedPolicy
from signoff.runtime.ports import Store
from signoff.runtime.runner import Runner
from signoff.runtime.runner_config import RunnerConfig
from signoff.runtime.state import dump_state
from signoff.runtime.tool_calls import run_tool
from tests.conftest import fresh_database_url

SCRIPT = [{"tool": "issue_refund", "args": {"order": "A-1", "amount": 42.0}}, {"final": "refunded"}]
MODEL = "scripted:refund"


class Crash(BaseException):
    """The process dies mid-call: nothing after the tool's start is recorded."""


class CrashingShop(Shop):
    """The shop, whose next refund can be made to take the process down as it runs."""

    def __init__(self) -> None:
        super().__init__()
        self.crash_next = False

    def refund(self, args: dict[str, Any], key: str) -> dict[str, Any]:
        refunded = super().refund(args, key)
        if self.crash_next:
            self.crash_next = False
            raise Crash
        return refunded


class RefundRun(Protocol):
    """The refund run, driven one way or the other, as a person and the tool see it."""

    def pause(self) -> str: ...
    def approve(self) -> str: ...
    def after_crash(self) -> str: ...
    def state(self) -> dict[str, Any]: ...
    def events(self, kind: str) -> list[dict[str, Any]]: ...


class InProcessRun:
    """Held by an agent in this process, on ports that outlive it: a crashed agent's successor is
    resumed from the last step saved, on the same ports."""

    def __init__(self, shop: Shop) -> None:
        self.shop, self.saved, self.seen = shop, [], []
        self.ports = InProcess(run_tool, self._save, time.monotonic)
        self.agent = self._agent()

    def _save(self, checkpoint: Checkpoint) -> None:
        self.saved.append(dump_state(checkpoint.state))

    def _agent(self, blob: str | None = None) -> Agent:
        policy, tools = ScriptedPolicy(SCRIPT, name=MODEL), self.shop.tools()
        if blob is None:
            return Agent(policy, tools, ports=self.ports, on_event=self.seen.append)
        return Agent.resume(blob, policy, tools, ports=self.ports, on_event=self.seen.append)

    def pause(self) -> str:
        return self.agent.start("refund A-1")

    def approve(self) -> str:
        return self.agent.decide(True, by=APPROVER)

    def after_crash(self) -> str:
        self.agent = self._agent(self.saved[-1])
        return self.approve()  # the approval the crashed agent acted on still stands

    def state(self) -> dict[str, Any]:
        return dict(self.agent.state)

    def events(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.seen if e["type"] == kind]


class StoredRun:
    """Kept in a store and driven by the runner; a crashed runner's successor is a new one."""

    def __init__(self, store: Store, shop: Shop) -> None:
        self.store, self.shop = store, shop
        self.runner = self._runner()
        self.run_id = ""

    def _runner(self) -> Runner:
        return Runner(self.store, self.shop.tools(), lambda model: ScriptedPolicy(SCRIPT, name=model),
                      RunnerConfig(model=MODEL))

    def pause(self) -> str:
        self.run_id = self.runner.start_run("refund A-1", REQUESTER).run_id
        return self.runner.execute(self.run_id)

    def approve(self) -> str:
        approval = self.runner.pending_approval(self.run_id)
        assert approval is not None
        self.runner.decide(approval.approval_id, approval.digest, APPROVER, True)
        return self.runner.execute(self.run_id)

    def after_crash(self) -> str:
        self.runner = self._runner()
        return self.runner.execute(self.run_id)

    def state(self) -> dict[str, Any]:
        return self.runner.get_run(self.run_id).state

    def events(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.runner.timeline(self.run_id) if e["type"] == kind]


@pytest.fixture(params=["in_process", "memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def shop_and_run(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[CrashingShop, RefundRun]]:
    """The refund run held in this process, or kept in each store in turn."""
    shop = CrashingShop()
    if request.param == "in_process":
        yield shop, InProcessRun(shop)
    elif request.param == "memory":
        yield shop, StoredRun(MemoryStore(clock=ManualClock()), shop)
    else:
        databases = fresh_database_url(request.param, tmp_path)
        engine = make_engine(next(databases))
        try:
            yield shop, StoredRun(SqlStore(engine, clock=ManualClock()), shop)
        finally:
            engine.dispose()
            next(databases, None)


def test_a_world_changed_since_the_approval_voids_it_either_way(shop_and_run: tuple[CrashingShop, RefundRun]) -> None:
    shop, run = shop_and_run
    assert run.pause() == "awaiting_approval"
    key = run.state()["pending"]["key"]
    shop.refundable["A-1"] = 12.0  # a partial refund elsewhere, between the approval and the start
    assert run.approve() == "awaiting_approval"
    assert shop.refunds == []
    preview = run.state()["pending"]["preview"]
    assert preview["shown"]["refundable_now"] == 12.0 and preview["was"]["refundable_now"] == 42.0
    [changed] = run.events("preview_changed")
    assert (changed["key"], changed["tool"]) == (key, "issue_refund") and changed["was"] != changed["now"]
    assert run.approve() == "done"  # the fresh approval, of the world as it is now
    assert shop.refunds == [key]


def test_a_call_that_died_mid_call_stops_for_a_person_in_the_same_words_either_way(
        shop_and_run: tuple[CrashingShop, RefundRun]) -> None:
    shop, run = shop_and_run
    assert run.pause() == "awaiting_approval"
    key = run.state()["pending"]["key"]
    shop.crash_next = True
    with pytest.raises(Crash):
        run.approve()
    assert run.after_crash() == "needs_reconciliation"
    assert shop.refunds == [key]  # it started once, and never again
    assert run.state()["stop"]["reason"] == (f"issue_refund ({key}) started earlier and recorded no outcome; "
                                             "it may or may not have taken effect")
    assert run.events("preview_changed") == []  # a call that started is the ledger's, not the preview's
