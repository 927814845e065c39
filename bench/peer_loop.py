"""Benchmark 2's worker: Signoff, agent-runloop and LangGraph run the same loop in one process.

Runs inside the benchmark's own virtualenv (see `bench.peers`), which has the peers installed, and
prints one JSON document. Every system checkpoints each step durably to a SQLite file in WAL mode
with synchronous=FULL, pauses before the side-effecting `notify`, and finishes after approval.

    python -m bench.peer_loop --sizes 10,100,1000 --repeats 5,3,2 --fresh-samples 5 --bulk 1000

Besides the per-step and round-trip figures it measures, for each system:

- the approval round trip from a fresh process: a run is paused in this process, then a new
  interpreter (`--fresh SYSTEM`) imports what that system needs, opens the same database file and
  times decide → finished inside itself; its wall time from spawn to exit is the second figure;
- `--bulk` sequential paused-run creations (one lookup, then `notify` asks for approval), then the
  same number of sequential approvals, each driven to its end, in ms per run.

The module imports only the standard library and `bench.workload` at load, and each system its own
packages when it is built, so a fresh process pays for the system it runs and no other.
"""

from __future__ import annotations

import abc
import argparse
import asyncio
import importlib
import json
import operator
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import Annotated, Any, TypedDict

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

APPROVER, REQUESTER = "U_APPROVER", "U_REQUESTER"
BULK_STEPS = 2
"""A bulk run's shape: step 1 looks something up, step 2 proposes `notify` and waits for approval."""
ROOT = Path(__file__).resolve().parent.parent
FRESH_TIMEOUT_S = 120


def signoff_approve(runner: Any, run_id: str, approval_id: str, digest: str, user: str = APPROVER) -> str | None:
    """Signoff's approval path as a click drives it: record the decision, then drive the run to its end.

    Every Signoff approval in this module goes through here, so a change to how the runtime is
    driven after a decision is made in one place.
    """
    from signoff.runtime.records import Decided

    outcome = runner.decide(approval_id, digest, user, True, drive=True)
    assert isinstance(outcome, Decided), outcome
    status: str | None = runner.execute(run_id)
    return status


class Loop(abc.ABC):
    """What every system offers: drive a run to its pause (`create`), say what a click on its
    approval carries (`ticket`, JSON), and approve it to the end (`finish`).

    Each is built on one SQLite file (`path`); `create=False` opens a file another process made.
    """

    name = ""
    durability = ""
    path: Path
    sent: list[dict[str, Any]]

    @abc.abstractmethod
    def __init__(self, path: Path, create: bool = True) -> None:
        """Open the system's database at `path`; with `create`, make its schema first."""

    @abc.abstractmethod
    def create(self, steps: int) -> Any:
        """Start a run of `steps` steps and drive it until it waits for approval; its handle."""

    @abc.abstractmethod
    def ticket(self, handle: Any) -> dict[str, Any]:
        """What an approval click on the paused run carries, as JSON."""

    @abc.abstractmethod
    def finish(self, ticket: dict[str, Any]) -> None:
        """Approve the call and drive the run to its end (the side effect once, the answer saved)."""

    @abc.abstractmethod
    def finished(self, ticket: dict[str, Any]) -> bool:
        """Whether the run of `ticket` is finished as the database has it (read by this process)."""

    @abc.abstractmethod
    def prepare(self, ticket: dict[str, Any]) -> None:
        """Have ready what approving `ticket` needs besides the approval itself, as a running
        server has when a click arrives: the database opened."""

    def count_statements(self, ticket: dict[str, Any]) -> dict[str, int] | None:
        """Approve `ticket` to the end, counting the SQL statements and the commits it took (None:
        this system's connections cannot be watched)."""
        return None

    def segment(self, steps: int) -> tuple[Any, float]:
        start = time.perf_counter()
        handle = self.create(steps)
        return handle, time.perf_counter() - start

    def approve(self, handle: Any) -> float:
        ticket = self.ticket(handle)
        sent = len(self.sent)
        start = time.perf_counter()
        self.finish(ticket)
        elapsed = time.perf_counter() - start
        assert len(self.sent) == sent + 1, (self.name, len(self.sent), sent)
        return elapsed


