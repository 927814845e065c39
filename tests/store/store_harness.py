"""What the store tests and the worker processes they spawn share.

A side-effecting tool that appends its key to a file (so executions are counted across
processes), scripted policies chosen by the run's model name, a manual clock, and runners built
from a database URL alone, as a restarted worker builds one. Spawned processes import this
module by name, so everything here is plain and picklable.
"""

from __future__ import annotations

import copy
import json
import multiprocessing
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import Engine, text
from sqlalchemy.exc import IntegrityError

from signoff.runtime.adapters.db import make_engine
from signoff.runtime.adapters.memory import KeyInUse
from signoff.runtime.adapters.sql import SqlStore
from signoff.runtime.agent import Checkpoint, Policy
from signoff.runtime.budget import Budget
from signoff.runtime.effects import Effect
from signoff.runtime.failpoints import Failpoints
from signoff.runtime.models.scripted import ScriptedPolicy
from signoff.runtime.ports import Store
from signoff.runtime.records import RunRecord, Saved
from signoff.runtime.rules import step_write
from signoff.runtime.runner import Runner
from signoff.runtime.runner_config import RunnerConfig
from signoff.runtime.state import new_state
from signoff.tools.base import Tool

REQUESTER = "U_ASK"
APPROVER = "U_LEAD"
SEND = "send_email"
SEND_ONCE = "send_email_once"
"""The same email tool, declared idempotent: it may be re-run with the same key."""
LOOKUP = "lookup"

SCRIPTS: dict[str, list[dict[str, Any]]] = {
    "scripted:send": [{"tool": SEND, "args": {"to": "ana@example.com", "body": "refund approved"}},
                      {"final": "sent"}],
    "scripted:send-once": [{"tool": SEND_ONCE, "args": {"to": "bo@example.com", "body": "hello"}},
                           {"final": "sent"}],
    "scripted:lookup-then-send": [{"tool": LOOKUP, "args": {"q": "orders"}},
                                  {"tool": SEND, "args": {"to": "cy@example.com"}},
                                  {"final": "sent"}],
    "scripted:lookups": [{"tool": LOOKUP, "args": {"q": f"page {i}"}} for i in range(3)] + [{"final": "found"}],
    "scripted:send-twice": [{"tool": SEND, "args": {"to": "ana@example.com", "body": "first"}},
                            {"tool": SEND, "args": {"to": "ana@example.com", "body": "second"}},
                            {"tool": SEND, "args": {"to": "bo@example.com", "body": "third"}},
                            {"final": "sent"}],
    # One turn of four calls: a read that runs, two emails that ask, and a tool that does not exist.
    "scripted:batch": [{"calls": [{"tool": LOOKUP, "args": {"q": "orders"}, "call_id": "c-look"},
                                  {"tool": SEND, "args": {"to": "ana@example.com", "body": "refund"}, "call_id": "c-ana"},
                                  {"tool": SEND, "args": {"to": "bo@example.com", "body": "refund"}, "call_id": "c-bo"},
                                  {"tool": "no_such_tool", "args": {}, "call_id": "c-none"}],
                        "text": "Looking up, and writing to both."},
                       {"final": "done"}],
}


class SendArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    to: str
    body: str = ""


class LookupArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    q: str


def side_effects(path: Path) -> list[tuple[str, str]]:
    """Every side effect that ran, in any process, as (tool, key)."""
    if not path.exists():
        return []
    return [tuple(line.split(" ", 1)) for line in path.read_text().splitlines()]  # type: ignore[misc]


def make_tools(effects: Path, *, send_timeout: float | None = None) -> dict[str, Tool]:
    """`lookup` (read-only) and two email tools that append `tool key` to `effects` per execution."""

    def sender(name: str) -> Any:
        def send(args: dict[str, Any], key: str) -> dict[str, Any]:
            with effects.open("a") as f:
                f.write(f"{name} {key}\n")
            return {"sent_to": args["to"], "key": key}
        return send

    def lookup(args: dict[str, Any], key: str) -> dict[str, Any]:
        return {"q": args["q"], "orders": ["A-1", "A-2"]}

    return {
        LOOKUP: Tool(LOOKUP, lookup, args_model=LookupArgs, description="Look up orders."),
        SEND: Tool(SEND, sender(SEND), side_effect=True, args_model=SendArgs, timeout_s=send_timeout,
                   description="Send an email."),
        SEND_ONCE: Tool(SEND_ONCE, sender(SEND_ONCE), side_effect=True, idempotent=True, args_model=SendArgs,
                        timeout_s=send_timeout, description="Send an email, deduplicated by key."),
    }


