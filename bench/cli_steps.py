"""Benchmark: a step of `signoff run --quiet`, as a person or a script at a terminal runs it.

The real command in a fresh process, on a SQLite file of its own, driven by a scripted model of N
read-only calls (the demo's `lookup_orders`) and an answer. Per step is the cost a step adds: the
difference between the runs of N and of the smallest N, over the steps between them, so start-up
is left out. last/first compares the median time between consecutive `decision` events (each step
writes one) over the run's last 50 steps and its first 50: 1 is flat, more grows with the history.
Goal: at most 1 ms a step, flat. `python -m bench.cli_steps [--quick]` prints the figures.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from bench import report, startup
from bench.stats import ms
from bench.targets import CLI_LAST_OVER_FIRST as GOAL_LAST_OVER_FIRST
from bench.targets import CLI_STEP_MS as GOAL_MS

FULL = {"sizes": [10, 1000], "samples": 3}
QUICK = {"sizes": [5, 50], "samples": 1}
EDGE = 50
"""Steps at each end of the longest run compared for last/first."""


def script(steps: int) -> list[dict[str, Any]]:
    return [{"tool": "lookup_orders", "args": {"order_id": f"A-{1000 + i}"}} for i in range(steps)] + [
        {"final": "looked them all up"}]


def one_run(command: list[str], env: dict[str, str], folder: Path, steps: int) -> tuple[float, list[float]]:
    """(wall seconds, seconds between consecutive steps) of one `signoff run --quiet` of `steps` steps."""
    plan, db = folder / f"script-{steps}.json", folder / f"run-{steps}-{time.monotonic_ns()}.db"
    plan.write_text(json.dumps(script(steps)), encoding="utf-8")
    args = ["run", "--quiet", "--model", f"scripted:{plan}", "--tools", "demo", "--outbox", str(folder / "outbox"),
            "--max-steps", str(steps + 5), "--max-tool-calls", str(steps + 5),
            "--database-url", f"sqlite:///{db}", "look up the orders"]
    start = time.perf_counter()
    done = subprocess.run([*command, *args], env=env, cwd=folder, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - start
    if done.returncode != 0 or " done: " not in done.stdout:
        raise RuntimeError(f"signoff run exited with {done.returncode}:\n{done.stdout}{done.stderr}")
    with sqlite3.connect(db) as conn:
        stamps = [datetime.fromisoformat(at) for (at,) in
                  conn.execute("SELECT at FROM events WHERE type = 'decision' ORDER BY seq")]
    gaps = [(b - a).total_seconds() for a, b in zip(stamps, stamps[1:], strict=False)]
    return wall, gaps


def run(quick: bool = False) -> dict[str, Any]:
    sizes, samples = (QUICK if quick else FULL)["sizes"], (QUICK if quick else FULL)["samples"]
    with tempfile.TemporaryDirectory(prefix="signoff-cli-steps-") as tmp:
        folder = Path(tmp)
        env = startup.environment(folder / "pycache")
        command = startup.signoff_command()
        one_run(command, env, folder, sizes[0])  # compiles the bytecode into the cache
        walls: dict[int, list[float]] = {n: [] for n in sizes}
        gaps: list[float] = []
        for _ in range(samples):
            for n in sizes:
                wall, between = one_run(command, env, folder, n)
                walls[n].append(wall)
                if n == sizes[-1]:
                    gaps = between
    small, large = sizes[0], sizes[-1]
    per_step = (statistics.median(walls[large]) - statistics.median(walls[small])) / (large - small)
    edge = min(EDGE, len(gaps) // 2)
    first, last = statistics.median(gaps[:edge]), statistics.median(gaps[-edge:])
    return {"sizes": sizes, "samples": samples, "wall_s": {str(n): walls[n] for n in sizes},
            "per_step_ms": round(per_step * 1000, 3), "first_ms": round(first * 1000, 3),
            "last_ms": round(last * 1000, 3), "last_over_first": round(last / first, 2) if first else None,
            "goal_ms": GOAL_MS, "goal_last_over_first": GOAL_LAST_OVER_FIRST}


def markdown(result: dict[str, Any]) -> str:
    sizes = result["sizes"]
    rows = [[f"N={n}", ms(statistics.median(result["wall_s"][str(n)]) * 1000)] for n in sizes]
    return "\n".join([
        report.table(["`signoff run --quiet`, fresh process", "wall time, median (ms)"], rows), "",
        f"Per step (N={sizes[0]} → N={sizes[-1]}): **{ms(result['per_step_ms'])} ms** (goal ≤ {GOAL_MS:g} ms); "
        f"median between steps over the first {EDGE} steps {ms(result['first_ms'])} ms, the last {EDGE} "
        f"{ms(result['last_ms'])} ms: last/first **{result['last_over_first']}** (goal ≤ {GOAL_LAST_OVER_FIRST}).",
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    result = run(parser.parse_args().quick)
    print(markdown(result), file=sys.stdout)


if __name__ == "__main__":
    main()
