"""Benchmark: several replicas on one PostgreSQL, working one batch of runs together.

1 and then 3 replica processes (`python -m bench.replicas --replica ...`), each with the real
`Runner` on `SqlStore(make_engine(url))` and the benchmark workload, share a fixed batch of runs
in one schema: every run is started, driven to its approval (one lookup, then `notify` asks),
approved by a person other than its requester, and executed to its end. Each replica starts its
share of the runs; the approvals are decided by whichever replica picks them up from the pending
list, and runs nobody holds are continued from `runs_needing_work`, as a server's recovery sweep
does. Measured: the wall time from the first start to the last run done; per approved run, the SQL
statements, commits and round trips each replica's engine saw. Checked afterwards from the
database: every run done, one ledger row per side effect, succeeded; every `execute` that found
the run held or ended by another replica (a lease conflict), and whether any changed an outcome.

    python -m bench.replicas [--quick]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from bench import pg, report
from bench.stats import times

FULL: dict[str, Any] = {"runs": 300, "trials": [1, 3, 3, 1]}
QUICK: dict[str, Any] = {"runs": 20, "trials": [1, 3]}
STEPS = 2
"""Each run: step 1 looks something up, step 2 proposes `notify`, which waits for approval."""
PENDING_LOOKED_AT = 20
"""How many of the newest pending approvals a replica chooses from (at random, so replicas spread out)."""
IDLE_S = 0.005
TRIAL_TIMEOUT_S = 600
PHASES = ("start", "drive", "decide", "finish", "continue", "poll")
"""Where a replica's statements go: `start_run`; `execute` to the approval; `decide`; `execute` after
its decision; `execute` of a run found in `runs_needing_work`; reading what to do next."""
WORK = PHASES[:-1]


# -- inside one replica process ----------------------------------------------------------------------


class Counts:
    """Statements, transactions and round trips an engine sees, by phase of the replica's loop.

    Round trips: each statement, BEGIN (psycopg sends it on its own before a transaction's first
    statement), COMMIT and ROLLBACK, and the ping `pool_pre_ping` makes at each checkout of a pooled
    connection (a raw cursor, which the statement events do not see).
    """

    def __init__(self, engine: Any) -> None:
        from sqlalchemy import event

        self.phase = "poll"
        self.by_phase: dict[str, Counter[str]] = {phase: Counter() for phase in PHASES}
        self.seconds: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        for name in ("before_cursor_execute", "begin", "commit", "rollback"):
            event.listen(engine, name, self._counter(name))
        event.listen(engine, "connect", self._counter("connect"))
        event.listen(engine, "checkout", self._counter("checkout"))

    def _counter(self, name: str) -> Callable[..., None]:
        key = {"before_cursor_execute": "statements", "begin": "begins", "commit": "commits",
               "rollback": "rollbacks", "connect": "connects", "checkout": "checkouts"}[name]

        def count(*_: Any, **__: Any) -> None:
            self.by_phase[self.phase][key] += 1

        return count

    @contextmanager
    def during(self, phase: str) -> Iterator[None]:
        before, self.phase = self.phase, phase
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] += time.perf_counter() - start
            self.phase = before

    def as_json(self) -> dict[str, Any]:
        return {"by_phase": {phase: dict(c) for phase, c in self.by_phase.items()},
                "seconds": {phase: round(s, 4) for phase, s in self.seconds.items()}}


def approve_and_finish(runner: Any, approval: Any, user: str, counts: Counts) -> tuple[Any, str | None]:
    """Signoff's approval path as a click drives it: record the decision; if it won, drive the run
    to its end. Every Signoff approval of this benchmark goes through here, so a change to how the
    runtime is driven after a decision is made in one place. (outcome, status of `execute`, or None
    when the decision did not win or another worker holds the run.)"""
    from signoff.runtime.records import Decided

    with counts.during("decide"):
        outcome = runner.decide(approval.approval_id, approval.digest, user, True, drive=True)
    if not isinstance(outcome, Decided):
        return outcome, None
    with counts.during("finish"):
        return outcome, runner.execute(approval.run_id)


def replica(url: str, index: int, share: int, total: int, seed: int, go: IO[str], out: IO[str]) -> dict[str, Any]:
    """One replica's loop: start its share of runs (each driven to its approval), decide pending
    approvals it picks, continue runs nobody holds, until all `total` runs are done."""
    from bench.workload import GOAL, SignoffPolicy, signoff_tools
    from signoff.runtime.adapters.db import make_engine
    from signoff.runtime.adapters.sql import SqlStore
    from signoff.runtime.budget import Budget
    from signoff.runtime.records import Decided
    from signoff.runtime.runner import Runner
    from signoff.runtime.runner_config import RunnerConfig

    engine = make_engine(url)
    counts = Counts(engine)
    sent: list[dict[str, Any]] = []
    policy = SignoffPolicy(STEPS, pause=True)
    runner = Runner(SqlStore(engine), signoff_tools(sent), lambda spec: policy,
                    RunnerConfig(budget=Budget(max_steps=STEPS + 2)))
    store, rng = runner.store, random.Random(seed)
    requester, approver = f"UREQ{index:02d}", f"UAPPROVER{index:02d}"
    conflicts: list[dict[str, str]] = []
    executed: list[str] = []  # runs an `execute` of this replica moved on (to the approval or to the end)
    finished: list[str] = []
    tally: Counter[str] = Counter()
    out.write("ready\n")
    out.flush()
    go.readline()
    first_start, last_done = time.time(), None

    def ran(run_id: str, status: str | None, phase: str) -> None:
        nonlocal last_done
        if status is None:
            conflicts.append({"run_id": run_id, "phase": phase})
            return
        executed.append(run_id)
        if status == "done":
            finished.append(run_id)
            last_done = time.time()

    started = 0
    while True:
        busy = False
        if started < share:
            with counts.during("start"):
                run = runner.start_run(GOAL, requester, drive=True)
            started += 1
            with counts.during("drive"):
                status = runner.execute(run.run_id)
            ran(run.run_id, status, "drive")
            busy = True
        with counts.during("poll"):
            pending = store.list_approvals(status="pending", limit=PENDING_LOOKED_AT)
        if pending:
            approval = rng.choice(pending)
            outcome, status = approve_and_finish(runner, approval, approver, counts)
            tally[type(outcome).__name__] += 1
            if isinstance(outcome, Decided):  # this replica won the decision and drove the run on
                ran(approval.run_id, status, "finish")
            busy = True
        if busy:
            continue
        with counts.during("poll"):
            waiting = store.runs_needing_work(limit=PENDING_LOOKED_AT)
        for run_id in waiting:
            with counts.during("continue"):
                status = runner.execute(run_id)
            ran(run_id, status, "continue")
        if waiting:
            continue
        with counts.during("poll"):
            done = store.count_runs().get("done", 0)
        if done >= total:
            break
        time.sleep(IDLE_S)
    engine.dispose()
    return {"index": index, "share": share, "started": started, "decisions": dict(tally), "conflicts": conflicts,
            "executed": executed, "finished": finished, "sent_keys": [entry["key"] for entry in sent], "first_start": first_start,
            "last_done": last_done, "counts": counts.as_json()}


# -- the benchmark, in the parent process ------------------------------------------------------------


def run(quick: bool = False, postgres_url: str | None = None) -> dict[str, Any]:
    if postgres_url is None:
        return {"skipped": "PostgreSQL is not reachable"}
    plan = QUICK if quick else FULL
    trials = [trial(postgres_url, replicas, plan["runs"], seed) for seed, replicas in enumerate(plan["trials"])]
    by_count: dict[str, list[dict[str, Any]]] = {}
    for result in trials:
        by_count.setdefault(str(result["replicas"]), []).append(result)
    summary = {count: summarise(results, plan["runs"]) for count, results in by_count.items()}
    return {"plan": dict(plan), "trials": trials, "replicas": summary, "goals": goals(summary)}


def shares(total: int, replicas: int) -> list[int]:
    return [total // replicas + (1 if i < total % replicas else 0) for i in range(replicas)]


def trial(postgres_url: str, replicas: int, total: int, seed: int) -> dict[str, Any]:
    """`replicas` processes on a fresh schema work `total` runs; their reports and the database's checks."""
    from signoff.runtime.adapters.db import make_engine, upgrade

    with pg.dedicated_schema(postgres_url, "bench_replicas") as url, tempfile.TemporaryDirectory(
            prefix="signoff-replicas-") as tmp:
        engine = make_engine(url)
        try:
            upgrade(engine)
        finally:
            engine.dispose()
        reports = spawn(url, replicas, total, seed, Path(tmp))
        checks = verify(url, reports, total)
    done_at = [r["last_done"] for r in reports if r["last_done"] is not None]
    if not done_at:
        raise RuntimeError(f"no replica finished a run: {checks}")
    wall = max(done_at) - min(r["first_start"] for r in reports)
    return {"replicas": replicas, "runs": total, "wall_seconds": round(wall, 3), "reports": reports, "checks": checks}


