"""Benchmark 1: per-step overhead of the real Runner with a durable checkpoint after every step.

A scripted policy calls a no-op read-only tool at every step until the step budget runs out, so
all the time measured is Signoff's own: the agent loop, the tool dispatch and one committed
`save_step` per step. The floor is one bare commit of the same payload with the same driver and
the same durability settings.
"""

from __future__ import annotations

import copy
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, select, text

from bench import pg, report
from bench.stats import ms, ratio, summary, times
from bench.workload import GOAL, SignoffPolicy, intervals, signoff_tools
from signoff.runtime.adapters.db import make_engine, upgrade
from signoff.runtime.adapters.sql import SqlStore
from signoff.runtime.adapters.tables import run_history, runs
from signoff.runtime.budget import Budget
from signoff.runtime.runner import Runner
from signoff.runtime.runner_config import RunnerConfig

FULL = {"sizes": (10, 100, 1000), "repeats": {10: 5, 100: 3, 1000: 1}, "floor_samples": 100, "edge": 50,
        "experiment_sizes": (10, 100)}
QUICK = {"sizes": (5, 20), "repeats": {5: 2, 20: 1}, "floor_samples": 10, "edge": 5, "experiment_sizes": (5,)}


def run(quick: bool = False, postgres_url: str | None = None,
        only: tuple[str, ...] = ("sqlite", "sqlite_pooled", "postgresql")) -> dict[str, Any]:
    """Measure each backend in `only` (PostgreSQL when a URL is given) and judge the goals.

    The backends take turns, run by run and floor block by floor block, so the disk's changing
    sync latency falls on all of them alike.
    """
    plan = QUICK if quick else FULL
    with tempfile.TemporaryDirectory(prefix="signoff-bench-") as tmp, ExitStack() as stack:
        engines: dict[str, tuple[Engine, tuple[int, ...]]] = {}
        if "sqlite" in only:
            engines["sqlite"] = (make_engine(f"sqlite:///{Path(tmp) / 'steps.db'}"), plan["sizes"])
        if "sqlite_pooled" in only:
            engine = pooled_sqlite_engine(f"sqlite:///{Path(tmp) / 'steps-pooled.db'}")
            engines["sqlite_pooled"] = (engine, plan["experiment_sizes"])
        if postgres_url and "postgresql" in only:
            url = stack.enter_context(pg.dedicated_schema(postgres_url, "bench_steps"))
            engines["postgresql"] = (make_engine(url), plan["sizes"])
        try:
            backends = measure(engines, plan)
        finally:
            for engine, _ in engines.values():
                engine.dispose()
    return {"plan": dict(plan), "backends": backends, "goals": goals(backends)}


