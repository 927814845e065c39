"""The machine a benchmark ran on: CPU, cores, memory, disk sync latency and software versions."""

from __future__ import annotations

import os
import platform
import sqlite3
import statistics
import tempfile
import time
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Any


def describe(postgres_version: str | None = None) -> dict[str, Any]:
    """Everything a reader needs to compare these figures with their own."""
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "ram_gib": _ram_gib(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "postgresql": postgres_version,
        "sqlalchemy": _version("sqlalchemy"),
        "psycopg": _version("psycopg"),
        "fdatasync_ms": fdatasync_ms(),
        "load_average": load_average(),
    }


def load_average() -> list[float]:
    """1, 5 and 15-minute load averages: other work on a shared machine shows up here."""
    return [round(x, 2) for x in os.getloadavg()]


def fdatasync_ms(samples: int = 30) -> dict[str, float]:
    """Median, min and max time of one 4 KiB write + fdatasync in the temp directory's filesystem.

    Every durable commit pays at least one of these, so it is the floor under all the figures.
    """
    timings = []
    with tempfile.NamedTemporaryFile() as handle:
        for _ in range(samples):
            os.write(handle.fileno(), b"x" * 4096)
            start = time.perf_counter()
            os.fdatasync(handle.fileno())
            timings.append((time.perf_counter() - start) * 1000)
    return {"median": round(statistics.median(timings), 3), "min": round(min(timings), 3),
            "max": round(max(timings), 3)}


def markdown(info: dict[str, Any]) -> str:
    sync = info["fdatasync_ms"]
    return (
        f"Machine: {info['cpu']}, {info['cores']} cores, {info['ram_gib']} GiB RAM, {info['os']}; "
        f"Python {info['python']}, SQLite {info['sqlite']}, PostgreSQL {info['postgresql'] or 'not reachable'}, "
        f"SQLAlchemy {info['sqlalchemy']}, psycopg {info['psycopg']}. "
        f"One 4 KiB write + fdatasync on this disk: median {sync['median']:.2f} ms "
        f"(min {sync['min']:.2f}, max {sync['max']:.2f}). Load average at the start (1/5/15 min): "
        f"{' / '.join(str(x) for x in info['load_average'])}. Run {info['date']}."
    )


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _ram_gib() -> float | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None