def spawn(url: str, replicas: int, total: int, seed: int, tmp: Path) -> list[dict[str, Any]]:
    """Start the replica processes, let them all begin at once, and collect what each reports."""
    processes, logs = [], []
    for index, share in enumerate(shares(total, replicas)):
        log = (tmp / f"replica-{index}.log").open("w+")
        logs.append(log)
        command = [sys.executable, "-m", "bench.replicas", "--replica", "--url", url, "--index", str(index),
                   "--share", str(share), "--total", str(total), "--seed", str(seed * 100 + index)]
        processes.append(subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                          text=True, cwd=report.ROOT))
    try:
        for process, log in zip(processes, logs, strict=True):
            assert process.stdout is not None
            if process.stdout.readline().strip() != "ready":
                raise RuntimeError(f"replica failed to start:\n{_tail(log)}")
        for process in processes:  # every replica is ready: release them together
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        reports = []
        deadline = time.monotonic() + TRIAL_TIMEOUT_S
        for process, log in zip(processes, logs, strict=True):
            out, _ = process.communicate(timeout=max(1.0, deadline - time.monotonic()))
            if process.returncode != 0:
                raise RuntimeError(f"replica exited with {process.returncode}:\n{_tail(log)}")
            reports.append(json.loads(out.strip().splitlines()[-1]))
        return reports
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
        for log in logs:
            log.close()


