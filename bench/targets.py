"""The performance targets, each judged met or missed from the figures the benchmarks saved.

Measures nothing: it reads the JSON results in bench/results/ that exist (machine, steps, peers,
slack, scale, policy, backtest, startup, replicas, cli) and prints one table, target | figure | verdict. A target
whose benchmark has no saved result, or whose result has no figure for it, is "not measured". Each
ratio is taken within one benchmark run, as the figures beside it were. `python -m bench` runs this
last, so the table reads the figures that run just wrote; `python -m bench.targets` reads what is there.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import peers, report
from bench.stats import ms, times

SOURCES = ("machine", "steps", "peers", "slack", "scale", "policy", "backtest", "startup", "replicas", "cli")
ROUND_TRIP_SHARE = 0.5
"""Signoff's approval round trip: at most this share of LangGraph's."""
SEQUENTIAL_RUNS = 1000
STEP_MS, STEP_FROM_N, STEP_OVER_BEST_PEER = 0.5, 100, 2.0
ACK_BURST, ACK_BURST_P99_MS = 100, 200.0
ACK_STEADY_RATE, ACK_STEADY_P99_MS = 20, 50.0
CLICK_TO_TOOL_P99_MS = 300.0
HELP_MS, SERVE_READY_MS = 250.0, 2000.0
CLI_STEP_MS, CLI_LAST_OVER_FIRST = 1.0, 1.2
POLICY_US, POLICY_RULES = 50.0, 50
BACKTEST_S, BACKTEST_CALLS = 10.0, 100_000
AUDIT_SHARE_OF_STEP = 0.05
SEE_PROSE = "see the prose"
ACK_KINDS = {"start_command": "`/signoff <goal>`", "approve_click": "Approve click", "list_command": "`/signoff list`"}

Row = dict[str, Any]
"""One target: `target` (text), `figure` (text), `met` (True, False, None: not measured), `note`
(a verdict other than met/missed, e.g. "see the prose")."""


def load(results: Path = report.RESULTS) -> dict[str, dict[str, Any]]:
    """The saved results that exist, by benchmark name."""
    found = {}
    for name in SOURCES:
        path = results / f"{name}.json"
        if path.exists():
            found[name] = json.loads(path.read_text(encoding="utf-8"))
    return found


def run(results: Path = report.RESULTS, out: Callable[[str], Any] | None = print) -> dict[str, Any]:
    """Judge every target from the saved results; `out` gets the table (None: say nothing). Each
    row says whether its own figure came from a quick run."""
    found = load(results)
    rows = judge(found)
    result = {"rows": rows, "sources": {name: _source(data) for name, data in found.items() if name != "machine"}}
    if out is not None:
        out(markdown(result))
    return result


def _source(data: dict[str, Any]) -> dict[str, Any]:
    machine = data.get("machine", {})
    return {"date": machine.get("date"), "load_average": machine.get("load_average"), "quick": data.get("quick"),
            "skipped": data.get("skipped")}


def judge(found: dict[str, dict[str, Any]]) -> list[Row]:
    rows: list[Row] = []
    for part in (round_trips, sequential, per_step, cli_steps, replicas, slack, startup, policy, policy_backtest, audit_chain):
        rows += part(found)
    return rows


def _row(target: str, figure: str, met: bool | None, source: dict[str, Any] | None = None, note: str = "") -> Row:
    if source is not None and source.get("quick"):
        figure += " (quick run)"
    return {"target": target, "figure": figure, "met": met, "note": note}


def _missing(target: str, why: str = "") -> Row:
    return {"target": target, "figure": why or "–", "met": None, "note": ""}


# -- benchmark 2: beside the peers -----------------------------------------------------------------


def _peer_goals(found: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    result = found.get("peers")
    if result is None or "systems" not in result:
        return None
    return peers.issue_goals(result)  # judged afresh: a result saved before the goals existed has figures only


def round_trips(found: dict[str, dict[str, Any]]) -> list[Row]:
    in_process = f"Approval round trip in one process (decide → finished): Signoff ≤ {ROUND_TRIP_SHARE:g}x LangGraph's"
    fresh = f"Approval round trip from a fresh process: Signoff ≤ {ROUND_TRIP_SHARE:g}x LangGraph's"
    goals = _peer_goals(found)
    if goals is None:
        return [_missing(in_process, "no peers result"), _missing(fresh, "no peers result")]
    source = found["peers"]
    rows = []
    by_size = goals.get("round_trip_in_process")
    if by_size:
        figure = "; ".join(f"N={n}: {ms(g['signoff_ms'])} vs {ms(g['baseline_ms'])} ms ({times(g['ratio'])})"
                           for n, g in by_size.items())
        rows.append(_row(in_process, figure, all(g["met"] for g in by_size.values()), source))
    else:
        rows.append(_missing(in_process, "LangGraph or Signoff not in the peers result"))
    goal = goals.get("round_trip_fresh")
    if goal:
        wall = goals["fresh_wall"]
        figure = (f"{ms(goal['signoff_ms'])} vs {ms(goal['baseline_ms'])} ms ({times(goal['ratio'])}), N="
                  f"{source['fresh']['steps']}; spawn → exit {ms(wall['signoff_ms'])} vs {ms(wall['baseline_ms'])} ms")
        rows.append(_row(fresh, figure, goal["met"], source))
    else:
        rows.append(_missing(fresh, "not in the peers result"))
    return rows


def sequential(found: dict[str, dict[str, Any]]) -> list[Row]:
    labels = {"bulk_create": f"{SEQUENTIAL_RUNS:,} paused-run creations one after another: Signoff ≤ LangGraph's time",
              "bulk_approve": f"{SEQUENTIAL_RUNS:,} approvals one after another, each to its end: Signoff ≤ "
                              "LangGraph's time"}
    goals = _peer_goals(found)
    rows = []
    for key, target in labels.items():
        goal = goals.get(key) if goals else None
        if not goal:
            rows.append(_missing(target, "not in the peers result"))
            continue
        runs = found["peers"]["bulk"]["runs"]
        figure = f"{ms(goal['signoff_ms'])} vs {ms(goal['baseline_ms'])} ms per run ({times(goal['ratio'])})"
        if runs != SEQUENTIAL_RUNS:
            figure += f", {runs:,} runs"
        rows.append(_row(target, figure, goal["met"], found["peers"]))
    return rows


def per_step(found: dict[str, dict[str, Any]]) -> list[Row]:
    """≤ 0.5 ms a step on SQLite from N = 100 on (benchmark 1's SQLite file; benchmark 2's Signoff
    row when there is no benchmark 1 result), and ≥ 2x the fastest peer at every N (benchmark 2)."""
    absolute = f"Per step on SQLite ≤ {STEP_MS:g} ms from N = {STEP_FROM_N} on"
    relative = f"Per step ≥ {STEP_OVER_BEST_PEER:g}x faster than the fastest peer at every N"
    rows = []
    steps = found.get("steps", {}).get("backends", {}).get("sqlite")
    peer_result = found.get("peers")
    signoff = (peer_result or {}).get("systems", {}).get("signoff")
    source: dict[str, Any] | None = None
    if steps:
        sizes = {int(n): s["step"]["median_ms"] for n, s in steps["sizes"].items()}
        where, source = "benchmark 1 (median step)", found["steps"]
    elif signoff:
        sizes = {int(n): s["step"]["median_ms"] for n, s in signoff["sizes"].items()}
        where, source = "benchmark 2 (Signoff's run time / N)", peer_result
    else:
        sizes, where, source = {}, "", None
    judged = {n: v for n, v in sorted(sizes.items()) if n >= STEP_FROM_N}
    if judged:
        figure = "; ".join(f"N={n}: {ms(v)} ms" for n, v in judged.items()) + f", {where}"
        rows.append(_row(absolute, figure, all(v <= STEP_MS for v in judged.values()), source))
    else:
        rows.append(_missing(absolute, f"no run of N ≥ {STEP_FROM_N} saved" if sizes else "no steps or peers result"))
    if signoff and peer_result is not None:
        names = [n for n in peer_result["systems"] if not n.startswith("signoff")]
        cells, met = [], True
        for n in map(str, peer_result["sizes"]):
            ours = signoff["sizes"][n]["step"]["median_ms"]
            best_name = min(names, key=lambda name: peer_result["systems"][name]["sizes"][n]["step"]["median_ms"])
            best = peer_result["systems"][best_name]["sizes"][n]["step"]["median_ms"]
            met = met and best >= STEP_OVER_BEST_PEER * ours
            cells.append(f"N={n}: {times(best / ours if ours else None)} ({best_name} {ms(best)} ms, Signoff {ms(ours)})")
        rows.append(_row(relative, "; ".join(cells), met if names else None, peer_result))
    else:
        rows.append(_missing(relative, "no peers result"))
    return rows


# -- replicas ----------------------------------------------------------------------------------------


def replicas(found: dict[str, dict[str, Any]]) -> list[Row]:
    speed = "3 replicas on one PostgreSQL finish a batch of 300 runs no slower than 1"
    safe = "No lease conflict between replicas changes an outcome"
    result = found.get("replicas")
    if result is None or "skipped" in result:
        why = result["skipped"] if result else "no replicas result"
        return [_missing(speed, why), _missing(safe, why)]
    summary, goals = result["replicas"], result["goals"]
    one, three = summary.get("1"), summary.get("3")
    runs = result["plan"]["runs"]
    if one and three:
        per_run = three["per_run"]
        figure = (f"{three['wall_seconds']:.2f} s vs {one['wall_seconds']:.2f} s ({times(goals['three_over_one'])}) "
                  f"for {runs} runs; per approved run {per_run['statements']:g} statements, {per_run['commits']:g} "
                  f"commits, {per_run['round_trips']:g} round trips (3 replicas; 1: {one['per_run']['statements']:g}, "
                  f"{one['per_run']['commits']:g}, {one['per_run']['round_trips']:g})")
        rows = [_row(speed, figure, goals["no_slower"], result)]
    else:
        rows = [_missing(speed, "1 and 3 replicas were not both measured")]
    figure = "; ".join(f"{count} replica(s): {s['lease_conflicts']} lease conflicts, "
                       f"{s['conflicts_changing_an_outcome']} changed an outcome, every run done: "
                       f"{'yes' if s['all_done'] else 'no'}, one succeeded ledger row and one side effect per run: "
                       f"{'yes' if s['one_succeeded_row_per_run'] and s['side_effect_once_per_run'] else 'no'}"
                       for count, s in summary.items())
    rows.append(_row(safe, figure, goals["no_outcome_changed"], result))
    return rows


# -- benchmark 3: Slack ------------------------------------------------------------------------------


def slack(found: dict[str, dict[str, Any]]) -> list[Row]:
    result = found.get("slack")
    burst_target = f"Slack acknowledgement p99 ≤ {ACK_BURST_P99_MS:g} ms, burst of {ACK_BURST}"
    steady_target = f"Slack acknowledgement p99 ≤ {ACK_STEADY_P99_MS:g} ms at a steady {ACK_STEADY_RATE} requests/s"
    tool_target = f"Click → tool executed p99 ≤ {CLICK_TO_TOOL_P99_MS:g} ms"
    if result is None or "skipped" in result:
        why = result["skipped"] if result else "no slack result"
        return [_missing(burst_target, why), _missing(steady_target, why), _missing(tool_target, why)]
    burst = result.get("plan", {}).get("burst")
    rows = []
    backends = result.get("backends", {})
    for backend, data in backends.items():
        for kind, label in ACK_KINDS.items():
            if kind in data:
                p99 = data[kind]["p99_ms"]
                figure = f"p99 {ms(p99)} ms" + ("" if burst == ACK_BURST else f", burst of {burst}")
                rows.append(_row(f"{burst_target}: {label}, {backend}", figure, p99 <= ACK_BURST_P99_MS, result))
    if not rows:
        rows.append(_missing(burst_target, "no burst in the slack result"))
    steady_rows = []
    for backend, steady in _steady(result).items():
        rate = steady.get("rate")
        for kind, label in ACK_KINDS.items():
            if isinstance(steady.get(kind), dict) and "p99_ms" in steady[kind]:
                p99 = steady[kind]["p99_ms"]
                figure = f"p99 {ms(p99)} ms" + ("" if rate in (None, ACK_STEADY_RATE) else f", at {rate:g}/s")
                steady_rows.append(_row(f"{steady_target}: {label}, {backend}", figure, p99 <= ACK_STEADY_P99_MS,
                                        result))
    rows += steady_rows or [_missing(steady_target, "not measured")]
    for backend in ("sqlite", "postgresql"):
        data = backends.get(backend, {})
        if "click_to_tool" in data:
            p99 = data["click_to_tool"]["p99_ms"]
            figure = f"p99 {ms(p99)} ms" + ("" if burst == ACK_BURST else f", burst of {burst}")
            rows.append(_row(f"{tool_target}, {backend} (burst)", figure, p99 <= CLICK_TO_TOOL_P99_MS, result))
        else:
            rows.append(_missing(f"{tool_target}, {backend}", "not measured"))
        steady = _steady(result).get(backend, {})
        if isinstance(steady.get("click_to_tool"), dict) and "p99_ms" in steady["click_to_tool"]:
            p99 = steady["click_to_tool"]["p99_ms"]
            rows.append(_row(f"{tool_target}, {backend} (steady rate)", f"p99 {ms(p99)} ms",
                             p99 <= CLICK_TO_TOOL_P99_MS, result))
    return rows


def _steady(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The steady-rate figures by backend: under each backend's result, or a top-level `steady` by backend."""
    found = {backend: data["steady"] for backend, data in result.get("backends", {}).items()
             if isinstance(data.get("steady"), dict)}
    top = result.get("steady")
    if isinstance(top, dict):
        found.update({backend: data for backend, data in top.items() if isinstance(data, dict)})
    return found


