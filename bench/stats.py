"""Summaries of timing samples: medians with min and max, percentiles, milliseconds."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by the nearest-rank method."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def summary(seconds: Sequence[float]) -> dict[str, Any]:
    """Median, min, max, mean and p99 of samples given in seconds, reported in milliseconds."""
    assert seconds, "no samples"
    ms = [s * 1000 for s in seconds]
    return {
        "n": len(ms),
        "median_ms": round(statistics.median(ms), 4),
        "min_ms": round(min(ms), 4),
        "max_ms": round(max(ms), 4),
        "mean_ms": round(statistics.fmean(ms), 4),
        "p99_ms": round(percentile(ms, 99), 4),
    }


def ms(value: float | None, digits: int = 2) -> str:
    """A millisecond figure for a table cell."""
    if value is None:
        return "–"
    return f"{value:.{digits}f}" if value < 100 else f"{value:.0f}"


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return round(a / b, 2)


def times(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}x"