def _tail(log: IO[str]) -> str:
    log.flush()
    log.seek(0)
    return log.read()[-4000:]


def verify(url: str, reports: list[dict[str, Any]], total: int) -> dict[str, Any]:
    """What the database and the replicas' side effects say: every run done, each side effect once,
    and what became of every run an `execute` found held or ended by another replica."""
    from sqlalchemy import func, select

    from signoff.runtime.adapters.db import make_engine
    from signoff.runtime.adapters.tables import approvals, runs, tool_executions

    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            statuses: dict[str, int] = dict(conn.execute(select(runs.c.status, func.count()).group_by(runs.c.status)).all())
            run_status = dict(conn.execute(select(runs.c.run_id, runs.c.status)).all())
            ledger = conn.execute(select(tool_executions.c.run_id, tool_executions.c.key, tool_executions.c.status)
                                  .where(tool_executions.c.tool == "notify")).all()
            approval_statuses: dict[str, int] = dict(conn.execute(select(approvals.c.status, func.count())
                                                  .group_by(approvals.c.status)).all())
    finally:
        engine.dispose()
    rows_per_run = Counter(row.run_id for row in ledger)
    succeeded = Counter(row.run_id for row in ledger if row.status == "succeeded")
    effects = Counter(key for r in reports for key in r["sent_keys"])
    effects_per_run = Counter(key.rsplit(":", 1)[0] for key in effects.elements())
    finished_by: dict[str, list[int]] = {}
    executed_by: dict[str, set[int]] = {}
    for r in reports:
        for run_id in r["finished"]:
            finished_by.setdefault(run_id, []).append(r["index"])
        for run_id in r["executed"]:
            executed_by.setdefault(run_id, set()).add(r["index"])

    def outcome_ok(run_id: str) -> bool:
        return (run_status.get(run_id) == "done" and rows_per_run[run_id] == 1 and succeeded[run_id] == 1
                and effects_per_run[run_id] == 1)

    conflicts = [{**c, "replica": r["index"]} for r in reports for c in r["conflicts"]]
    continued = [c for c in conflicts if executed_by.get(c["run_id"], set()) - {c["replica"]}]
    changed = sorted({c["run_id"] for c in conflicts if not outcome_ok(c["run_id"])})
    return {
        "runs": len(run_status), "statuses": statuses, "all_done": statuses.get("done", 0) == total == len(run_status),
        "approval_statuses": approval_statuses,
        "ledger_rows": len(ledger), "one_succeeded_row_per_run": all(
            rows_per_run[run_id] == 1 and succeeded[run_id] == 1 for run_id in run_status) and len(ledger) == total,
        "side_effects": sum(effects.values()), "side_effect_once_per_run": all(
            effects_per_run[run_id] == 1 for run_id in run_status) and max(effects.values(), default=0) == 1,
        "finished_once": sum(1 for ids in finished_by.values() if len(ids) == 1),
        "lease_conflicts": len(conflicts), "conflicts_continued_by_another": len(continued),
        "conflicts_by_phase": dict(Counter(c["phase"] for c in conflicts)),
        "conflicts_changing_an_outcome": len(changed), "changed_runs": changed[:20],
        "decision_races_lost": sum(r["decisions"].get("AlreadyDecided", 0) for r in reports),
    }