def scripted_policies(model: str) -> Policy:
    return ScriptedPolicy(SCRIPTS[model], name=model)


def build_runner(store: Store, effects: Path, *, failpoints: str = "", lease: float = 1.0,
                 policies: Any = scripted_policies, notifier: Any = None, **config: Any) -> Runner:
    """A runner over `store` with the test tools; `failpoints` like "after_tool=exit"."""
    config = {"model": "scripted:send", "lease": timedelta(seconds=lease),
              "failpoints": Failpoints(failpoints), **config}
    return Runner(store, make_tools(effects), policies, RunnerConfig(**config), notifier=notifier)


class Told:
    """A notifier that records what people were told, and answers where it "posted" approvals."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def of(self, method: str) -> list[str]:
        return [subject for m, subject in self.calls if m == method]

    def run_started(self, run: RunRecord) -> None:
        self.calls.append(("run_started", run.run_id))

    def approval_requested(self, run: RunRecord, approval: Any, card: Any) -> dict[str, Any]:
        self.calls.append(("approval_requested", approval.approval_id))
        return {"channel": "C1", "ts": f"{len(self.calls)}.0"}

    def approval_decided(self, run: RunRecord, approval: Any, card: Any) -> None:
        self.calls.append(("approval_decided", approval.approval_id))

    def approval_updated(self, run: RunRecord, approval: Any, card: Any) -> None:
        self.calls.append(("approval_updated", approval.approval_id))

    def approval_reminded(self, run: RunRecord, approval: Any, tell: list[str]) -> None:
        self.calls.append(("approval_reminded", approval.approval_id))

    def approval_escalated(self, run: RunRecord, approval: Any, added: list[str], tell: list[str]) -> None:
        self.calls.append(("approval_escalated", ",".join(added)))

    def approval_expired(self, run: RunRecord, approval: Any, card: Any) -> None:
        self.calls.append(("approval_expired", approval.approval_id))

    def tool_result(self, run: RunRecord, entry: dict[str, Any], grant: Any) -> None:
        self.calls.append(("tool_result", run.run_id))

    def run_finished(self, run: RunRecord) -> None:
        self.calls.append(("run_finished", run.run_id))

    def run_stopped(self, run: RunRecord) -> None:
        self.calls.append(("run_stopped", run.run_id))


class ManualClock:
    """A UTC clock for the store that only moves when told to."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC).replace(microsecond=0)
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self.now

    def advance(self, **delta: float) -> None:
        with self._lock:
            self.now += timedelta(**delta)


def raw_run(engine: Engine, run_id: str) -> dict[str, Any]:
    """The run's row as stored, columns by name."""
    with engine.connect() as conn:
        return dict(conn.execute(text("SELECT * FROM runs WHERE run_id = :id"), {"id": run_id}).one()._mapping)


def count_rows(engine: Engine, table: str, run_id: str) -> int:
    with engine.connect() as conn:
        return conn.execute(text(f"SELECT count(*) FROM {table} WHERE run_id = :id"), {"id": run_id}).scalar_one()


def set_state(engine: Engine, run_id: str, state_text: str) -> None:
    """Overwrite the stored state column, as a broken tool or a bad hand edit would."""
    with engine.begin() as conn:
        conn.execute(text("UPDATE runs SET state = :s WHERE run_id = :id"), {"s": state_text, "id": run_id})


def edit_state(engine: Engine, run_id: str, **changes: Any) -> None:
    state = json.loads(raw_run(engine, run_id)["state"])
    state.update(changes)
    set_state(engine, run_id, json.dumps(state))


# -- building runs by hand, one checkpoint at a time -------------------------------------

LEASE = timedelta(seconds=30)
TTL = timedelta(minutes=30)


def create(store: Store, run_id: str = "run-a") -> RunRecord:
    return store.create_run(new_state(run_id, Budget().to_json()), goal="refund order A-1",
                            requester=REQUESTER, origin={"channel": "C1"}, model="scripted:send")


