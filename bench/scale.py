"""Benchmark 4: 10,000 runs paused on approvals in PostgreSQL.

One real run is driven to its approval by the Runner; its rows are then copied, with fresh ids,
keys and digests, into 10,000 (+ a sample) paused runs through the same tables. Measured: the
expiry sweep when nothing is due and over 10,000 stale approvals (with its query plan), the
queries behind `/signoff list` and App Home, and the memory of a `signoff serve` process.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, func, select, text, update

from bench import pg, report, serve_proc
from bench.stats import ms, summary
from bench.workload import GOAL, SignoffPolicy, signoff_tools
from signoff.runtime import approval_commands
from signoff.runtime.adapters.db import make_engine, upgrade
from signoff.runtime.adapters.sql import SqlStore
from signoff.runtime.adapters.tables import approvals, events, run_history, runs
from signoff.runtime.budget import Budget
from signoff.runtime.runner import Runner
from signoff.runtime.runner_config import RunnerConfig
from signoff.runtime.state import call_digest

FULL = {"runs": 10_000, "runner_sample": 100, "requesters": 100, "repeats": 20, "settle_s": 3.0}
QUICK = {"runs": 50, "runner_sample": 5, "requesters": 10, "repeats": 2, "settle_s": 0.3}
APPROVER = "UAPPROVER1"
CHUNK = 2_000


def run(quick: bool = False, postgres_url: str | None = None, serve: bool = True) -> dict[str, Any]:
    """`serve=False` leaves out the `signoff serve` memory readings (and the process they need)."""
    if postgres_url is None:
        return {"skipped": "PostgreSQL is not reachable"}
    plan = {**(QUICK if quick else FULL), "serve": serve}
    with pg.dedicated_schema(postgres_url, "bench_scale") as url:
        engine = make_engine(url)
        upgrade(engine)
        try:
            return measure(engine, url, plan)
        finally:
            engine.dispose()


class QuietNotifier:
    """A notifier whose Slack calls take no time: the sweep still records what each message shows,
    as a server's does, so its figure is Signoff's own cost per approval without Slack's."""

    def run_started(self, run: Any) -> None:
        return None

    def approval_requested(self, run: Any, approval: Any, card: Any) -> None:
        return None

    def approval_decided(self, run: Any, approval: Any, card: Any) -> None:
        return None

    def approval_expired(self, run: Any, approval: Any, card: Any) -> None:
        return None

    def tool_result(self, run: Any, entry: Any, grant: Any) -> None:
        return None

    def run_finished(self, run: Any) -> None:
        return None

    def run_stopped(self, run: Any) -> None:
        return None


def measure(engine: Engine, url: str, plan: dict[str, Any]) -> dict[str, Any]:
    store = SqlStore(engine)
    runner = Runner(store, signoff_tools(), lambda spec: SignoffPolicy(3, pause=True),
                    RunnerConfig(budget=Budget(max_steps=8)), notifier=QuietNotifier())
    result: dict[str, Any] = {"plan": plan}
    server = serve_proc.start(url) if plan["serve"] and serve_proc.available() else None
    try:
        if server is not None:
            result["rss_idle"] = server.settle_and_measure(plan["settle_s"])
        template = make_template(runner)
        total = plan["runs"] + plan["runner_sample"]
        started = time.perf_counter()
        copy_runs(engine, template, total, plan["requesters"])
        result["seed_seconds"] = round(time.perf_counter() - started, 2)
        with engine.begin() as conn:
            conn.execute(text("ANALYZE"))
        result["rows"] = table_sizes(engine)
        result["live"] = live_queries(store, runner, engine, plan)
        if server is not None:
            result["rss_loaded"] = server.settle_and_measure(plan["settle_s"])
            server.stop()  # its own sweeps would race the ones measured below
            server = None
        result["stale"] = stale_sweeps(store, runner, engine, plan)
    finally:
        if server is not None:
            server.stop()
    return result


def make_template(runner: Runner) -> dict[str, Any]:
    """Drive one real run to its approval and read back every row it wrote."""
    run = runner.start_run(GOAL, "UREQ0000", {"channel": "CBENCH", "ts": "1.000"})
    assert runner.execute(run.run_id) == "awaiting_approval"
    store = runner.store
    with store.engine.connect() as conn:
        rows = {
            "run": dict(conn.execute(select(runs).where(runs.c.run_id == run.run_id)).one()._mapping),
            "history": [dict(r._mapping) for r in conn.execute(
                select(run_history).where(run_history.c.run_id == run.run_id))],
            "events": [dict(r._mapping) for r in conn.execute(select(events).where(events.c.run_id == run.run_id))],
            "approval": dict(conn.execute(select(approvals).where(approvals.c.run_id == run.run_id)).one()._mapping),
        }
    return rows