def summarise(results: list[dict[str, Any]], total: int) -> dict[str, Any]:
    """Medians over the trials of one replica count; statements and round trips per approved run."""
    per_run: dict[str, list[float]] = {}
    phases: dict[str, dict[str, list[float]]] = {}
    for result in results:
        sums: Counter[str] = Counter()
        for phase in PHASES:
            phase_sums: Counter[str] = Counter()
            for r in result["reports"]:
                phase_sums.update(r["counts"]["by_phase"].get(phase, {}))
            seconds = sum(r["counts"]["seconds"].get(phase, 0.0) for r in result["reports"])
            figures = _figures(phase_sums)
            figures["ms"] = seconds * 1000
            for key, value in figures.items():
                phases.setdefault(phase, {}).setdefault(key, []).append(value / total)
            sums.update({f"{k}_{'work' if phase in WORK else 'poll'}": v for k, v in figures.items() if k != "ms"})
        for key in ("statements", "commits", "round_trips"):
            work, poll = sums[f"{key}_work"], sums[f"{key}_poll"]
            per_run.setdefault(key, []).append(work / total)
            per_run.setdefault(f"{key}_with_polling", []).append((work + poll) / total)
    checks = [result["checks"] for result in results]
    return {
        "trials": len(results),
        "wall_seconds": round(statistics.median(r["wall_seconds"] for r in results), 3),
        "wall_seconds_each": [r["wall_seconds"] for r in results],
        "runs_per_second": round(total / statistics.median(r["wall_seconds"] for r in results), 2),
        "per_run": {key: round(statistics.median(values), 2) for key, values in per_run.items()},
        "per_run_by_phase": {phase: {key: round(statistics.median(v), 3) for key, v in figures.items()}
                             for phase, figures in phases.items()},
        "all_done": all(c["all_done"] for c in checks),
        "one_succeeded_row_per_run": all(c["one_succeeded_row_per_run"] for c in checks),
        "side_effect_once_per_run": all(c["side_effect_once_per_run"] for c in checks),
        "lease_conflicts": sum(c["lease_conflicts"] for c in checks),
        "conflicts_by_phase": dict(sum((Counter(c["conflicts_by_phase"]) for c in checks), Counter())),
        "conflicts_continued_by_another": sum(c["conflicts_continued_by_another"] for c in checks),
        "conflicts_changing_an_outcome": sum(c["conflicts_changing_an_outcome"] for c in checks),
        "decision_races_lost": sum(c["decision_races_lost"] for c in checks),
    }


def _figures(c: Counter[str]) -> dict[str, float]:
    pings = max(0, c["checkouts"] - c["connects"])  # a fresh connection is not pinged
    return {"statements": c["statements"], "commits": c["commits"],
            "round_trips": c["statements"] + c["begins"] + c["commits"] + c["rollbacks"] + pings}


def goals(summary: dict[str, Any]) -> dict[str, Any]:
    """3 replicas no slower than 1, and no lease conflict that changed an outcome (with every run done
    and each side effect run once)."""
    one, three = summary.get("1"), summary.get("3")
    correct = [s["all_done"] and s["one_succeeded_row_per_run"] and s["side_effect_once_per_run"]
               and s["conflicts_changing_an_outcome"] == 0 for s in summary.values()]
    speed = None if one is None or three is None else round(three["wall_seconds"] / one["wall_seconds"], 3)
    return {"three_over_one": speed, "no_slower": None if speed is None else speed <= 1.0,
            "no_outcome_changed": all(correct) if correct else None}


