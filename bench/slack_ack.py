"""Benchmark 3: how fast `signoff serve` answers Slack under a burst, and how soon an approved tool runs.

A real `signoff serve` process (HTTP mode, gunicorn) talks to FakeSlack. Bursts of concurrent
signed requests: slash commands that start runs, Approve clicks on the approval requests those
runs posted, and `/signoff list`. Latency is from sending the request to its HTTP response; the
click-to-tool time runs from sending the click to the tool's row in the execution ledger.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, func, select

from bench import pg, report, serve_proc
from bench.stats import ms, summary
from signoff.runtime.adapters.db import make_engine, upgrade
from signoff.runtime.adapters.tables import approvals, tool_executions

FULL = {"burst": 100, "backends": ("sqlite", "postgresql")}
QUICK = {"burst": 5, "backends": ("sqlite",)}
APPROVER = "U0APPROVER"
APPROVE_ACTION = "signoff.approve"
WAIT_S = 180


def run(quick: bool = False, postgres_url: str | None = None) -> dict[str, Any]:
    if not serve_proc.available():
        return {"skipped": "`signoff serve` or the fake Slack API is not importable"}
    plan = QUICK if quick else FULL
    result: dict[str, Any] = {"plan": {"burst": plan["burst"]}, "backends": {}}
    for backend in plan["backends"]:
        if backend == "sqlite":
            with tempfile.TemporaryDirectory(prefix="signoff-ack-") as tmp:
                result["backends"][backend] = measure(f"sqlite:///{Path(tmp) / 'ack.db'}", plan["burst"])
        elif postgres_url is not None:
            with pg.dedicated_schema(postgres_url, "bench_ack") as url:
                result["backends"][backend] = measure(url, plan["burst"])
    return result


def measure(url: str, burst: int) -> dict[str, Any]:
    engine = make_engine(url)
    upgrade(engine)
    server = serve_proc.start(url, sweep_interval="15s")
    try:
        starts = fire(burst, lambda i: server.command(f"benchmark run {i}: look up, then notify", f"U0REQ{i:04d}"))
        wait_for(lambda: posted_approvals(engine) >= burst, "approval requests to be posted")
        cards = approval_cards(engine, server)
        sent_at: dict[str, datetime] = {}

        def click(i: int) -> tuple[int, float, str]:
            key, card = cards[i]
            sent_at[key] = datetime.now(UTC)
            return server.click(card, APPROVE_ACTION, APPROVER)

        clicks = fire(burst, click)
        wait_for(lambda: finished_executions(engine) >= burst, "approved tools to run")
        to_tool = click_to_tool(engine, sent_at)
        lists = fire(burst, lambda i: server.command("list", APPROVER))
        rss = server.rss()
    finally:
        server.stop()
        engine.dispose()
    return {"start_command": starts, "approve_click": clicks, "list_command": lists,
            "click_to_tool": summary(to_tool), "rss_after": rss}


def fire(count: int, send: Callable[[int], tuple[int, float, str]]) -> dict[str, Any]:
    """`count` requests at once (a barrier releases them together); latency summary and status codes."""
    barrier = threading.Barrier(count)

    def one(i: int) -> tuple[int, float, str]:
        barrier.wait()
        return send(i)

    with ThreadPoolExecutor(max_workers=count) as pool:
        answers = list(pool.map(one, range(count)))
    statuses: dict[str, int] = {}
    for status, _, _ in answers:
        statuses[str(status)] = statuses.get(str(status), 0) + 1
    return {**summary([elapsed for _, elapsed, _ in answers]), "statuses": statuses}


def wait_for(ready: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def posted_approvals(engine: Engine) -> int:
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(approvals).where(
            approvals.c.status == "pending", approvals.c.message.is_not(None))).scalar_one()


def finished_executions(engine: Engine) -> int:
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(tool_executions).where(
            tool_executions.c.status == "succeeded")).scalar_one()


def approval_cards(engine: Engine, server: serve_proc.Server) -> list[tuple[str, dict[str, Any]]]:
    """(key, the approval message as Slack shows it) for every pending approval."""
    import json

    with engine.connect() as conn:
        rows = conn.execute(select(approvals.c.key, approvals.c.message).where(approvals.c.status == "pending")
                            .order_by(approvals.c.requested_at)).all()
    cards = []
    for key, message in rows:
        ref = json.loads(message)
        cards.append((key, server.slack.message(ref["channel"], ref["ts"])))
    return cards


def click_to_tool(engine: Engine, sent_at: dict[str, datetime]) -> list[float]:
    with engine.connect() as conn:
        rows = conn.execute(select(tool_executions.c.key, tool_executions.c.finished_at)
                            .where(tool_executions.c.key.in_(list(sent_at)))).all()
    assert len(rows) == len(sent_at), (len(rows), len(sent_at))
    return [(finished - sent_at[key]).total_seconds() for key, finished in rows]


LABELS = {"start_command": "`/signoff <goal>` (starts a run)", "approve_click": "Approve click",
          "list_command": "`/signoff list`", "click_to_tool": "click → approved tool has run (ledger)"}


def markdown(result: dict[str, Any]) -> str:
    if "skipped" in result:
        return f"Not measured: {result['skipped']}."
    burst = result["plan"]["burst"]
    rows = []
    for backend, data in result["backends"].items():
        for key, label in LABELS.items():
            stats = data[key]
            codes = ", ".join(f"{n}× {code}" for code, n in sorted(stats.get("statuses", {}).items())) or "–"
            rows.append([backend, label, ms(stats["median_ms"]), ms(stats["p99_ms"]), ms(stats["max_ms"]), codes])
    parts = [f"{burst} concurrent signed requests per burst, each burst released at once; times in ms.", "",
             report.table(["database", "request", "p50", "p99", "max", "HTTP statuses"], rows)]
    for backend, data in result["backends"].items():
        parts += ["", f"`signoff serve` resident memory after the bursts ({backend}): "
                  f"{data['rss_after']['rss_mib']} MiB (gunicorn arbiter + worker)."]
    return "\n".join(parts)