def copy_runs(engine: Engine, template: dict[str, Any], count: int, requesters: int) -> None:
    """`count` paused runs like the template, each with its own ids, key, digest and requester."""
    old = template["run"]["run_id"]
    now = datetime.now(UTC)
    approval = template["approval"]
    args = json.loads(approval["args"])
    for first in range(0, count, CHUNK):
        batch: dict[str, list[dict[str, Any]]] = {"runs": [], "history": [], "events": [], "approvals": []}
        for i in range(first, min(first + CHUNK, count)):
            run_id, at = f"run-b{i:09d}", now - timedelta(seconds=count - i)
            requester = f"UREQ{i % requesters:04d}"
            key = f"{run_id}:{approval['step']}"
            batch["runs"].append({**template["run"], "run_id": run_id, "requester": requester,
                                  "state": template["run"]["state"].replace(old, run_id), "pending_key": key,
                                  "created_at": at, "updated_at": at, "lease_owner": None,
                                  "lease_expires_at": None})
            batch["history"] += [{**h, "run_id": run_id} for h in template["history"]]
            batch["events"] += [{**{k: v for k, v in e.items() if k != "id"}, "run_id": run_id,
                                 "payload": e["payload"].replace(old, run_id)} for e in template["events"]]
            batch["approvals"].append({**approval, "approval_id": f"apr_b{i:09d}", "run_id": run_id, "key": key,
                                       "digest": call_digest(approval["tool"], args, key), "requester": requester,
                                       "requested_at": at, "expires_at": now + timedelta(hours=2),
                                       "message": json.dumps({"channel": "CBENCH", "ts": f"{i}.000"})})
        with engine.begin() as conn:
            for table, rows in ((runs, batch["runs"]), (run_history, batch["history"]),
                                (events, batch["events"]), (approvals, batch["approvals"])):
                conn.execute(table.insert(), rows)


