"""A step's checkpoint costs the same at step 1000 as at step 10: history is appended, never rewritten.

Measured on the real engine with a `before_cursor_execute` listener (it observes, it changes
nothing): the bytes bound into each step's transaction and its statement count.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, event
from store_harness import LOOKUP, REQUESTER, build_runner

from signoff.runtime.adapters.sql import SqlStore
from signoff.runtime.budget import Budget
from signoff.runtime.runner import Runner
from signoff.runtime.state import new_state


@dataclass
class StepCost:
    step: int
    state_bytes: int
    """Size of the `state` value in the run's UPDATE."""
    bytes: int = 0
    """Size of every value bound in the step's transaction."""
    statements: int = 0


@dataclass
class Meter:
    """Groups the statements of each save_step transaction (from its `UPDATE runs ... state` to commit)."""

    steps: list[StepCost] = field(default_factory=list)
    _open: StepCost | None = None

    def on_execute(self, conn: Any, cursor: Any, statement: str, parameters: Any, context: Any,
                   executemany: bool) -> None:
        rows = getattr(context, "compiled_parameters", None) or [{}]  # driver SQL such as BEGIN has none
        state = rows[0].get("b_state", rows[0].get("state"))  # the step's prebuilt UPDATE names it b_state
        if statement.startswith("UPDATE runs SET") and state is not None:
            self._open = StepCost(_step_of(state), len(state.encode()))
        if self._open is not None:
            self._open.statements += 1
            self._open.bytes += sum(len(str(v).encode()) for row in rows for v in row.values() if v is not None)

    def on_commit(self, conn: Any) -> None:
        if self._open is not None:
            self.steps.append(self._open)
            self._open = None

    def at(self, step: int) -> StepCost:
        [cost] = [c for c in self.steps if c.step == step]
        return cost


def _step_of(state_json: str) -> int:
    marker = '"steps":'
    start = state_json.index(marker) + len(marker)
    return int(state_json[start:state_json.index(",", start)])


@pytest.fixture
def meter(engine: Engine) -> Iterator[Meter]:
    meter = Meter()
    event.listen(engine, "before_cursor_execute", meter.on_execute)
    event.listen(engine, "commit", meter.on_commit)
    yield meter
    event.remove(engine, "before_cursor_execute", meter.on_execute)
    event.remove(engine, "commit", meter.on_commit)


def lookups_until(last: int) -> Any:
    """Policies that look something up at every step and answer after step `last`."""
    def policies(model: str) -> Any:
        def policy(history: list[dict[str, Any]]) -> dict[str, Any]:
            n = sum(1 for e in history if e["role"] == "assistant")
            return {"final": "found it"} if n >= last else {"tool": LOOKUP, "args": {"q": f"page {n}"}}
        return policy
    return policies


def long_running_state(run_id: str, steps: int) -> dict[str, Any]:
    """A run `steps` lookups in, as the agent would have left it."""
    state = new_state(run_id, Budget(max_steps=steps + 20).to_json())
    state.update(goal="read every page", status="running", steps=steps)
    state["usage"].update(model_calls=steps, tool_calls=steps)
    history = [{"role": "user", "content": "read every page"}]
    for n in range(1, steps + 1):
        history += [{"role": "assistant", "step": n, "tool": LOOKUP, "args": {"q": f"page {n - 1}"},
                     "call_id": f"call-{n}"},
                    {"role": "tool", "step": n, "tool": LOOKUP, "call_id": f"call-{n}",
                     "result": {"q": f"page {n - 1}", "orders": ["A-1", "A-2"]}}]
    state["history"] = history
    return state


def test_checkpoint_cost_does_not_grow_with_history(sql_store: SqlStore, effects: Path, meter: Meter) -> None:
    store = sql_store
    short = build_runner(store, effects, lease=60.0, policies=lookups_until(12), model="lookups")
    run = short.start_run("read every page", REQUESTER, budget=Budget(max_steps=20))
    assert short.execute(run.run_id) == "done"

    state = long_running_state("run-long", 995)
    store.create_run(copy.deepcopy(state), goal="read every page", requester=REQUESTER, origin={}, model="lookups")
    long: Runner = build_runner(store, effects, lease=60.0, policies=lookups_until(1003))
    assert long.execute("run-long") == "done"
    assert len(long.get_run("run-long").state["history"]) == 1 + 2 * 1003 + 1

    early, late = meter.at(10), meter.at(1000)
    assert late.statements == early.statements
    # Only the counters' digits may grow ("steps":10 -> "steps":1000 and the like).
    assert late.state_bytes <= early.state_bytes + 64, (early, late)
    assert late.bytes <= early.bytes + 128, (early, late)
    assert late.bytes < 2_000, "a step writes what it added, not the run's history"
