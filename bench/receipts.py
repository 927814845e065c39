"""Benchmark: what signing each decision's receipt costs, beside an approval's round trip.

Three figures. The signature alone: `receipts.decision_receipt` (the receipt's canonical JSON and
an Ed25519 signature) and its check (`signoff.receipts.receipt_problem`), many times over one
decided approval. And the same approval's round trip in-process, through the runner over a SQLite
file (ask, decide, hand over, start, report: as `api_roundtrip` measures it), without a signing key
and with one, alternating, so the two see the same machine. The goal: signing under 5 % of the
round trip.

`python -m bench.receipts [--quick]` prints the table; `bench/run --only receipts` saves it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench import report, serve_proc
from bench.stats import ms, summary

APPROVER = "U0APPROVER"


def _decided() -> Any:
    from signoff.runtime.records import ApprovalRecord, Vote

    now = datetime.now(UTC)
    return ApprovalRecord(
        approval_id="apr_bench", run_id="run-bench", step=1, tool="refund",
        args={"order": "A-17", "amount": 40, "reason": "damaged on arrival"}, key="run-bench:1", digest="0" * 64,
        status="approved", requester="U0ASKER", requested_at=now, expires_at=now + timedelta(minutes=30),
        decided_at=now, decided_by=APPROVER, quorum=1, asked={"rule": "refunds", "policy": "1506dbd5df23376b"},
        votes=(Vote(user=APPROVER, approved=True, at=now),), asked_with={"preview": {"digest": "ee655bbf"}})


def _signing(n: int) -> dict[str, Any]:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from signoff.receipts import receipt_problem
    from signoff.runtime.receipts import decision_receipt

    key, approval = Ed25519PrivateKey.generate(), _decided()
    signs, checks = [], []
    for _ in range(n):
        began = time.perf_counter()
        receipt = decision_receipt(approval, key, start_within=timedelta(minutes=10))
        signs.append(time.perf_counter() - began)
        began = time.perf_counter()
        assert receipt_problem(receipt, [key.public_key()]) is None
        checks.append(time.perf_counter() - began)
    return {"sign": summary(signs), "check": summary(checks)}


def _round_trips(n: int) -> dict[str, Any]:
    """The in-process approval's round trip, alternately without and with a signing key."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from signoff.runtime.adapters.db import make_engine, upgrade
    from signoff.runtime.adapters.sql import SqlStore
    from signoff.runtime.caller_runs import CallerCall
    from signoff.runtime.runner import Runner
    from signoff.runtime.runner_config import RunnerConfig

    totals: dict[str, list[float]] = {"unsigned": [], "signed": []}
    with tempfile.TemporaryDirectory(prefix="signoff-bench-receipts-") as workdir:
        engine = make_engine(f"sqlite:///{Path(workdir) / 'signoff.db'}")
        upgrade(engine)
        store = SqlStore(engine)
        runners = {"unsigned": RunnerConfig(), "signed": RunnerConfig(signer=Ed25519PrivateKey.generate())}
        built = {name: Runner(store, {}, lambda model: (lambda history: {"final": "unused"}), config)
                 for name, config in runners.items()}
        for i in range(n):
            for name, runner in built.items():
                started = time.perf_counter()
                run, _ = runner.ask_for_caller(CallerCall(tool="refund", args={"order": f"A-{i}", "amount": 40}),
                                               f"refund A-{i}", "U0ASKER", {"channel": serve_proc.CHANNEL})
                approval = runner.pending_approval(run.run_id)
                assert approval is not None
                runner.decide(approval.approval_id, approval.digest, APPROVER, True, drive=True)
                runner.execute(run.run_id)
                runner.start_call(run.run_id)
                assert runner.report_call(run.run_id, True, {"refund_id": i}) == "done"
                totals[name].append(time.perf_counter() - started)
        signed = sum(1 for proof in store.proofs() if type(proof).__name__ == "ReceiptRow")
        assert signed == n, (signed, n)
        engine.dispose()
    return {name: summary(values) for name, values in totals.items()}


def run(quick: bool = False) -> dict[str, Any]:
    n_sign, n_trips = (200, 5) if quick else (5000, 100)
    signing, trips = _signing(n_sign), _round_trips(n_trips)
    sign_ms, trip_ms = signing["sign"]["median_ms"], trips["unsigned"]["median_ms"]
    return {"n_sign": n_sign, "n_round_trips": n_trips, "signing": signing, "round_trips": trips,
            "sign_share": sign_ms / trip_ms if trip_ms else None,
            "round_trip_change": (trips["signed"]["median_ms"] - trip_ms) / trip_ms if trip_ms else None}


def markdown(result: dict[str, Any]) -> str:
    signing, trips = result["signing"], result["round_trips"]
    share, change = result["sign_share"], result["round_trip_change"]
    rows = [["make and sign a decision's receipt (canonical JSON, Ed25519)", ms(signing["sign"]["median_ms"], 3),
             ms(signing["sign"]["p99_ms"], 3)],
            ["check a receipt's signature", ms(signing["check"]["median_ms"], 3), ms(signing["check"]["p99_ms"], 3)],
            ["an approval's round trip in-process, no signing key", ms(trips["unsigned"]["median_ms"]),
             ms(trips["unsigned"]["p99_ms"])],
            ["the same, each decision signed and its receipt stored", ms(trips["signed"]["median_ms"]),
             ms(trips["signed"]["p99_ms"])]]
    return "\n".join([
        f"Signing receipts ({result['n_sign']} signatures; {result['n_round_trips']} approvals each way, "
        "alternating, SQLite file, through the runner):", "",
        report.table(["what", "median (ms)", "p99 (ms)"], rows), "",
        f"Signing is **{share:.1%}** of an approval's in-process round trip (goal: under 5 %); the round trip "
        f"with a signing key is {change:+.1%} against without (the receipt's row included). Over HTTP the "
        "round trip is longer, so the share is smaller still.",
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    result = run(parser.parse_args().quick)
    print(markdown(result), file=sys.stdout)


if __name__ == "__main__":
    main()