def table_sizes(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {t.name: conn.execute(select(func.count()).select_from(t)).scalar_one()
                for t in (runs, run_history, events, approvals)}


def timed(fn: Any, repeats: int) -> tuple[dict[str, Any], Any]:
    timings, value = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        value = fn()
        timings.append(time.perf_counter() - start)
    return summary(timings), value


def live_queries(store: SqlStore, runner: Runner, engine: Engine, plan: dict[str, Any]) -> dict[str, Any]:
    """With every run paused and nothing due: the sweep, /signoff list and App Home's queries."""
    repeats = plan["repeats"]
    sweep, expired = timed(lambda: approval_commands.expire_due(store), repeats)
    assert expired == []
    list_runs, found = timed(lambda: runner.runs_for("UREQ0001"), repeats)
    waiting, approvable = timed(lambda: runner.approvals_for(APPROVER), repeats)
    return {
        "empty_sweep": sweep, "runs_for": {**list_runs, "rows": len(found)},
        "approvals_for": {**waiting, "rows": len(approvable)},
        "plans": {
            "sweep": explain(engine, sweep_statement(store)),
            "approvals_for": explain(engine, select(approvals).where(approvals.c.status == "pending")
                                     .order_by(approvals.c.requested_at.desc()).limit(60)),
            "runs_for": explain(engine, select(runs).where(runs.c.requester == "UREQ0001")
                                .order_by(runs.c.created_at.desc()).limit(10)),
        },
    }


def sweep_statement(store: SqlStore) -> Any:
    """The query by which the expiry sweep finds what is due (`SqlApprovalUnit.due(Due.EXPIRY)`)."""
    now = store.now()
    return (select(approvals).where(approvals.c.status == "pending", approvals.c.expires_at <= now)
            .order_by(approvals.c.expires_at))


def explain(engine: Engine, statement: Any) -> str:
    """PostgreSQL's plan for `statement` (EXPLAIN only: nothing is executed)."""
    compiled = statement.compile(dialect=engine.dialect)
    with engine.connect() as conn:
        rows = conn.exec_driver_sql("EXPLAIN " + str(compiled), compiled.params).scalars().all()
    return "\n".join(rows)


def stale_sweeps(store: SqlStore, runner: Runner, engine: Engine, plan: dict[str, Any]) -> dict[str, Any]:
    """Make approvals overdue, then sweep: the runner's sweep on a sample, the store's on all the rest."""
    past = datetime.now(UTC) - timedelta(minutes=1)
    sample = plan["runner_sample"]
    sample_ids = [f"apr_b{i:09d}" for i in range(plan["runs"], plan["runs"] + sample)]
    with engine.begin() as conn:
        conn.execute(update(approvals).where(approvals.c.approval_id.in_(sample_ids)).values(expires_at=past))
    handed: list[str] = []
    start = time.perf_counter()
    ended = runner.expire_due(end_run=handed.append)  # as the scheduler calls it: runs go to the pool
    runner_seconds = time.perf_counter() - start
    assert len(ended) == sample, len(ended)
    start = time.perf_counter()
    for run_id in handed:  # what the worker pool then does, one run at a time
        runner.execute(run_id)
    ending_seconds = time.perf_counter() - start
    with engine.begin() as conn:
        conn.execute(update(approvals).where(approvals.c.status == "pending").values(expires_at=past))
        conn.execute(text("ANALYZE approvals"))
    plan_text = explain(engine, sweep_statement(store))
    start = time.perf_counter()
    expired = approval_commands.expire_due(store)
    store_seconds = time.perf_counter() - start
    assert len(expired) == plan["runs"] + 1, len(expired)  # + the template run
    with engine.connect() as conn:
        ended_runs = conn.execute(select(func.count()).select_from(runs).where(runs.c.status == "expired")).scalar_one()
    return {
        "runner_expire_due": {"approvals": sample, "seconds": round(runner_seconds, 3),
                              "per_approval_ms": round(runner_seconds / sample * 1000, 3),
                              "runs_ended": ended_runs,
                              "ending_per_run_ms": round(ending_seconds / sample * 1000, 3)},
        "store_expire_due": {"approvals": len(expired), "seconds": round(store_seconds, 3),
                             "per_approval_ms": round(store_seconds / len(expired) * 1000, 4)},
        "plan": plan_text,
    }


def markdown(result: dict[str, Any]) -> str:
    if "skipped" in result:
        return f"Not measured: {result['skipped']}."
    live, stale, rows = result["live"], result["stale"], result["rows"]
    count = result["plan"]["runs"]
    parts = [f"Seeded {rows['runs']:,} paused runs ({rows['approvals']:,} approvals, {rows['run_history']:,} "
             f"history rows, {rows['events']:,} events) in {result['seed_seconds']} s.", "",
             report.table(["operation (all runs paused, nothing due)", "median ms", "min", "max", "rows"], [
                 ["expiry sweep, nothing due (`approval_commands.expire_due` on SQL)", *_cells(live["empty_sweep"]), 0],
                 ["`/signoff list`: `runner.runs_for(user)`", *_cells(live["runs_for"]), live["runs_for"]["rows"]],
                 ["`/signoff list` and App Home: `runner.approvals_for(user)`", *_cells(live["approvals_for"]),
                  live["approvals_for"]["rows"]],
             ]), ""]
    runner_sweep, store_sweep = stale["runner_expire_due"], stale["store_expire_due"]
    parts += [report.table(["stale sweep", "approvals", "seconds", "ms per approval"], [
        ["`approval_commands.expire_due(store)` on SQL (runs held, one SELECT, one UPDATE, audit events in two statements)",
         f"{store_sweep['approvals']:,}", store_sweep["seconds"], store_sweep["per_approval_ms"]],
        ["`Runner.expire_due()` as the scheduler calls it (also records each message as updated; Slack's own time not counted)", runner_sweep["approvals"],
         runner_sweep["seconds"], runner_sweep["per_approval_ms"]],
        ["then ending each run as `expired` (the worker pool's `execute`, one at a time)",
         runner_sweep["approvals"], round(runner_sweep.get("ending_per_run_ms", 0) * runner_sweep["approvals"] / 1000, 3),
         runner_sweep.get("ending_per_run_ms", "–")],
    ]), "", f"At that rate the scheduler's sweep over {count:,} stale approvals takes about "
        f"{runner_sweep['per_approval_ms'] * count / 1000:.0f} s, and the worker pool ends the runs in about "
        f"{runner_sweep.get('ending_per_run_ms', 0) * count / 1000:.0f} s of one worker's time.", ""]
    if "rss_idle" in result:
        idle, loaded = result["rss_idle"], result["rss_loaded"]
        parts += [report.table(["`signoff serve` resident memory (server process tree)", "RSS MiB"], [
            ["idle, empty database", f"{idle['rss_mib']:.1f}"],
            [f"{count:,} paused runs, after sweeps, `/signoff list` and App Home", f"{loaded['rss_mib']:.1f}"],
        ]), ""]
    parts += ["Plan of the expiry sweep with nothing due (EXPLAIN):", "", "```", live["plans"]["sweep"], "```", "",
              f"Plan of the expiry sweep with {count:,} stale approvals (EXPLAIN):", "", "```", stale["plan"], "```",
              "", "Plan of the pending-approvals query behind `approvals_for` (EXPLAIN):", "", "```",
              live["plans"]["approvals_for"], "```", "", "Plan of `runs_for` (EXPLAIN):", "", "```",
              live["plans"]["runs_for"], "```"]
    return "\n".join(parts)


def _cells(stats: dict[str, Any]) -> list[str]:
    return [ms(stats["median_ms"]), ms(stats["min_ms"]), ms(stats["max_ms"])]


