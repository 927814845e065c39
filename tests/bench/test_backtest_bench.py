"""Smoke test for the backtest benchmark: at a tiny size it fills a database, times the command and
reports well-formed figures, which the targets table reads. It checks the script, not the speed."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import backtest, targets  # noqa: E402


def test_backtest_benchmark_reports_the_parts_and_the_counts():
    result = backtest.run(quick=True)

    assert result["rows"]["runs"] == backtest.QUICK["calls"] // backtest.CALLS_PER_RUN
    assert sum(result["counts"].values()) == backtest.QUICK["calls"]
    assert result["counts"]["changed_approvers"] > 0  # the change tried does change something
    assert min(result["read_s"], result["decide_s"], result["command_s"]) > 0
    assert "recorded calls" in backtest.markdown(result)
    [row] = targets.policy_backtest({"backtest": {**result, "quick": True}})
    assert row["met"] is False and row["figure"].endswith("(quick run)")  # too few calls to meet the goal
