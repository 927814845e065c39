"""Benchmark 2: Signoff beside agent-runloop and LangGraph, running the same loop in one process.

The peers are installed in a virtualenv of the benchmark's own (bench/.venv, pinned versions), so
Signoff's dependencies stay clean; `bench.peer_loop` runs there and reports JSON. Besides the loop
in one process: the approval round trip from a fresh process, and many runs created and approved
one after another.
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
FULL: dict[str, Any] = {"sizes": [10, 100, 1000], "repeats": [5, 3, 1], "fresh_steps": 10, "fresh_samples": 5,
                        "bulk": 1000}
QUICK: dict[str, Any] = {"sizes": [5, 20], "repeats": [1, 1], "fresh_steps": 5, "fresh_samples": 1, "bulk": 20}
ROUND_TRIP_SHARE = 0.5
"""Goal: Signoff's approval round trip at most this share of LangGraph's, in one process and from a fresh one."""
BASELINE = "langgraph"
"""The peer the round-trip and sequential-run goals are judged against."""
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
               "--repeats", ",".join(map(str, plan["repeats"])), "--fresh-steps", str(plan["fresh_steps"]),
               "--fresh-samples", str(plan["fresh_samples"]), "--bulk", str(plan["bulk"])]
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
    result["issue_goals"] = issue_goals(result)
    return result


def _against(ours: float | None, theirs: float | None, share: float) -> dict[str, Any]:
    """Signoff's figure beside the baseline's, their ratio, and whether it is at most `share` of it."""
    met = None if ours is None or theirs is None else ours <= theirs * share
    return {"signoff_ms": ours, "baseline_ms": theirs, "ratio": ratio(ours, theirs), "met": met}


def issue_goals(result: dict[str, Any]) -> dict[str, Any]:
    """The round-trip and sequential-run goals against `BASELINE`, for each figure that was measured."""
    goals: dict[str, Any] = {"baseline": BASELINE}
    systems = result["systems"]
    if "signoff" in systems and BASELINE in systems:
        goals["round_trip_in_process"] = {
            n: _against(systems["signoff"]["sizes"][n]["round_trip"]["median_ms"],
                        systems[BASELINE]["sizes"][n]["round_trip"]["median_ms"], ROUND_TRIP_SHARE)
            for n in map(str, result["sizes"])}
    fresh = result.get("fresh", {}).get("systems", {})
    if "signoff" in fresh and BASELINE in fresh:
        goals["round_trip_fresh"] = _against(fresh["signoff"]["round_trip"]["median_ms"],
                                             fresh[BASELINE]["round_trip"]["median_ms"], ROUND_TRIP_SHARE)
        goals["fresh_wall"] = _against(fresh["signoff"]["spawn_to_exit"]["median_ms"],
                                       fresh[BASELINE]["spawn_to_exit"]["median_ms"], 1.0)
    bulk = result.get("bulk", {}).get("systems", {})
    if "signoff" in bulk and BASELINE in bulk:
        goals["bulk_create"] = _against(bulk["signoff"]["create_ms_per_run"], bulk[BASELINE]["create_ms_per_run"],
                                        1.0)
        goals["bulk_approve"] = _against(bulk["signoff"]["approve_ms_per_run"],
                                         bulk[BASELINE]["approve_ms_per_run"], 1.0)
    return goals


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
    parts += fresh_markdown(result) + bulk_markdown(result) + statements_markdown(result) + goals_markdown(result)
    parts += ["", "Durability each system ran with:", ""]
    parts += [f"- {name}: {data['durability']}" for name, data in systems.items()]
    return "\n".join(parts)


def fresh_markdown(result: dict[str, Any]) -> list[str]:
    fresh = result.get("fresh")
    if not fresh:
        return []
    rows = [[name, ms(data["round_trip"]["median_ms"]), ms(data["round_trip"]["max_ms"]),
             ms(data["spawn_to_ready"]["median_ms"]), ms(data["spawn_to_exit"]["median_ms"])]
            for name, data in fresh["systems"].items()]
    return ["", f"Approval round trip from a fresh process (runs of N={fresh['steps']} paused here, each approved "
            f"by a new interpreter; {fresh['samples']} new process{'' if fresh['samples'] == 1 else 'es'} per system after "
            "one warm-up, medians, ms):", "",
            report.table(["system", "decide → finished, inside the new process", "max", "spawn → database open, "
                          "ready to decide", "spawn → exit"], rows)]


def bulk_markdown(result: dict[str, Any]) -> list[str]:
    bulk = result.get("bulk")
    if not bulk:
        return []
    rows = [[name, ms(data["create_ms_per_run"]), ms(data["approve_ms_per_run"]),
             f"{data['create_seconds']:.1f} + {data['approve_seconds']:.1f}"]
            for name, data in bulk["systems"].items()]
    return ["", f"{bulk['runs']:,} runs one after another per system (one lookup, then `notify` asks for approval; "
            f"the systems take turns in blocks of {bulk['block']}), ms per run:", "",
            report.table(["system", "create a paused run", "approve it to the end", "seconds (creations + approvals)"],
                         rows)]


def statements_markdown(result: dict[str, Any]) -> list[str]:
    counted = result.get("statements")
    if not counted or not counted["systems"]:
        return []
    rows = [[name, str(data["statements"]), str(data["commits"])] for name, data in counted["systems"].items()]
    return ["", f"What one approval round trip asks of the database (a run of N={counted['steps']}, decision → "
            "finished; BEGIN and COMMIT not counted as statements):", "",
            report.table(["system", "SQL statements", "commits"], rows)]


def goals_markdown(result: dict[str, Any]) -> list[str]:
    goals = result.get("issue_goals") or issue_goals(result)
    half = f"≤ {ROUND_TRIP_SHARE:g}x"
    in_process = goals.get("round_trip_in_process", {})
    rows = [[f"approval round trip in one process, N={n}: {half} {BASELINE}'s", *_goal_cells(in_process[n])]
            for n in map(str, result["sizes"]) if n in in_process]
    if "round_trip_fresh" in goals:
        rows.append([f"approval round trip from a fresh process: {half} {BASELINE}'s",
                     *_goal_cells(goals["round_trip_fresh"])])
        rows.append(["fresh process, spawn → exit (shown, no goal)", *_goal_cells(goals["fresh_wall"])[:3], "–"])
    if "bulk_create" in goals:
        runs = result["bulk"]["runs"]
        rows.append([f"{runs:,} sequential paused-run creations: ≤ {BASELINE}'s time, ms per run",
                     *_goal_cells(goals["bulk_create"])])
        rows.append([f"{runs:,} sequential approvals: ≤ {BASELINE}'s time, ms per run",
                     *_goal_cells(goals["bulk_approve"])])
    if not rows:
        return []
    return ["", f"Goals against {BASELINE}:", "",
            report.table(["goal", "signoff", BASELINE, "signoff / " + BASELINE, "verdict"], rows)]


def _goal_cells(goal: dict[str, Any]) -> list[str]:
    return [ms(goal["signoff_ms"]), ms(goal["baseline_ms"]), times(goal["ratio"]), report.verdict(goal["met"])]
