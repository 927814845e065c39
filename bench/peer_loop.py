"""Benchmark 2's worker: Signoff, agent-runloop and LangGraph run the same loop in one process.

Runs inside the benchmark's own virtualenv (see `bench.peers`), which has the peers installed, and
prints one JSON document. Every system checkpoints each step durably to a SQLite file in WAL mode
with synchronous=FULL, pauses before the side-effecting `notify`, and finishes after approval.

    python -m bench.peer_loop --sizes 10,100,1000 --repeats 5,3,2
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import operator
import sqlite3
import statistics
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import Annotated, Any, TypedDict

from bench.steps import pooled_sqlite_engine
from bench.workload import (
    GOAL,
    LookupArgs,
    NotifyArgs,
    SignoffPolicy,
    decision,
    lookup_result,
    notify_result,
    signoff_tools,
)
from signoff.runtime.adapters.db import make_engine, upgrade
from signoff.runtime.adapters.sql import SqlStore
from signoff.runtime.budget import Budget
from signoff.runtime.records import Decided
from signoff.runtime.runner import Runner, RunnerConfig

APPROVER, REQUESTER = "U_APPROVER", "U_REQUESTER"


class SignoffLoop:
    """The real Runner on `make_engine`'s SQLite file (WAL, synchronous=FULL, pooled connections)."""

    name = "signoff"
    durability = "WAL, synchronous=FULL; one transaction per step (state row, history rows, events)"

    def __init__(self, tmp: Path) -> None:
        engine = self.engine(f"sqlite:///{tmp / (self.name + '.db')}")
        upgrade(engine)
        self.store = SqlStore(engine)
        self.sent: list[dict[str, Any]] = []

    def engine(self, url: str) -> Any:
        return make_engine(url)

    def segment(self, steps: int) -> tuple[Any, float]:
        policy = SignoffPolicy(steps, pause=True)
        runner = Runner(self.store, signoff_tools(self.sent), lambda spec: policy,
                        RunnerConfig(budget=Budget(max_steps=steps + 2)))
        start = time.perf_counter()
        run = runner.start_run(GOAL, REQUESTER)
        status = runner.execute(run.run_id)
        elapsed = time.perf_counter() - start
        assert status == "awaiting_approval", status
        return (runner, run.run_id), elapsed

    def approve(self, handle: Any) -> float:
        runner, run_id = handle
        approval = runner.pending_approval(run_id)
        sent = len(self.sent)
        start = time.perf_counter()
        outcome = runner.decide(approval.approval_id, approval.digest, APPROVER, True)
        status = runner.execute(run_id)
        elapsed = time.perf_counter() - start
        assert isinstance(outcome, Decided) and status == "done", (outcome, status)
        assert len(self.sent) == sent + 1
        return elapsed


class PooledSignoffLoop(SignoffLoop):
    """An experiment, not the product: the same Runner on an engine that keeps its connections open."""

    name = "signoff-pooled"
    durability = SignoffLoop.durability + "; connections pooled (experiment: `bench.steps.pooled_sqlite_engine`)"

    def engine(self, url: str) -> Any:
        return pooled_sqlite_engine(url)


