"""Signed receipts under a crash and a forger. A replica takes the Approve click and dies right after
the decision commits; the other finishes the run. The receipt was kept with the decision: it is in
the database, checks against the public key, and `signoff audit export` then `signoff audit verify
--file --public-key` (real processes) pass. Then a forger works on the export and on the database:
a receipt with one byte changed, one re-signed with the forger's own key, one dropped, and a
receipt's row deleted from the database; `verify` names the approval's receipt each time (exit 1).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import delete, insert, select

from scenarios.drive import APPROVER, REQUESTER, has_ended, posted_approval, started_run
from scenarios.outcome import Outcome, observed
from scenarios.serve import click_body
from scenarios.world import ROOT, World, wait_until
from signoff.bot.slack.blocks import APPROVE_ACTION
from signoff.receipts import private_key_pem, public_key_pem, receipt_problem, sign
from signoff.runtime.adapters.tables import receipts

NOTE = {"tool": "send_note", "args": {"to": "ada@example.com", "text": "Your refund is on its way."}}
SCRIPT: list[dict[str, Any]] = [NOTE, {"final": "Ada was told."}]
FORGER = "U0MALLORY"


def cli(world: World, *args: str) -> tuple[int, str]:
    """`signoff ARGS` on the world's database, as an operator runs it: exit status and output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SIGNOFF_", "SLACK_"))}
    env.update(SIGNOFF_DATABASE_URL=world.db.url("audit"), PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "signoff.bot.cli", *args], env=env, cwd=world.dir,
                          capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout + done.stderr


def run_receipts(kind: str = "sqlite", timeout: float = 60.0) -> Outcome:
    outcome = Outcome(f"hostile/receipts-crash-and-forgery/{kind}", "hostile", runs=1)
    key = Ed25519PrivateKey.generate()
    with observed(outcome, lambda: World(kind, SCRIPT)) as world:
        (world.dir / "signing.pem").write_bytes(private_key_pem(key))
        (world.dir / "public.pem").write_bytes(public_key_pem(key.public_key()))
        world.env["SIGNOFF_SIGNING_KEY"] = str(world.dir / "signing.pem")
        clicked = world.start(SIGNOFF_FAILPOINTS="after_approval_recorded=exit")
        clicked.watch_for_death()
        other = world.start()
        run_id = started_run(other.command("note Ada that her refund is on its way", REQUESTER).text)
        approval = wait_until(lambda: posted_approval(world, run_id), 20, interval=0.1, what="the approval's card")
        message = world.slack.message(approval.message["channel"], approval.message["ts"])
        clicked.post(click_body(message, APPROVE_ACTION, APPROVER))
        outcome.expect(clicked.died.wait(20), "the clicked replica should die at after_approval_recorded")
        outcome.faults = 1
        receipt = world.db.store.receipt_of(approval_id=approval.approval_id)
        outcome.expect(receipt is not None and receipt_problem(receipt, [key.public_key()]) is None,
                       f"the decision that committed should have its valid receipt: {receipt}")
        if receipt is None:
            return outcome
        outcome.expect([v["user"] for v in receipt["receipt"]["decided_by"]] == [APPROVER],
                       "the receipt should name the approver")
        try:
            wait_until(lambda: has_ended(world, run_id), timeout, interval=0.1, what=f"{run_id} to end")
        except TimeoutError as exc:
            outcome.expectations.append(str(exc))
        keys = [row["key"] for row in world.db.store.executions(run_id)]
        outcome.expect(keys == [approval.key], f"the call should run once with its key {approval.key}: {keys}")
        for serve in world.serves:
            serve.stop()
        _forgeries(world, outcome, approval.approval_id)
    return outcome


def _forgeries(world: World, outcome: Outcome, approval_id: str) -> None:
    code, exported = cli(world, "audit", "export")
    if not outcome.expect(code == 0, f"`signoff audit export` failed: {exported!r}"):
        return
    lines = exported.splitlines()
    (world.dir / "export.jsonl").write_text(exported)
    code, said = cli(world, "audit", "verify", "--file", "export.jsonl", "--public-key", "public.pem")
    outcome.expect(code == 0 and "receipts intact" in said, f"the untouched export did not verify: {said!r}")
    [at] = [n for n, line in enumerate(lines) if json.loads(line)["record"] == "receipt"]
    forger = Ed25519PrivateKey.generate()
    kept = json.loads(lines[at])["receipt"]
    fields = {**kept["receipt"], "decided_by": [{**kept["receipt"]["decided_by"][0], "user": FORGER}]}
    fields = {name: value for name, value in fields.items() if name not in ("format", "key_id")}
    resigned = json.dumps({"record": "receipt", "receipt": sign(fields, forger)})
    forgeries = {
        "one byte changed": (lines[at].replace(APPROVER, FORGER), "changed after it was signed"),
        "re-signed with the forger's key": (resigned, "not trusted here"),
        "dropped": (None, "is missing"),
    }
    for label, (line, words) in forgeries.items():
        outcome.hostile += 1
        forged = lines[:at] + ([line] if line is not None else []) + lines[at + 1:]
        (world.dir / "forged.jsonl").write_text("\n".join(forged) + "\n")
        code, said = cli(world, "audit", "verify", "--file", "forged.jsonl", "--public-key", "public.pem")
        outcome.expect(code == 1 and f"receipt of approval {approval_id}" in said and words in said,
                       f"a receipt {label}: `signoff audit verify` said {said!r} (exit {code})")
    outcome.hostile += 1
    engine = world.db.engine
    with engine.begin() as conn:
        rows = [dict(row._mapping) for row in conn.execute(select(receipts))]
        conn.execute(delete(receipts).where(receipts.c.approval_id == approval_id))
    try:
        code, said = cli(world, "audit", "verify", "--public-key", "public.pem")
        outcome.expect(code == 1 and f"receipt of approval {approval_id}" in said and "is missing" in said,
                       f"a receipt deleted from the database: `signoff audit verify` said {said!r} (exit {code})")
    finally:
        with engine.begin() as conn:
            conn.execute(delete(receipts))
            conn.execute(insert(receipts), rows)