def cli_steps(found: dict[str, dict[str, Any]]) -> list[Row]:
    target = (f"`signoff run --quiet` per step ≤ {CLI_STEP_MS:g} ms, flat (last/first ≤ {CLI_LAST_OVER_FIRST:g}), "
              "fresh process, SQLite")
    result = found.get("cli")
    if result is None or result.get("per_step_ms") is None:
        return [_missing(target, "no cli result")]
    sizes = result["sizes"]
    flat = result.get("last_over_first")
    figure = (f"{ms(result['per_step_ms'])} ms a step (N={sizes[0]} → {sizes[-1]}, wall time); median between "
              f"steps {ms(result['first_ms'])} → {ms(result['last_ms'])} ms, last/first {flat}")
    met = result["per_step_ms"] <= CLI_STEP_MS and flat is not None and flat <= CLI_LAST_OVER_FIRST
    return [_row(target, figure, met, result)]


# -- start-up, policy, audit ---------------------------------------------------------------------------


def startup(found: dict[str, dict[str, Any]]) -> list[Row]:
    help_target = f"`signoff --help` ≤ {HELP_MS:g} ms (median, fresh process)"
    serve_target = f"`signoff serve` ready ≤ {SERVE_READY_MS / 1000:g} s (`/readyz` answers 200, median)"
    result = found.get("startup")
    if result is None:
        return [_missing(help_target, "no startup result"), _missing(serve_target, "no startup result")]
    rows = []
    line = result.get("lines", {}).get("--help")
    if line:
        rows.append(_row(help_target, f"{ms(line['median_ms'])} ms (max {ms(line['max_ms'])}, CPU "
                                      f"{ms(line['cpu']['median_ms'])})", line["median_ms"] <= HELP_MS, result))
    else:
        rows.append(_missing(help_target))
    ready = result.get("serve", {}).get("ready")
    if ready:
        rows.append(_row(serve_target, f"{ms(ready['median_ms'])} ms (max {ms(ready['max_ms'])})",
                         ready["median_ms"] <= SERVE_READY_MS, result))
    else:
        rows.append(_missing(serve_target, result.get("serve", {}).get("skipped", "")))
    return rows


