"""Benchmark: `signoff policy backtest` over 100,000 recorded calls (goal: under 10 s).

A SQLite database is migrated and filled with the rows a week of a busy workspace leaves: runs of
ten calls each, every call as the runner records it (its `decision` event, then the event of what
the 50-rule policy of `bench.policy` made of it, its `tool_executed`, and for an asked call its
approval row with the requirement and usage then), besides each run's own events. The calls are
`bench.policy`'s mix. The backtest then decides them again by that policy with its thresholds
moved, as a reviewer would try a change: read (three queries) plus decide, in this process, and the
whole command as a fresh process. `python -m bench.backtest [--quick]` prints the figures.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, insert

from bench import policy as policy_bench
from bench import report
from signoff.runtime.adapters.db import make_engine, upgrade
from signoff.runtime.adapters.recorded_reads import read_only_engine, read_recorded_calls
from signoff.runtime.adapters.tables import approvals, events, runs
from signoff.runtime.approval_policy import Allow, ApprovalPolicy, Ask, Deny, ProposedCall, evaluate
from signoff.runtime.backtest import backtest
from signoff.runtime.policy_file import parse_policy

FULL = {"calls": 100_000, "repeats": 3}
QUICK = {"calls": 2_000, "repeats": 1}
CALLS_PER_RUN = 10
GOAL_S = 10.0
CHANGED = {"<= 50": "<= 80", "> 1000": "> 800", "[S0LEADS]": "[S0LEADS, S0OPS]"}
"""The change the backtest tries: thresholds moved, one more approver group."""


def _rows(policy: ApprovalPolicy, count: int, start: datetime) -> dict[str, list[dict[str, Any]]]:
    """The rows of `count` calls recorded under `policy`, ten to a run, a few seconds apart."""
    rows: dict[str, list[dict[str, Any]]] = {"runs": [], "events": [], "approvals": []}
    mix = policy_bench.calls(count)
    for first in range(0, count, CALLS_PER_RUN):
        run_id, at = f"run-{first:08d}", start + timedelta(seconds=first)
        calls = mix[first:first + CALLS_PER_RUN]
        seq = _run_rows(rows, run_id, calls[0], at)
        for step, call in enumerate(calls, start=1):
            seq = _call_rows(rows, policy, run_id, step, call, seq, at)
        rows["events"].append(_event(run_id, seq + 1, "finished", {"answer": "done"}, at))
    return rows


def _run_rows(rows: dict[str, list[dict[str, Any]]], run_id: str, first: ProposedCall, at: datetime) -> int:
    rows["runs"].append({"run_id": run_id, "goal": "help the customer", "requester": first.requester,
                         "origin": json.dumps({"channel": first.channel}), "model": "scripted:bench",
                         "status": "done", "state": "{}", "history_len": 0, "version": 1, "event_count": 0,
                         "created_at": at, "updated_at": at})
    rows["events"] += [_event(run_id, 1, "run_created", {"requester": first.requester}, at),
                       _event(run_id, 2, "run_started", {"goal": "help the customer", "step": 0}, at)]
    return 2


def _call_rows(rows: dict[str, list[dict[str, Any]]], policy: ApprovalPolicy, run_id: str, step: int,
               call: ProposedCall, seq: int, at: datetime) -> int:
    key, verdict = f"{run_id}:{step}", evaluate(policy, call)
    said = [("decision", {"kind": "tool", "step": step, "tool": call.tool, "args": dict(call.args)})]
    match verdict:
        case Allow(rule=rule):
            if rule is not None:
                said.append(("call_allowed_by_rule", {"key": key, "tool": call.tool, "rule": rule, "step": step}))
            said.append(("tool_executed", {"key": key, "tool": call.tool, "step": step,
                                           "side_effect": call.side_effect}))
        case Deny(rule=rule, reason=reason):
            said.append(("call_denied_by_rule", {"key": key, "tool": call.tool, "rule": rule, "reason": reason,
                                                 "step": step}))
        case Ask(rule=rule, requirement=requirement):
            said.append(("approval_requested", {"key": key, "tool": call.tool, "rule": rule, "step": step,
                                                "quorum": requirement.quorum, "args": dict(call.args)}))
            rows["approvals"].append(_approval(run_id, step, key, call, {"rule": rule, **requirement.to_json()}, at))
    for offset, (kind, payload) in enumerate(said, start=1):
        rows["events"].append(_event(run_id, seq + offset, kind, payload, at))
    return seq + len(said)


def _approval(run_id: str, step: int, key: str, call: ProposedCall, asked: dict[str, Any],
              at: datetime) -> dict[str, Any]:
    return {"approval_id": f"apr-{key}", "run_id": run_id, "step": step, "tool": call.tool,
            "args": json.dumps(dict(call.args)), "key": key, "digest": "0" * 64, "status": "approved",
            "requester": call.requester, "requested_at": at, "expires_at": at + timedelta(minutes=30),
            "quorum": asked["quorum"], "asked": json.dumps(asked),
            "asked_with": json.dumps({"usage": dict(call.usage)})}


def _event(run_id: str, seq: int, kind: str, payload: dict[str, Any], at: datetime) -> dict[str, Any]:
    return {"run_id": run_id, "seq": seq, "type": kind, "payload": json.dumps(payload), "at": at}


def fill(engine: Engine, rows: dict[str, list[dict[str, Any]]]) -> None:
    with engine.begin() as conn:
        for table in (runs, events, approvals):
            for start in range(0, len(rows[table.name]), 20_000):
                conn.execute(insert(table), rows[table.name][start:start + 20_000])


def time_backtest(url: str, policy: ApprovalPolicy, since: datetime) -> tuple[float, float, dict[str, int]]:
    """Seconds to read the calls, seconds to decide them again, and the counts."""
    started = time.perf_counter()
    engine = read_only_engine(url)
    recorded = read_recorded_calls(engine, since)
    engine.dispose()
    read = time.perf_counter() - started
    started = time.perf_counter()
    result = backtest(policy, recorded)
    return read, time.perf_counter() - started, dict(result.counts)


def time_command(url: str, policy_path: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "signoff.bot.cli", "policy", "backtest", str(policy_path),
                           "--database-url", url, "--since", "8d", "--json"], capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    assert done.returncode == 0, done.stderr
    return elapsed


def run(quick: bool = False) -> dict[str, Any]:
    plan = QUICK if quick else FULL
    then_text = policy_bench.policy_text()
    now_text = then_text
    for old, new in CHANGED.items():
        now_text = now_text.replace(old, new)
    then, now = parse_policy(then_text, source="then.yaml"), parse_policy(now_text, source="now.yaml")
    with tempfile.TemporaryDirectory(prefix="signoff-bench-backtest-") as scratch:
        url = f"sqlite:///{Path(scratch) / 'recorded.db'}"
        engine = make_engine(url)
        upgrade(engine)
        rows = _rows(then, plan["calls"], datetime.now(UTC) - timedelta(days=7))
        fill(engine, rows)
        engine.dispose()
        counted = {name: len(found) for name, found in rows.items()}
        del rows  # half a million rows kept alive would slow every garbage collection the backtest makes
        policy_path = Path(scratch) / "now.yaml"
        policy_path.write_text(now_text, encoding="utf-8")
        since = datetime.now(UTC) - timedelta(days=8)
        timings = [time_backtest(url, now, since) for _ in range(plan["repeats"])]
        command = [time_command(url, policy_path) for _ in range(plan["repeats"])]
    best = min(timings, key=lambda t: t[0] + t[1])
    return {"plan": dict(plan), "rows": counted,
            "read_s": round(best[0], 3), "decide_s": round(best[1], 3), "in_process_s": round(best[0] + best[1], 3),
            "command_s": round(min(command), 3), "counts": best[2], "goal_s": GOAL_S}


def markdown(result: dict[str, Any]) -> str:
    rows, counts = result["rows"], result["counts"]
    changed = ", ".join(f"{name} {count:,}" for name, count in counts.items())
    return "\n".join([
        f"`signoff policy backtest` over {result['plan']['calls']:,} recorded calls ({rows['events']:,} events, "
        f"{rows['approvals']:,} approvals, {rows['runs']:,} runs; SQLite), best of {result['plan']['repeats']}:", "",
        report.table(["part", "seconds"], [["read the calls (3 queries)", result["read_s"]],
                                            ["decide them again (50 rules)", result["decide_s"]],
                                            ["the whole command, a fresh process", result["command_s"]]]), "",
        f"Counts: {changed}.",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.backtest", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks the script, not the speed")
    args = parser.parse_args(argv)
    print(markdown(run(args.quick)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
