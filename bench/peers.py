"""Benchmark 2: Signoff beside agent-runloop and LangGraph, running the same loop in one process.

The peers are installed in a virtualenv of the benchmark's own (bench/.venv, pinned versions), so
Signoff's dependencies stay clean; `bench.peer_loop` runs there and reports JSON.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench import report
from bench.stats import ms, ratio, times

VENV = report.ROOT / "bench" / ".venv"
PEERS = ("agent-runloop==0.3.2", "langgraph==1.2.24", "langgraph-checkpoint-sqlite==3.1.2")
FULL = {"sizes": [10, 100, 1000], "repeats": [5, 3, 1]}
QUICK = {"sizes": [5, 20], "repeats": [1, 1]}
TIMEOUT_S = 900


def venv_python(venv: Path = VENV) -> Path:
    """The benchmark virtualenv's interpreter, created and filled on first use."""
    python = venv / "bin" / "python"
    check = [str(python), "-c", "import agent_loop, langgraph.checkpoint.sqlite, runtime"]
    if python.exists() and subprocess.run(check, capture_output=True, cwd=report.ROOT).returncode == 0:
        return python
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "-e", str(report.ROOT), *PEERS],
                   check=True, cwd=report.ROOT)
    return python


def run(quick: bool = False) -> dict[str, Any]:
    plan = QUICK if quick else FULL
    command = [str(venv_python()), "-m", "bench.peer_loop", "--sizes", ",".join(map(str, plan["sizes"])),
               "--repeats", ",".join(map(str, plan["repeats"]))]
    done = subprocess.run(command, capture_output=True, text=True, cwd=report.ROOT, timeout=TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"peer loop failed:\n{done.stderr[-4000:]}")
    return with_goals(json.loads(done.stdout))


EXPERIMENT = "signoff-pooled"


def with_goals(result: dict[str, Any]) -> dict[str, Any]:
    """Add Signoff's speed-up over each peer per size, and whether the goal holds.

    The goal is judged for Signoff as shipped; the pooled-engine experiment gets its speed-ups
    listed beside it, to show how much of the gap a pool would close.
    """
    systems = result["systems"]
    peer_names = [n for n in systems if not n.startswith("signoff")]
    speedups: dict[str, dict[str, dict[str, float | None]]] = {}
    for mine in ("signoff", EXPERIMENT):
        if mine not in systems:
            continue
        ours = systems[mine]["sizes"]
        speedups[mine] = {name: {n: ratio(systems[name]["sizes"][n]["step"]["median_ms"],
                                          ours[n]["step"]["median_ms"]) for n in ours} for name in peer_names}
    met = {}
    for name, by_size in speedups["signoff"].items():
        values = [by_size[str(n)] for n in result["sizes"]]
        met[name] = {"at_least_5x": all(v is not None and v >= 5 for v in values),
                     "growing": all(a is not None and b is not None and b > a
                                    for a, b in zip(values, values[1:], strict=False))}
    result["speedup"], result["goals"] = speedups, met
    return result


def markdown(result: dict[str, Any]) -> str:
    systems, sizes = result["systems"], [str(n) for n in result["sizes"]]
    header = ["system", "version"] + [f"per step, N={n}" for n in sizes] + [f"approval round trip, N={n}"
                                                                             for n in sizes]
    rows = []
    for name, data in systems.items():
        steps = [ms(data["sizes"][n]["step"]["median_ms"]) for n in sizes]
        trips = [ms(data["sizes"][n]["round_trip"]["median_ms"]) for n in sizes]
        rows.append([name, data["version"], *steps, *trips])
    parts = ["Medians in ms (runs per size: " + ", ".join(f"N={n}: {r}" for n, r in
                                                           zip(sizes, result["repeats"], strict=True)) + "). "
             "Per step = (start → paused before the side effect) / N; round trip = approval decision → run "
             "finished (the side effect ran once and the final answer is checkpointed).", "",
             report.table(header, rows), "", "Signoff's speed-up per step (peer time / Signoff time; > 1 means "
             "Signoff is faster):", ""]
    speed_rows = []
    for mine, peers_by_name in result.get("speedup", {}).items():
        for name, by_size in peers_by_name.items():
            goal = result["goals"][name] if mine == "signoff" else None
            speed_rows.append([mine, name, *[times(by_size[n]) for n in sizes],
                               report.verdict(goal["at_least_5x"]) if goal else "(experiment)",
                               report.verdict(goal["growing"]) if goal else "(experiment)"])
    parts.append(report.table(["Signoff", "peer", *[f"N={n}" for n in sizes], "≥ 5x at every N",
                               "growing with N"], speed_rows))
    parts += ["", "Durability each system ran with:", ""]
    parts += [f"- {name}: {data['durability']}" for name, data in systems.items()]
    return "\n".join(parts)