def step(state: dict[str, Any], *entries: dict[str, Any], events: list[dict[str, Any]] | None = None,
         status: str = "running", pending: dict[str, Any] | None = None,
         execution: dict[str, Any] | None = None, effects: tuple[Effect, ...] = ()) -> Checkpoint:
    """The next checkpoint after `state`: one more step that appended `entries`, doing `effects`
    to approvals (as the loop says them beside the events)."""
    state = copy.deepcopy(state)
    start = len(state["history"])
    state["history"].extend(entries)
    state["steps"] += 1
    state["status"], state["pending"] = status, pending
    return Checkpoint(state, start, events if events is not None else [{"type": "decision", "step": state["steps"]}],
                      execution, effects=effects)


def lookup_step(state: dict[str, Any], marker: str) -> Checkpoint:
    n = state["steps"] + 1
    return step(state, {"role": "assistant", "step": n, "tool": "lookup", "args": {"q": marker}, "call_id": f"c{n}"},
                {"role": "tool", "step": n, "tool": "lookup", "call_id": f"c{n}", "result": {"found": marker}})


def commit(store: Store, run_id: str, version: int, checkpoint: Checkpoint, owner: str = "w1") -> Saved:
    """Commit `checkpoint` as the runner does, with the effects the core decides for it."""
    return store.save_step(run_id, owner=owner, version=version, checkpoint=checkpoint,
                           write=step_write(checkpoint, TTL), lease=LEASE)


def save(store: Store, run_id: str, version: int, checkpoint: Checkpoint, owner: str = "w1") -> int:
    """`commit`, returning the run's new version."""
    return commit(store, run_id, version, checkpoint, owner).version


def snapshot(store: Store, run_id: str) -> tuple[Any, ...]:
    """Everything a step could have written for the run, as the store reads it back."""
    run = store.get_run(run_id)
    return (run.state, run.version, run.status, run.command, store.timeline(run_id),
            store.list_approvals(run_id=run_id), store.executions(run_id))


def duplicate_error(store: Store) -> type[Exception]:
    """What the store raises for a write that repeats what must be unique (SQL: a unique constraint)."""
    return IntegrityError if isinstance(store, SqlStore) else KeyInUse


# -- entry points of spawned processes ------------------------------------------------------


def worker_context() -> Any:
    """How the tests start worker processes: forked from a fork server that never touched a database.

    Like spawn, every child starts clean and builds its own engine; unlike spawn, the heavy imports
    happen once in the server instead of once per child, which keeps these tests within seconds.
    (Python 3.11's fork server ignores our sys.path, so only modules importable from the project
    root are preloaded; anything else is imported by each child.)
    """
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["signoff.runtime.runner", "signoff.runtime.adapters.db", "signoff.runtime.models.scripted", "psycopg"])
    return context


_barrier: Any = None


def init_worker(barrier: Any) -> None:
    """Pool initializer: keep the barrier that lines the workers up."""
    global _barrier
    _barrier = barrier


def decide_together(url: str, effects: str, approval_id: str, digest: str, user: str) -> dict[str, Any]:
    """Wait for every worker, then decide; returns the outcome's name and the approval it saw."""
    engine = make_engine(url)
    try:
        runner = build_runner(SqlStore(engine), Path(effects))
        runner.get_approval(approval_id)  # connect before the barrier so all start on equal terms
        _barrier.wait(timeout=60)
        outcome = runner.decide(approval_id, digest, user, approved=True, note=f"ok from {user}")
        approval = outcome.approval  # type: ignore[union-attr]
        return {"outcome": type(outcome).__name__, "user": user, "status": approval.status,
                "decided_by": approval.decided_by}
    finally:
        engine.dispose()


def execute_together(url: str, effects: str, run_id: str) -> str | None:
    """Wait for every worker, then try to drive the run; None if another worker had it."""
    engine = make_engine(url)
    try:
        runner = build_runner(SqlStore(engine), Path(effects), lease=5.0)
        runner.get_approval("warm-up")
        _barrier.wait(timeout=60)
        return runner.execute(run_id)
    finally:
        engine.dispose()


def crash_child(url: str, effects: str, point: str, action: list[Any]) -> None:
    """Do `action` with `point=exit` enabled: the process dies there (exit code 137)."""
    engine = make_engine(url)
    runner = build_runner(SqlStore(engine), Path(effects), failpoints=f"{point}=exit", lease=1.0, notifier=Told())
    match action:
        case ["execute", run_id]:
            runner.execute(run_id)
        case ["decide", approval_id, digest, user]:
            runner.decide(approval_id, digest, user, approved=True, note="go")
        case _:
            raise AssertionError(action)
    engine.dispose()