class RunloopLoop:
    """agent-runloop's `run_agent` / `resume_agent` with its `SqliteAgentRunStore`."""

    name = "agent-runloop"
    durability = ("SqliteAgentRunStore opens a connection per operation; set here to WAL, synchronous=FULL "
                  "(its default is a rollback journal, synchronous=FULL); full state rewritten before every "
                  "model turn, plus one audit row per tool call")

    def __init__(self, tmp: Path) -> None:
        from agent_loop import SqliteAgentRunStore

        class Store(SqliteAgentRunStore):
            def _connect(self) -> sqlite3.Connection:
                conn = super()._connect()
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=FULL")
                return conn

        self.store = Store(str(tmp / "runloop.db"))
        self.loop = asyncio.new_event_loop()
        self.sent: list[dict[str, Any]] = []

    def _tools(self) -> list[Any]:
        from agent_loop import ToolSpec

        async def lookup(args: Any, trace_id: str) -> dict[str, Any]:
            return lookup_result(args.query)

        async def notify(args: Any, trace_id: str) -> dict[str, Any]:
            self.sent.append(args.model_dump())
            return notify_result(args.model_dump())

        return [ToolSpec("lookup", "Look something up.", LookupArgs, lookup),
                ToolSpec("notify", "Post to a channel.", NotifyArgs, notify, writes=True)]

    def _backend(self, steps: int) -> Any:
        class Backend:
            model = "scripted"

            async def generate(self, messages: list[dict], format: Any = None, options: Any = None,
                               trace_id: str | None = None) -> str:
                # messages: [system, task, (assistant, observation) per step]
                made = decision((len(messages) - 2) // 2, steps, pause=True)
                if "final" in made:
                    return json.dumps({"action": "final", "answer": made["final"]})
                return json.dumps({"action": "call_tool", "tool": made["tool"], "arguments": made["args"]})

        return Backend()

    def segment(self, steps: int) -> tuple[Any, float]:
        from agent_loop import Budget, run_agent

        budget = Budget(max_iterations=steps + 2, max_tool_calls=steps + 2, max_tokens=10**12, max_seconds=1e6)

        async def go() -> tuple[Any, float]:
            start = time.perf_counter()
            result = await run_agent(GOAL, "Benchmark.", self._tools(), self._backend(steps),
                                     run_store=self.store, budget=budget)
            return result, time.perf_counter() - start

        result, elapsed = self.loop.run_until_complete(go())
        assert result.status == "awaiting_approval", result.status
        return (result.run_id, steps), elapsed

    def approve(self, handle: Any) -> float:
        from agent_loop import resume_agent

        run_id, steps = handle
        sent = len(self.sent)

        async def go() -> tuple[Any, float]:
            start = time.perf_counter()
            result = await resume_agent(run_id, True, self._tools(), self.store, self._backend(steps))
            return result, time.perf_counter() - start

        result, elapsed = self.loop.run_until_complete(go())
        assert result.status == "answered", result.status
        assert len(self.sent) == sent + 1
        return elapsed


class GraphState(TypedDict):
    history: Annotated[list, operator.add]
    steps: int


class LangGraphLoop:
    """A LangGraph StateGraph with SqliteSaver and durability="sync": one node (and checkpoint) per step.

    The history is an `operator.add` list channel, LangGraph's documented reducer. The node calls
    `interrupt()` before the side effect and `Command(resume=True)` continues it.
    """

    name = "langgraph"
    durability = ("SqliteSaver on one open connection, WAL (set by SqliteSaver), synchronous=FULL; "
                  "durability=\"sync\": each step's checkpoint and writes are committed before the next step")

    def __init__(self, tmp: Path) -> None:
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import END, START, StateGraph
        from langgraph.types import interrupt

        conn = sqlite3.connect(str(tmp / "langgraph.db"), check_same_thread=False)
        conn.execute("PRAGMA synchronous=FULL")
        self.saver = SqliteSaver(conn)
        self.sent: list[dict[str, Any]] = []
        sent = self.sent

        def step(state):  # unannotated: LangGraph reads a node's type hints at build time
            history = state["history"]  # [goal, (call, result) per step]
            made = decision((len(history) - 1) // 2, state["steps"], pause=True)
            if "final" in made:
                return {"history": [{"role": "assistant", "final": made["final"]}]}
            call = {"role": "assistant", "tool": made["tool"], "args": made["args"]}
            if made["tool"] == "notify":
                if not interrupt({"tool": "notify", "args": made["args"]}):
                    return {"history": [call, {"role": "tool", "error": "denied"}]}
                sent.append(dict(made["args"]))
                result = notify_result(made["args"])
            else:
                result = lookup_result(made["args"]["query"])
            return {"history": [call, {"role": "tool", "result": result}]}

        def route(state):
            return END if "final" in state["history"][-1] else "step"

        graph = StateGraph(GraphState)
        graph.add_node("step", step)
        graph.add_edge(START, "step")
        graph.add_conditional_edges("step", route)
        self.graph = graph.compile(checkpointer=self.saver)
        self.threads = 0

    def segment(self, steps: int) -> tuple[Any, float]:
        self.threads += 1
        config = {"configurable": {"thread_id": f"t{self.threads}"}, "recursion_limit": steps + 10}
        start = time.perf_counter()
        out = self.graph.invoke({"history": [{"role": "user", "content": GOAL}], "steps": steps}, config,
                                durability="sync")
        elapsed = time.perf_counter() - start
        assert "__interrupt__" in out, list(out)
        return config, elapsed

    def approve(self, handle: Any) -> float:
        from langgraph.types import Command

        sent = len(self.sent)
        start = time.perf_counter()
        out = self.graph.invoke(Command(resume=True), handle, durability="sync")
        elapsed = time.perf_counter() - start
        assert "final" in out["history"][-1] and "__interrupt__" not in out
        assert len(self.sent) == sent + 1
        return elapsed


SYSTEMS = {"signoff": SignoffLoop, "signoff-pooled": PooledSignoffLoop, "agent-runloop": RunloopLoop,
           "langgraph": LangGraphLoop}
MODULES = {"signoff": "runtime", "signoff-pooled": "runtime", "agent-runloop": "agent_loop",
           "langgraph": "langgraph.checkpoint.sqlite"}


def available() -> list[str]:
    """The systems importable in this interpreter."""
    return [name for name, module in MODULES.items() if _importable(module)]


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def measure(sizes: list[int], repeats: list[int], names: list[str] | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="signoff-peers-") as tmp:
        systems = [SYSTEMS[name](Path(tmp)) for name in (names or list(SYSTEMS))]
        for system in systems:  # warm-up: imports, schema, first WAL frames
            system.approve(system.segment(10)[0])
        samples: dict[str, dict[int, dict[str, list[float]]]] = {
            s.name: {n: {"step": [], "round_trip": []} for n in sizes} for s in systems}
        for steps, count in zip(sizes, repeats, strict=True):
            for repeat in range(count):
                order = systems[repeat % len(systems):] + systems[:repeat % len(systems)]
                for system in order:  # rotate who goes first: the disk's mood drifts over a run
                    handle, elapsed = system.segment(steps)
                    samples[system.name][steps]["step"].append(elapsed / steps)
                    samples[system.name][steps]["round_trip"].append(system.approve(handle))
        return {
            "systems": {
                s.name: {"version": version(s.name.removesuffix("-pooled")), "durability": s.durability,
                         "sizes": {str(n): _medians(samples[s.name][n]) for n in sizes}}
                for s in systems
            },
            "sizes": sizes, "repeats": repeats,
            "python": sys.version.split()[0], "sqlite": sqlite3.sqlite_version,
        }


def _medians(data: dict[str, list[float]]) -> dict[str, Any]:
    return {key: {"median_ms": round(statistics.median(v) * 1000, 4), "min_ms": round(min(v) * 1000, 4),
                  "max_ms": round(max(v) * 1000, 4), "n": len(v)} for key, v in data.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10,100,1000")
    parser.add_argument("--repeats", default="5,3,2")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    args = parser.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    repeats = [int(x) for x in args.repeats.split(",")]
    print(json.dumps(measure(sizes, repeats, args.systems.split(","))))


if __name__ == "__main__":
    main()