def policy(found: dict[str, dict[str, Any]]) -> list[Row]:
    target = f"Approval policy evaluation ≤ {POLICY_US:g} µs with {POLICY_RULES} rules (median per call)"
    result = found.get("policy")
    every = (result or {}).get("rules_50", {}).get("all")
    if not every:
        return [_missing(target, "no policy result")]
    figure = f"median {every['median_us']:g} µs, p99 {every['p99_us']:g} µs over {every['n']:,} calls"
    return [_row(target, figure, every["median_us"] <= POLICY_US, result)]


def policy_backtest(found: dict[str, dict[str, Any]]) -> list[Row]:
    target = f"`signoff policy backtest` over {BACKTEST_CALLS:,} recorded calls ≤ {BACKTEST_S:g} s (the whole command)"
    result = found.get("backtest")
    if result is None or "command_s" not in result:
        return [_missing(target, "no backtest result")]
    calls = result.get("plan", {}).get("calls", 0)
    figure = (f"{result['command_s']:g} s over {calls:,} calls (read {result['read_s']:g} s, "
              f"decide {result['decide_s']:g} s)")
    return [_row(target, figure, calls >= BACKTEST_CALLS and result["command_s"] <= BACKTEST_S, result)]


def audit_chain(found: dict[str, dict[str, Any]]) -> list[Row]:
    """The hash chain's share of a step is measured beside the code without it, by hand (benchmark
    1's prose); a saved figure, if a benchmark ever records one, is read from the steps result."""
    target = f"Audit hash chain ≤ {AUDIT_SHARE_OF_STEP:.0%} of a step"
    share = found.get("steps", {}).get("audit_chain", {}).get("share_of_step")
    if share is None:
        return [{"target": target, "figure": "no figure in the saved results", "met": None, "note": SEE_PROSE}]
    return [_row(target, f"{share:.1%} of a step", share <= AUDIT_SHARE_OF_STEP, found["steps"])]


# -- the table ------------------------------------------------------------------------------------------


def _verdict(row: Row) -> str:
    return row["note"] or report.verdict(row["met"])


def markdown(result: dict[str, Any]) -> str:
    rows = result["rows"]
    met = sum(1 for r in rows if r["met"] is True)
    missed = sum(1 for r in rows if r["met"] is False)
    parts = [report.table(["target", "figure", "verdict"], [[r["target"], r["figure"], _verdict(r)] for r in rows]),
             "", f"{met} met, {missed} missed, {len(rows) - met - missed} not measured or judged in the prose.",
             "", "Figures from:", ""]
    for name, source in result["sources"].items():
        load = source.get("load_average")
        parts.append(f"- `{name}`: run {source.get('date') or 'at an unknown time'}"
                     + (f", load average {' / '.join(map(str, load))}" if load else "")
                     + (", quick mode" if source.get("quick") else "")
                     + (f", skipped: {source['skipped']}" if source.get("skipped") else ""))
    return "\n".join(parts)


def main() -> int:
    run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