LABELS = {"start": "`start_run`", "drive": "`execute` to the approval", "decide": "`decide`",
          "finish": "`execute` after the decision, to done", "continue": "`execute` of a run found waiting",
          "poll": "reading what to do next (pending approvals, waiting runs, the count of done runs)"}


def markdown(result: dict[str, Any]) -> str:
    if "skipped" in result:
        return f"Not measured: {result['skipped']}."
    summary, runs = result["replicas"], result["plan"]["runs"]
    rows = []
    for count, s in summary.items():
        rows.append([count, s["trials"], ", ".join(f"{w:.2f}" for w in s["wall_seconds_each"]),
                     f"{s['wall_seconds']:.2f}", s["runs_per_second"], s["decision_races_lost"], _conflicts(s),
                     s["conflicts_continued_by_another"], s["conflicts_changing_an_outcome"],
                     "yes" if s["all_done"] and s["one_succeeded_row_per_run"] and s["side_effect_once_per_run"]
                     else "**no**"])
    parts = [f"{runs} runs (start → one lookup → approval asked → approved by another person → `notify` → done) on "
             "one PostgreSQL schema, worked by replica processes together; trials alternate (1, 3, 3, 1 replicas), "
             "each on a fresh schema.", "",
             report.table(["replicas", "trials", "wall s, first start → last done, each trial", "median s", "runs/s",
                           "decisions lost to another replica", "lease conflicts", "of them continued by another "
                           "replica", "that changed an outcome", "all done, one succeeded ledger row and one side "
                           "effect per run"], rows), "",
             "Per approved run (all replicas' engines summed, divided by the runs; medians over trials):", ""]
    rows = [[count, s["per_run"]["statements"], s["per_run"]["commits"], s["per_run"]["round_trips"],
             s["per_run"]["statements_with_polling"], s["per_run"]["round_trips_with_polling"]]
            for count, s in summary.items()]
    parts += [report.table(["replicas", "SQL statements", "commits", "round trips", "statements with polling",
                            "round trips with polling"], rows), "",
              "Round trips: statements, BEGIN, COMMIT and ROLLBACK, and the ping of each pooled-connection checkout. "
              "By phase of a run (per run, medians over trials):", ""]
    rows = []
    for count, s in summary.items():
        for phase in PHASES:
            figures = s["per_run_by_phase"].get(phase)
            if figures:
                rows.append([count, LABELS[phase], figures["statements"], figures["commits"],
                             figures["round_trips"], f"{figures['ms']:.2f}"])
    parts += [report.table(["replicas", "phase", "statements", "commits", "round trips", "ms (summed over replicas)"],
                           rows), ""]
    g = result["goals"]
    parts += [report.table(["goal", "figure", "verdict"], [
        ["3 replicas no slower than 1", "–" if g["three_over_one"] is None else
         f"{times(g['three_over_one'])} the wall time of 1", report.verdict(g["no_slower"])],
        ["no lease conflict changes an outcome (every run done, one succeeded ledger row and one side effect each)",
         ", ".join(f"{count} replica(s): {s['conflicts_changing_an_outcome']} of {s['lease_conflicts']}"
                   for count, s in summary.items()), report.verdict(g["no_outcome_changed"])],
    ])]
    return "\n".join(parts)


CONFLICT_PHASES = {"drive": "driving a new run", "finish": "after winning the decision",
                   "continue": "continuing a waiting run"}


def _conflicts(s: dict[str, Any]) -> str:
    """The lease conflicts of all trials, with the phase each happened in."""
    phases = ", ".join(f"{n} {CONFLICT_PHASES[phase]}" for phase, n in sorted(s["conflicts_by_phase"].items()))
    return f"{s['lease_conflicts']} ({phases})" if phases else str(s["lease_conflicts"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.replicas", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a small batch: checks the script, not the speed")
    parser.add_argument("--replica", action="store_true", help="(internal) be one replica of a trial")
    parser.add_argument("--url")
    parser.add_argument("--index", type=int, default=0)
    parser.add_argument("--share", type=int, default=0)
    parser.add_argument("--total", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.replica:
        result = replica(args.url, args.index, args.share, args.total, args.seed, sys.stdin, sys.stdout)
        print(json.dumps(result))
        return 0
    url = pg.postgres_url()
    started = time.perf_counter()
    print(markdown(run(args.quick, url if pg.reachable(url) else None)))
    print(f"bench: replicas done in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