def pooled_sqlite_engine(url: str) -> Engine:
    """An experiment, not the product: `make_engine`'s SQLite settings, taking the write lock at
    every `BEGIN`, reads included.

    It was written when `make_engine` opened a connection per transaction, to show what pooling
    would save; `make_engine` pools now, and takes the lock only for writes. Nothing in Signoff
    uses this engine.
    """
    engine = create_engine(url, connect_args={"check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _configure(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        for pragma in ("busy_timeout = 30000", "journal_mode = WAL", "synchronous = FULL", "foreign_keys = ON"):
            cursor.execute(f"PRAGMA {pragma}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def measure(engines: dict[str, tuple[Engine, tuple[int, ...]]], plan: dict[str, Any]) -> dict[str, Any]:
    stores = {}
    for name, (engine, _) in engines.items():
        upgrade(engine)
        stores[name] = SqlStore(engine)
        one_run(stores[name], 10)  # warm-up: imports, statement caches, the first WAL frames
    samples: dict[str, dict[int, dict[str, list[float]]]] = {name: {} for name in engines}
    last_run: dict[str, tuple[str, list[float]]] = {}
    for steps in plan["sizes"]:
        for repeat in range(plan["repeats"][steps]):
            for name in _turns(list(engines), repeat):
                if steps not in engines[name][1]:
                    continue
                run_id, total, gaps = one_run(stores[name], steps)
                sample = samples[name].setdefault(steps, {"step": [], "run": []})
                sample["step"] += gaps
                sample["run"].append(total / steps)
                last_run[name] = (run_id, gaps)
    floors = measure_floors({name: engine for name, (engine, _) in engines.items()},
                            {name: last_run[name][0] for name in engines}, plan["floor_samples"])
    return {name: describe(stores[name], samples[name], last_run[name], floors[name], plan["edge"])
            for name in engines}


def _turns(names: list[str], repeat: int) -> list[str]:
    shift = repeat % len(names)
    return names[shift:] + names[:shift]


def describe(store: SqlStore, samples: dict[int, dict[str, list[float]]], last_run: tuple[str, list[float]],
             floors: dict[str, Any], edge: int) -> dict[str, Any]:
    run_id, gaps = last_run
    first, last = statistics.median(gaps[:edge]), statistics.median(gaps[-edge:])
    history = (store.get_run(run_id) or _missing(run_id)).state["history"]
    start = time.perf_counter()
    copy.deepcopy(history)
    copy_ms = (time.perf_counter() - start) * 1000
    return {
        "sizes": {str(n): {"step": summary(s["step"]), "run_mean_per_step": summary(s["run"])}
                  for n, s in samples.items()},
        "longest": {"steps": max(samples), "first_median_ms": round(first * 1000, 4),
                    "last_median_ms": round(last * 1000, 4), "last_over_first": round(last / first, 3),
                    "history_entries": len(history), "history_deepcopy_ms": round(copy_ms, 3)},
        **floors,
    }


def measure_floors(engines: dict[str, Engine], run_ids: dict[str, str], samples: int,
                   block: int = 10) -> dict[str, dict[str, Any]]:
    """Both floors for every engine, in alternating blocks of `block` commits."""
    payloads = {name: step_payload(engine, run_ids[name]) for name, engine in engines.items()}
    timings: dict[str, dict[str, list[float]]] = {name: {"engine": [], "driver": []} for name in engines}
    for engine in engines.values():
        _floor_tables(engine)
    seq = 0
    for turn in range(max(1, samples // block)):
        for name in _turns(list(engines), turn):
            engine, payload = engines[name], payloads[name]
            timings[name]["engine"] += floor_engine(engine, payload, range(seq, seq + block))
            timings[name]["driver"] += floor_driver(engine, payload, range(seq + block, seq + 2 * block))
        seq += 2 * block
    return {name: {"payload_bytes": {"state": len(payloads[name]["state"]), "history": len(payloads[name]["entry"])},
                   "floor_engine": summary(t["engine"]), "floor_driver": summary(t["driver"])}
            for name, t in timings.items()}


def one_run(store: SqlStore, steps: int) -> tuple[str, float, list[float]]:
    policy = SignoffPolicy(steps)
    runner = Runner(store, signoff_tools(), lambda spec: policy, RunnerConfig(budget=Budget(max_steps=steps)))
    run = runner.start_run(GOAL, "U_BENCH")
    start = time.perf_counter()
    status = runner.execute(run.run_id)
    total = time.perf_counter() - start
    assert status == "budget_exhausted", status
    assert len(policy.stamps) == steps, (len(policy.stamps), steps)
    return run.run_id, total, intervals(policy.stamps)


def step_payload(engine: Engine, run_id: str) -> dict[str, str]:
    """The stored state row of a long run and the history rows of its last step, as the floor writes them."""
    with engine.connect() as conn:
        state = conn.execute(select(runs.c.state).where(runs.c.run_id == run_id)).scalar_one()
        entries = conn.execute(select(run_history.c.entry).where(run_history.c.run_id == run_id)
                               .order_by(run_history.c.seq.desc()).limit(2)).scalars().all()
    return {"state": state, "entry": "".join(entries)}


FLOOR_TABLES = (
    "CREATE TABLE IF NOT EXISTS bench_floor_state (id INTEGER PRIMARY KEY, state TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS bench_floor_history (id INTEGER NOT NULL, seq INTEGER NOT NULL, "
    "entry TEXT NOT NULL, PRIMARY KEY (id, seq))",
)
UPDATE = "UPDATE bench_floor_state SET state = {state} WHERE id = 1"
INSERT = "INSERT INTO bench_floor_history (id, seq, entry) VALUES (1, {seq}, {entry})"


def _floor_tables(engine: Engine) -> None:
    with engine.begin() as conn:
        for statement in FLOOR_TABLES:
            conn.execute(text(statement))
        conn.execute(text("DELETE FROM bench_floor_state"))
        conn.execute(text("DELETE FROM bench_floor_history"))
        conn.execute(text("INSERT INTO bench_floor_state (id, state) VALUES (1, '')"))


def floor_engine(engine: Engine, payload: dict[str, str], seqs: range) -> list[float]:
    """One UPDATE + one INSERT per transaction through the same engine (pool, events, BEGIN)."""
    timings = []
    for seq in seqs:
        start = time.perf_counter()
        with engine.begin() as conn:
            conn.execute(text(UPDATE.format(state=":state")), {"state": payload["state"]})
            conn.execute(text(INSERT.format(seq=":seq", entry=":entry")), {"seq": seq, "entry": payload["entry"]})
        timings.append(time.perf_counter() - start)
    return timings


def floor_driver(engine: Engine, payload: dict[str, str], seqs: range) -> list[float]:
    """The same two statements on one DBAPI connection held open: the cost of durability itself."""
    sqlite = engine.dialect.name == "sqlite"
    mark = "?" if sqlite else "%s"
    conn = engine.raw_connection()  # the driver's connection, configured by the engine's connect events
    timings = []
    try:
        cursor = conn.cursor()
        for seq in seqs:
            start = time.perf_counter()
            if sqlite:
                cursor.execute("BEGIN IMMEDIATE")
            cursor.execute(UPDATE.format(state=mark), (payload["state"],))
            cursor.execute(INSERT.format(seq=mark, entry=mark), (seq, payload["entry"]))
            if sqlite:
                cursor.execute("COMMIT")
            else:
                conn.commit()
            timings.append(time.perf_counter() - start)
        cursor.close()
    finally:
        conn.close()
    return timings


def goals(backends: dict[str, Any]) -> dict[str, Any]:
    """The goals, judged on each backend's longest runs."""
    out: dict[str, Any] = {}
    for name, data in backends.items():
        longest = data["longest"]["steps"]
        step = data["sizes"][str(longest)]["step"]["median_ms"]
        out[name] = {
            "steps": longest,
            "per_step_ms": step,
            "under_1ms": step <= 1.0,
            "over_driver_floor": ratio(step, data["floor_driver"]["median_ms"]),
            "over_engine_floor": ratio(step, data["floor_engine"]["median_ms"]),
            "last_over_first": data["longest"]["last_over_first"],
        }
        out[name]["within_3x_floor"] = out[name]["over_driver_floor"] <= 3
        out[name]["flat"] = data["longest"]["last_over_first"] <= 1.2
    return out


LABELS = {"sqlite": "SQLite file (Signoff's engine)", "postgresql": "PostgreSQL",
          "sqlite_pooled": "SQLite file, pooled engine (experiment)"}


def markdown(result: dict[str, Any]) -> str:
    backends, plan = result["backends"], result["plan"]
    rows = []
    for name, data in backends.items():
        for steps, size in data["sizes"].items():
            step = size["step"]
            rows.append([LABELS[name], steps, plan["repeats"][int(steps)], ms(step["median_ms"]),
                         ms(step["min_ms"]), ms(step["max_ms"]), ms(size["run_mean_per_step"]["median_ms"])])
    parts = ["Per step (time between consecutive policy calls: tool, checkpoint commit, next prompt), ms:", "",
             report.table(["backend", "steps per run", "runs", "median", "min", "max", "run wall time / steps"],
                          rows), "", "Floor and flatness:", ""]
    rows = []
    for name, data in backends.items():
        longest, goal = data["longest"], result["goals"][name]
        rows.append([LABELS[name], ms(data["floor_driver"]["median_ms"]), ms(data["floor_engine"]["median_ms"]),
                     times(goal["over_driver_floor"]), times(goal["over_engine_floor"]),
                     f"{ms(longest['first_median_ms'])} → {ms(longest['last_median_ms'])}",
                     times(longest["last_over_first"]),
                     f"{ms(longest['history_deepcopy_ms'])} ({longest['history_entries']} entries)"])
    parts.append(report.table(
        ["backend", "floor: driver, open connection", "floor: through the engine", "step / driver floor",
         "step / engine floor", f"first {plan['edge']} → last {plan['edge']} steps of the longest run (medians)",
         "last / first", "deepcopy of the longest run's history"], rows))
    payload = next(iter(backends.values()))["payload_bytes"]
    parts += ["", f"Floor payload: one UPDATE of a {payload['state']}-byte state row and one INSERT of a "
              f"{payload['history']}-byte history row, committed (SQLite: WAL, synchronous=FULL, "
              "BEGIN IMMEDIATE; PostgreSQL: fsync and synchronous_commit on).", "", "Goals:", ""]
    goal_rows = []
    for name, goal in result["goals"].items():
        goal_rows.append([LABELS[name], f"{ms(goal['per_step_ms'])} ms at {goal['steps']} steps",
                          report.verdict(goal["under_1ms"]) if name.startswith("sqlite") else "n/a",
                          f"{times(goal['over_driver_floor'])} {report.verdict(goal['within_3x_floor'])}",
                          f"{times(goal['last_over_first'])} {report.verdict(goal['flat'])}"])
    parts.append(report.table(["backend", "median step, longest runs", "≤ 1 ms (SQLite)",
                               "≤ 3x floor", "last/first ≤ 1.2"], goal_rows))
    return "\n".join(parts)


def _missing(run_id: str) -> Any:
    raise AssertionError(f"run {run_id} vanished")