class SignoffLoop(Loop):
    """The real Runner on `make_engine`'s SQLite file (WAL, synchronous=FULL, pooled connections),
    one Runner per run length, as a server holds one."""

    name = "signoff"
    durability = "WAL, synchronous=FULL; one transaction per step (state row, history rows, events)"

    def __init__(self, path: Path, create: bool = True) -> None:
        from signoff.runtime.adapters.db import upgrade
        from signoff.runtime.adapters.sql import SqlStore

        self.path = path
        engine = self.engine(f"sqlite:///{path}")
        if create:
            upgrade(engine)
        self.store = SqlStore(engine)
        self.sent = []
        self.runners: dict[int, Any] = {}

    def engine(self, url: str) -> Any:
        from signoff.runtime.adapters.db import make_engine

        return make_engine(url)

    def runner(self, steps: int) -> Any:
        from signoff.runtime.budget import Budget
        from signoff.runtime.runner import Runner
        from signoff.runtime.runner_config import RunnerConfig

        if steps not in self.runners:
            policy = SignoffPolicy(steps, pause=True)
            self.runners[steps] = Runner(self.store, signoff_tools(self.sent), lambda spec: policy,
                                         RunnerConfig(budget=Budget(max_steps=steps + 2)))
        return self.runners[steps]

    def create(self, steps: int) -> Any:
        runner = self.runner(steps)
        run = runner.start_run(GOAL, REQUESTER, drive=True)
        status = runner.execute(run.run_id)
        assert status == "awaiting_approval", status
        return steps, run.run_id

    def ticket(self, handle: Any) -> dict[str, Any]:
        steps, run_id = handle
        approval = self.runner(steps).pending_approval(run_id)
        return {"steps": steps, "run_id": run_id, "approval_id": approval.approval_id, "digest": approval.digest}

    def prepare(self, ticket: dict[str, Any]) -> None:
        self.runner(ticket["steps"])
        with self.store.engine.connect():  # opens the pool's first connection, pragmas applied
            pass

    def finish(self, ticket: dict[str, Any]) -> None:
        status = signoff_approve(self.runner(ticket["steps"]), ticket["run_id"], ticket["approval_id"],
                                 ticket["digest"])
        assert status == "done", status

    def count_statements(self, ticket: dict[str, Any]) -> dict[str, int] | None:
        from sqlalchemy import event

        counts = {"statements": 0, "commits": 0}

        def executed(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
            # SQLite's BEGIN IMMEDIATE goes through the cursor too; it is a transaction's, not a statement.
            counts["statements"] += not statement.lstrip().upper().startswith("BEGIN")

        def committed(*_: Any) -> None:
            counts["commits"] += 1

        engine = self.store.engine
        event.listen(engine, "before_cursor_execute", executed)
        event.listen(engine, "commit", committed)
        try:
            self.finish(ticket)
        finally:
            event.remove(engine, "before_cursor_execute", executed)
            event.remove(engine, "commit", committed)
        return counts

    def finished(self, ticket: dict[str, Any]) -> bool:
        run = self.store.get_run(ticket["run_id"], history=False)
        ledger = self.store.executions(ticket["run_id"])
        return bool(run is not None and run.status == "done"
                    and [row["status"] for row in ledger] == ["succeeded"])


class PooledSignoffLoop(SignoffLoop):
    """An experiment, not the product: the same Runner on an engine that keeps its connections open."""

    name = "signoff-pooled"
    durability = SignoffLoop.durability + "; connections pooled (experiment: `bench.steps.pooled_sqlite_engine`)"

    def engine(self, url: str) -> Any:
        from bench.steps import pooled_sqlite_engine

        return pooled_sqlite_engine(url)


class RunloopLoop(Loop):
    """agent-runloop's `run_agent` / `resume_agent` with its `SqliteAgentRunStore`."""

    name = "agent-runloop"
    durability = ("SqliteAgentRunStore opens a connection per operation; set here to WAL, synchronous=FULL "
                  "(its default is a rollback journal, synchronous=FULL); full state rewritten before every "
                  "model turn, plus one audit row per tool call")

    def __init__(self, path: Path, create: bool = True) -> None:
        from agent_loop import SqliteAgentRunStore

        class Store(SqliteAgentRunStore):
            def _connect(self) -> sqlite3.Connection:
                conn = super()._connect()
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=FULL")
                return conn

        self.path = path
        self.store = Store(str(path))
        self.loop = asyncio.new_event_loop()
        self.sent = []

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

    def create(self, steps: int) -> Any:
        from agent_loop import Budget, run_agent

        budget = Budget(max_iterations=steps + 2, max_tool_calls=steps + 2, max_tokens=10**12, max_seconds=1e6)
        result = self.loop.run_until_complete(run_agent(GOAL, "Benchmark.", self._tools(), self._backend(steps),
                                                        run_store=self.store, budget=budget))
        assert result.status == "awaiting_approval", result.status
        return result.run_id, steps

    def ticket(self, handle: Any) -> dict[str, Any]:
        run_id, steps = handle
        return {"steps": steps, "run_id": run_id}

    def prepare(self, ticket: dict[str, Any]) -> None:
        return None  # SqliteAgentRunStore opens a connection for every operation: nothing stays open

    def finish(self, ticket: dict[str, Any]) -> None:
        from agent_loop import resume_agent

        result = self.loop.run_until_complete(resume_agent(ticket["run_id"], True, self._tools(), self.store,
                                                           self._backend(ticket["steps"])))
        assert result.status == "answered", result.status

    def finished(self, ticket: dict[str, Any]) -> bool:
        loaded = self.store.load(ticket["run_id"])
        return loaded is not None and loaded[0] == "answered"


class GraphState(TypedDict):
    history: Annotated[list, operator.add]
    steps: int


class LangGraphLoop(Loop):
    """A LangGraph StateGraph with SqliteSaver and durability="sync": one node (and checkpoint) per step.

    The history is an `operator.add` list channel, LangGraph's documented reducer. The node calls
    `interrupt()` before the side effect and `Command(resume=True)` continues it.
    """

    name = "langgraph"
    durability = ("SqliteSaver on one open connection, WAL (set by SqliteSaver), synchronous=FULL; "
                  "durability=\"sync\": each step's checkpoint and writes are committed before the next step")

    def __init__(self, path: Path, create: bool = True) -> None:
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import END, START, StateGraph
        from langgraph.types import interrupt

        self.path = path
        conn = sqlite3.connect(str(path), check_same_thread=False)
        conn.execute("PRAGMA synchronous=FULL")
        self.saver = SqliteSaver(conn)
        self.sent = []
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

    @staticmethod
    def config(thread_id: str, steps: int) -> dict[str, Any]:
        return {"configurable": {"thread_id": thread_id}, "recursion_limit": steps + 10}

    def create(self, steps: int) -> Any:
        self.threads += 1
        thread_id = f"t{self.threads}"
        out = self.graph.invoke({"history": [{"role": "user", "content": GOAL}], "steps": steps},
                                self.config(thread_id, steps), durability="sync")
        assert "__interrupt__" in out, list(out)
        return thread_id, steps

    def ticket(self, handle: Any) -> dict[str, Any]:
        thread_id, steps = handle
        return {"steps": steps, "thread_id": thread_id}

    def prepare(self, ticket: dict[str, Any]) -> None:
        self.saver.setup()  # what SqliteSaver otherwise does at its first read: pragmas, tables

    def finish(self, ticket: dict[str, Any]) -> None:
        from langgraph.types import Command

        out = self.graph.invoke(Command(resume=True), self.config(ticket["thread_id"], ticket["steps"]),
                                durability="sync")
        assert "final" in out["history"][-1] and "__interrupt__" not in out

    def count_statements(self, ticket: dict[str, Any]) -> dict[str, int] | None:
        said: list[str] = []
        self.saver.conn.set_trace_callback(said.append)
        try:
            self.finish(ticket)
        finally:
            self.saver.conn.set_trace_callback(None)
        words = [line.split(None, 1)[0].upper() for line in said if line.strip()]
        return {"statements": sum(word not in ("BEGIN", "COMMIT") for word in words),
                "commits": words.count("COMMIT")}

    def finished(self, ticket: dict[str, Any]) -> bool:
        state = self.graph.get_state(self.config(ticket["thread_id"], ticket["steps"]))
        return "final" in state.values["history"][-1] and not state.next


SYSTEMS: dict[str, type[Loop]] = {"signoff": SignoffLoop, "signoff-pooled": PooledSignoffLoop,
                                  "agent-runloop": RunloopLoop, "langgraph": LangGraphLoop}
MODULES = {"signoff": "signoff.runtime", "signoff-pooled": "signoff.runtime", "agent-runloop": "agent_loop",
           "langgraph": "langgraph.checkpoint.sqlite"}
PRODUCTS = ("signoff", "agent-runloop", "langgraph")
"""The systems of the fresh-process and bulk figures: the pooled-engine experiment is left out."""


def available() -> list[str]:
    """The systems importable in this interpreter."""
    return [name for name, module in MODULES.items() if _importable(module)]


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def _rotated(items: list[Any], turn: int) -> list[Any]:
    """Who goes first changes every turn: the disk's mood drifts over a run."""
    shift = turn % len(items)
    return items[shift:] + items[:shift]


def measure(sizes: list[int], repeats: list[int], names: list[str] | None = None, fresh_steps: int = 10,
            fresh_samples: int = 0, bulk: int = 0) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="signoff-peers-") as tmp:
        systems = [SYSTEMS[name](Path(tmp) / f"{name}.db") for name in (names or list(SYSTEMS))]
        for system in systems:  # warm-up: imports, schema, first WAL frames
            system.approve(system.segment(10)[0])
        samples: dict[str, dict[int, dict[str, list[float]]]] = {
            s.name: {n: {"step": [], "round_trip": []} for n in sizes} for s in systems}
        for steps, count in zip(sizes, repeats, strict=True):
            for repeat in range(count):
                for system in _rotated(systems, repeat):
                    handle, elapsed = system.segment(steps)
                    samples[system.name][steps]["step"].append(elapsed / steps)
                    samples[system.name][steps]["round_trip"].append(system.approve(handle))
        result: dict[str, Any] = {
            "systems": {
                s.name: {"version": version(s.name.removesuffix("-pooled")), "durability": s.durability,
                         "sizes": {str(n): _medians(samples[s.name][n]) for n in sizes}}
                for s in systems
            },
            "sizes": sizes, "repeats": repeats,
            "python": sys.version.split()[0], "sqlite": sqlite3.sqlite_version,
        }
        products = [s for s in systems if s.name in PRODUCTS]
        if fresh_samples and products:
            result["fresh"] = fresh_round_trips(products, fresh_steps, fresh_samples)
        if bulk and products:
            result["bulk"] = sequential(products, bulk, BULK_STEPS)
        if products:
            result["statements"] = statement_counts(products, fresh_steps)
        return result


