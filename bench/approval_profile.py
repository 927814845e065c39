"""Benchmark: where an approval's round trip spends its time, as a profile.

The approval of benchmark 2 (decision → the side effect run once → the final answer saved, the real
`Runner` on a SQLite file) run many times under `cProfile`, in a warm process at two history lengths
and once in a fresh process, with each function's own time added up by layer: SQLAlchemy's Python,
the SQLite driver (its C calls: statements and commits with their syncs), Signoff's store adapters,
the rest of Signoff (the loop, runner, worker, audit), JSON, pydantic, and waits on threads. A
profiler slows Python code more than C, so the shares, not the milliseconds, are the figures.

`python -m bench.approval_profile [--quick]` prints the table; `bench/run --only profile` saves it.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench import report

FULL = {"sizes": [10, 1000], "approvals": [60, 6], "fresh": 3}
QUICK = {"sizes": [3, 20], "approvals": [3, 2], "fresh": 1}
LAYERS = ("SQLAlchemy (Python)", "SQLAlchemy compiling statements (compiler, visitors)", "SQLite driver (C: statements, commits)",
          "Signoff: store adapters", "Signoff: loop, runner, worker, audit", "JSON", "pydantic",
          "threads: starting, waiting, handing over", "everything else")


def layer(filename: str, function: str) -> str:
    """The layer a profiled function belongs to, by where it is defined."""
    if "sqlalchemy" in filename:
        return LAYERS[1] if filename.endswith(("compiler.py", "visitors.py")) else LAYERS[0]
    if filename == "~" and ("sqlite3" in function or function.startswith("<method 'commit'")):
        return LAYERS[2]
    if "/runtime/adapters/" in filename:
        return LAYERS[3]
    if "/signoff/" in filename or "/runtime/" in filename:
        return LAYERS[4]
    if "/json/" in filename:
        return LAYERS[5]
    if "pydantic" in filename:
        return LAYERS[6]
    if "threading.py" in filename or "queue.py" in filename or "_thread" in function or "acquire" in function:
        return LAYERS[7]
    return LAYERS[8]


def shares(profile: pstats.Stats) -> dict[str, float]:
    """Each layer's share of the profiled time, from every function's own time. A built-in (a
    `dict.get`, an `isinstance`) is its callers' work: its time goes to their layers, in proportion
    to what each caller spent in it."""
    by_layer: Counter[str] = Counter()
    for (filename, _, function), (_, _, own, _, callers) in profile.stats.items():  # type: ignore[attr-defined]
        named = layer(filename, function)
        spent = {caller: timing[3] for caller, timing in callers.items()}
        if filename != "~" or named == LAYERS[2] or not sum(spent.values()):
            by_layer[named] += own
            continue
        for (caller_file, _, caller_function), time_in in spent.items():
            by_layer[layer(caller_file, caller_function)] += own * time_in / sum(spent.values())
    total = sum(by_layer.values()) or 1.0
    return {name: round(100 * by_layer[name] / total, 1) for name in LAYERS}


def warm(steps: int, approvals: int, folder: Path) -> dict[str, Any]:
    """`approvals` runs of `steps` steps approved one after another in this process, profiled."""
    from bench.peer_loop import SignoffLoop

    loop = SignoffLoop(folder / f"warm-{steps}.db")
    tickets = [loop.ticket(loop.create(steps)) for _ in range(approvals + 1)]
    loop.finish(tickets[0])  # the first approval compiles the statements: a fresh process's cost, below
    counts = loop.count_statements(tickets[1])
    profiler = cProfile.Profile()
    began = time.perf_counter()
    profiler.enable()
    for ticket in tickets[2:]:
        loop.finish(ticket)
    profiler.disable()
    profiled_ms = (time.perf_counter() - began) * 1000 / max(approvals - 1, 1)
    return {"steps": steps, "approvals": approvals - 1, "profiled_ms_per_approval": round(profiled_ms, 2),
            "database": counts, "shares": shares(pstats.Stats(profiler))}


def fresh(samples: int, folder: Path) -> dict[str, Any]:
    """Runs paused here, each approved by a new interpreter under the profiler: the layers' shares
    added over `samples` processes."""
    from bench.peer_loop import SignoffLoop

    loop = SignoffLoop(folder / "fresh.db")
    loop.finish(loop.ticket(loop.create(10)))
    profiles = []
    for index in range(samples):
        ticket = loop.ticket(loop.create(10))
        out = folder / f"fresh-{index}.prof"
        subprocess.run([sys.executable, "-m", "bench.approval_profile", "--fresh-one", str(loop.path),
                        "--ticket", json.dumps(ticket), "--out", str(out)], check=True, cwd=report.ROOT, timeout=120)
        profiles.append(str(out))
    return {"processes": samples, "shares": shares(pstats.Stats(*profiles))}


def fresh_one(path: Path, ticket: dict[str, Any], out: Path) -> None:
    """Inside the new process: open the database, then approve under the profiler."""
    from bench.peer_loop import SignoffLoop

    loop = SignoffLoop(path, create=False)
    loop.prepare(ticket)
    profiler = cProfile.Profile()
    profiler.enable()
    loop.finish(ticket)
    profiler.disable()
    profiler.dump_stats(str(out))


def run(quick: bool = False) -> dict[str, Any]:
    plan = QUICK if quick else FULL
    with tempfile.TemporaryDirectory(prefix="signoff-profile-") as tmp:
        folder = Path(tmp)
        return {"warm": [warm(steps, approvals, folder)
                         for steps, approvals in zip(plan["sizes"], plan["approvals"], strict=True)],
                "fresh": fresh(plan["fresh"], folder)}


def markdown(result: dict[str, Any]) -> str:
    warm_runs, fresh_run = result["warm"], result["fresh"]
    header = ["layer", *[f"warm process, N={w['steps']}" for w in warm_runs],
              f"fresh process ({fresh_run['processes']} processes, one approval each)"]
    rows = [[name, *[f"{w['shares'][name]:.1f} %" for w in warm_runs], f"{fresh_run['shares'][name]:.1f} %"]
            for name in LAYERS]
    counts = warm_runs[0]["database"] or {}
    return "\n".join([
        "Share of the profiled time of one approval round trip (decision → finished), by layer:", "",
        report.table(header, rows), "",
        f"Each warm approval asked the database for {counts.get('statements', '?')} statements in "
        f"{counts.get('commits', '?')} commits. Under the profiler a warm approval took "
        + ", ".join(f"{w['profiled_ms_per_approval']:.2f} ms at N={w['steps']}" for w in warm_runs)
        + " (the profiler's own cost included)."])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--fresh-one", help=argparse.SUPPRESS)
    parser.add_argument("--ticket", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fresh_one:
        fresh_one(Path(args.fresh_one), json.loads(args.ticket), Path(args.out))
        return
    print(markdown(run(args.quick)))


if __name__ == "__main__":
    main()
