"""Benchmark: an approval asked for over the approval API, from ask to outcome, beside the same
approval decided in-process.

Over HTTP: a real `signoff serve` (HTTP mode, gunicorn, SQLite file) against FakeSlack, and a
caller using the Python client. For each approval: `POST /v1/approvals` (the policy asks, the card is
posted), an Approve click signed as Slack signs it, the caller's long poll returning `approved`,
`start`, and `outcome`. Each step's latency is from the caller's side; "click → approved" runs
from sending the click to the long poll's answer.

In-process: the runner over a SQLite file, no HTTP and no Slack: `ask_for_caller`, `decide`,
`execute`, `start_call`, `report_call` — what the API costs beyond the core.

`python -m bench.api_roundtrip [--quick]` prints the table; `bench/run --only api` saves it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench import report, serve_proc
from bench.stats import ms, summary

APPROVER = "U0APPROVER"


def _in_process(n: int) -> dict[str, Any]:
    from signoff.runtime.adapters.db import make_engine, upgrade
    from signoff.runtime.adapters.sql import SqlStore
    from signoff.runtime.caller_runs import CallerCall
    from signoff.runtime.runner import Runner

    with tempfile.TemporaryDirectory(prefix="signoff-bench-api-") as workdir:
        engine = make_engine(f"sqlite:///{Path(workdir) / 'signoff.db'}")
        upgrade(engine)
        runner = Runner(SqlStore(engine), {}, lambda model: (lambda history: {"final": "unused"}))
        totals = []
        for i in range(n):
            started = time.perf_counter()
            run, _ = runner.ask_for_caller(CallerCall(tool="refund", args={"order": f"A-{i}", "amount": 40}),
                                           f"refund A-{i}", "U0ASKER", {"channel": serve_proc.CHANNEL})
            approval = runner.pending_approval(run.run_id)
            assert approval is not None
            runner.decide(approval.approval_id, approval.digest, APPROVER, True, drive=True)
            runner.execute(run.run_id)
            runner.start_call(run.run_id)
            assert runner.report_call(run.run_id, True, {"refund_id": i}) == "done"
            totals.append(time.perf_counter() - started)
        engine.dispose()
    return {"total": summary(totals)}


def _card(server: Any, run_id: str, timeout: float = 30.0) -> dict[str, Any]:
    """The approval card of `run_id` in FakeSlack, once it is posted."""
    from signoff.bot.slack.blocks import APPROVE_ACTION

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with server.slack._lock:
            messages = [dict(m) for m in server.slack.messages.values()]
        for message in messages:
            for block in message.get("blocks", []):
                for element in block.get("elements", []) if block.get("type") == "actions" else []:
                    if element.get("action_id") == APPROVE_ACTION and run_id in str(message):
                        return message
        time.sleep(0.005)
    raise RuntimeError(f"no card for {run_id}")


def _over_http(n: int) -> dict[str, Any]:
    from signoff.bot.slack.blocks import APPROVE_ACTION
    from signoff.client import Signoff
    from signoff.runtime.adapters.api_keys import SqlApiKeys
    from signoff.runtime.adapters.db import make_engine, upgrade
    from signoff.runtime.api_keys import ApiKey, new_callback_secret, new_secret, secret_hash

    with tempfile.TemporaryDirectory(prefix="signoff-bench-api-") as workdir:
        url = f"sqlite:///{Path(workdir) / 'signoff.db'}"
        engine = make_engine(url)
        upgrade(engine)
        secret = new_secret()
        SqlApiKeys(engine).create_key(ApiKey("bench", serve_proc.CHANNEL, ("*",), None, created_at=_now()),
                                      secret_hash(secret), new_callback_secret())
        engine.dispose()
        server = serve_proc.start(url)
        steps: dict[str, list[float]] = {name: [] for name in ("ask", "click_to_approved", "start", "outcome", "total")}
        try:
            with Signoff(f"http://127.0.0.1:{server.port}", secret, timeout=30) as client:
                for i in range(n):
                    _one(client, server, i, steps, APPROVE_ACTION)
        finally:
            server.stop()
    return {name: summary(values) for name, values in steps.items()}


def _one(client: Any, server: Any, i: int, steps: dict[str, list[float]], approve: str) -> None:
    began = time.perf_counter()
    approval = client.request("refund", {"order": f"A-{i}", "amount": 40}, key=f"bench-{i}")
    steps["ask"].append(time.perf_counter() - began)
    card = _card(server, approval.id)
    answered: list[float] = []
    waiter = threading.Thread(target=lambda: (client.get(approval.id, wait=30), answered.append(time.perf_counter())))
    waiter.start()
    clicked = time.perf_counter()
    server.click(card, approve, APPROVER)
    waiter.join(60)
    steps["click_to_approved"].append(answered[0] - clicked)
    moment = time.perf_counter()
    approval.start()
    steps["start"].append(time.perf_counter() - moment)
    moment = time.perf_counter()
    approval.succeeded({"refund_id": i})
    steps["outcome"].append(time.perf_counter() - moment)
    steps["total"].append(time.perf_counter() - began)


def _now() -> Any:
    from datetime import UTC, datetime

    return datetime.now(UTC)


def run(quick: bool = False) -> dict[str, Any]:
    n = 5 if quick else 50
    return {"n": n, "in_process": _in_process(n), "http": _over_http(n)}


_STEP_NAMES = {"ask": "ask (`POST /v1/approvals`: policy, run, card)", "click_to_approved":
               "Approve click → the long poll answers `approved`", "start": "start (ledger row, approval consumed)",
               "outcome": "outcome (recorded, the run ends)", "total": "the whole approval, ask to outcome"}


def markdown(result: dict[str, Any]) -> str:
    http, local = result["http"], result["in_process"]
    rows = [[_STEP_NAMES[name],
             ms(http[name]["median_ms"]), ms(http[name]["p99_ms"])]
            for name in ("ask", "click_to_approved", "start", "outcome", "total")]
    return "\n".join([
        f"One approval asked for over the approval API, {result['n']} one after another (SQLite file, one "
        "`signoff serve`, the Python client, an Approve click signed as Slack signs it):", "",
        report.table(["step", "median (ms)", "p99 (ms)"], rows), "",
        f"The same approval in-process (ask, decide, hand over, start, report through the runner, no HTTP, no "
        f"Slack): **{ms(local['total']['median_ms'])} ms** median, {ms(local['total']['p99_ms'])} ms p99.",
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    result = run(parser.parse_args().quick)
    print(markdown(result), file=sys.stdout)


if __name__ == "__main__":
    main()