def statement_counts(systems: list[Loop], steps: int) -> dict[str, Any]:
    """What one approval round trip (decision → run finished) asks of the database, per system:
    SQL statements sent (BEGIN and COMMIT not counted) and commits; a count is the same every time."""
    counted: dict[str, Any] = {}
    for system in systems:
        counts = system.count_statements(system.ticket(system.segment(steps)[0]))
        if counts is not None:
            counted[system.name] = counts
    return {"steps": steps, "systems": counted}


def _medians(data: dict[str, list[float]]) -> dict[str, Any]:
    return {key: {"median_ms": round(statistics.median(v) * 1000, 4), "min_ms": round(min(v) * 1000, 4),
                  "max_ms": round(max(v) * 1000, 4), "n": len(v)} for key, v in data.items()}


def _summary_ms(values_ms: list[float]) -> dict[str, Any]:
    return {"median_ms": round(statistics.median(values_ms), 3), "min_ms": round(min(values_ms), 3),
            "max_ms": round(max(values_ms), 3), "n": len(values_ms)}


# -- the round trip from a fresh process ---------------------------------------------------------


def fresh_round_trips(systems: list[Loop], steps: int, samples: int) -> dict[str, Any]:
    """Per system, `samples` runs paused here and each approved by a new process (after one warm-up
    process per system, so the figures do not include compiling bytecode or a cold file cache)."""
    timings: dict[str, dict[str, list[float]]] = {s.name: {"inside": [], "ready": [], "wall": []} for s in systems}
    for turn in range(samples + 1):
        for system in _rotated(systems, turn):
            inside, ready, wall = fresh_once(system, steps)
            if turn:
                timings[system.name]["inside"].append(inside)
                timings[system.name]["ready"].append(ready)
                timings[system.name]["wall"].append(wall)
    return {"steps": steps, "samples": samples,
            "systems": {name: {"round_trip": _summary_ms(t["inside"]), "spawn_to_ready": _summary_ms(t["ready"]),
                               "spawn_to_exit": _summary_ms(t["wall"])} for name, t in timings.items()}}


def fresh_once(system: Loop, steps: int) -> tuple[float, float, float]:
    """Pause a run here, approve it from a new interpreter: (decide → finished inside it, spawn →
    ready to decide, spawn → exit), in ms."""
    handle, _ = system.segment(steps)
    ticket = system.ticket(handle)
    command = [sys.executable, "-m", "bench.peer_loop", "--fresh", system.name, "--db", str(system.path),
               "--ticket", json.dumps(ticket)]
    spawned = time.time()
    start = time.perf_counter()
    done = subprocess.run([*command, "--spawned", repr(spawned)], capture_output=True, text=True, cwd=ROOT,
                          timeout=FRESH_TIMEOUT_S)
    wall = (time.perf_counter() - start) * 1000
    if done.returncode != 0:
        raise RuntimeError(f"fresh {system.name} process failed:\n{done.stderr[-4000:]}")
    answer = json.loads(done.stdout)
    assert answer["sent"] == 1, answer
    assert system.finished(ticket), (system.name, ticket)
    return answer["round_trip_ms"], answer["ready_ms"], wall


def fresh_main(name: str, db: Path, ticket: dict[str, Any], spawned: float) -> dict[str, Any]:
    """Inside the new process: open the database, then time one approval to the run's end."""
    system = SYSTEMS[name](db, create=False)
    system.prepare(ticket)
    ready = (time.time() - spawned) * 1000
    start = time.perf_counter()
    system.finish(ticket)
    elapsed = (time.perf_counter() - start) * 1000
    return {"round_trip_ms": round(elapsed, 3), "ready_ms": round(ready, 3), "sent": len(system.sent)}


# -- many runs one after another -------------------------------------------------------------------


def sequential(systems: list[Loop], count: int, steps: int, block: int = 100) -> dict[str, Any]:
    """`count` paused-run creations, then `count` approvals each to its end, one after another.

    The systems take turns in blocks of `block` runs (who goes first rotating), so the disk's drift
    falls on all of them alike; each system's time is the sum of its blocks, and each block's ms
    per run is kept too (the approvals' first block has every run still waiting, the last few).
    """
    handles: dict[str, list[Any]] = {s.name: [] for s in systems}
    seconds: dict[str, dict[str, float]] = {s.name: {"create": 0.0, "approve": 0.0} for s in systems}
    blocks_ms: dict[str, dict[str, list[float]]] = {s.name: {"create": [], "approve": []} for s in systems}
    blocks = [(first, min(block, count - first)) for first in range(0, count, block)]
    for turn, (_, size) in enumerate(blocks):
        for system in _rotated(systems, turn):
            start = time.perf_counter()
            made = [system.create(steps) for _ in range(size)]
            elapsed = time.perf_counter() - start
            seconds[system.name]["create"] += elapsed
            blocks_ms[system.name]["create"].append(round(elapsed / size * 1000, 3))
            handles[system.name] += made
    tickets = {s.name: [s.ticket(h) for h in handles[s.name]] for s in systems}  # what each click carries
    sent_before = {s.name: len(s.sent) for s in systems}
    for turn, (first, size) in enumerate(blocks):
        for system in _rotated(systems, turn):
            start = time.perf_counter()
            for ticket in tickets[system.name][first:first + size]:
                system.finish(ticket)
            elapsed = time.perf_counter() - start
            seconds[system.name]["approve"] += elapsed
            blocks_ms[system.name]["approve"].append(round(elapsed / size * 1000, 3))
    for system in systems:
        assert len(system.sent) == sent_before[system.name] + count, system.name
    return {"runs": count, "steps": steps, "block": block,
            "systems": {name: {"create_seconds": round(s["create"], 3), "approve_seconds": round(s["approve"], 3),
                               "create_ms_per_run": round(s["create"] / count * 1000, 3),
                               "approve_ms_per_run": round(s["approve"] / count * 1000, 3),
                               "ms_per_run_by_block": blocks_ms[name]}
                        for name, s in seconds.items()}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10,100,1000")
    parser.add_argument("--repeats", default="5,3,2")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--fresh-steps", type=int, default=10, help="steps of the runs approved from a new process")
    parser.add_argument("--fresh-samples", type=int, default=0, help="new processes per system (0: none)")
    parser.add_argument("--bulk", type=int, default=0, help="sequential creations and approvals per system")
    parser.add_argument("--fresh", help="(inside a new process) approve one paused run of this system")
    parser.add_argument("--db", help="with --fresh: the system's database file")
    parser.add_argument("--ticket", help="with --fresh: what the approval click carries (JSON)")
    parser.add_argument("--spawned", type=float, help="with --fresh: time.time() when the process was spawned")
    args = parser.parse_args()
    if args.fresh:
        print(json.dumps(fresh_main(args.fresh, Path(args.db), json.loads(args.ticket), args.spawned)))
        return
    sizes = [int(x) for x in args.sizes.split(",")]
    repeats = [int(x) for x in args.repeats.split(",")]
    print(json.dumps(measure(sizes, repeats, args.systems.split(","), args.fresh_steps, args.fresh_samples,
                             args.bulk)))


if __name__ == "__main__":
    main()
