"""`python -m tests.replay.record`: record the replay corpus anew (tests/replay/corpus/*.json).

Each recipe drives one run through the real runner and store (SQLite in a temporary directory)
with a scripted model, doing what a person would at each pause, and writes the run's state,
history and audit events. The corpus is the behaviour of the code that recorded it: re-record
only when a change of behaviour is intended, and say so in the commit.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from signoff.runtime import starting_calls
from signoff.runtime.adapters.db import make_engine, upgrade
from signoff.runtime.adapters.sql import SqlStore
from signoff.runtime.budget import Budget
from signoff.runtime.errors import ModelUnavailable
from signoff.runtime.models.scripted import ScriptedPolicy
from signoff.runtime.runner import Runner
from signoff.runtime.runner_config import RunnerConfig
from signoff.runtime.state import SCHEMA_VERSION
from signoff.tools.registry import load_toolsets
from tests.replay.toolset import TOOLSET

CORPUS = Path(__file__).resolve().parent / "corpus"
REQUESTER, APPROVER = "U0ASKER", "U0LEAD"
DEMO_SCRIPT = json.loads((Path(__file__).resolve().parents[2] / "bot" / "demo_script.json").read_text())
NOTE = {"tool": "send_note", "args": {"to": "grace@example.com", "text": "Your order ships today."}}
SCRIPTS: dict[str, list[dict[str, Any]]] = {
    "demo": DEMO_SCRIPT,
    "lookups": [{"tool": "lookup", "args": {"query": f"page {i}"}, "usage": {"input_tokens": 120, "output_tokens": 9}}
                for i in range(4)] + [{"final": "read four pages"}],
    "note": [{"tool": "lookup", "args": {"query": "order A-2002"}}, NOTE, {"final": "Grace was told."}],
    "loop": [{"tool": "lookup", "args": {"query": "the same"}}] * 8 + [{"final": "gave up"}],
    "awkward": [
        {"thought": "neither a call nor an answer"},
        {"tool": "no_such_tool", "args": {}},
        {"tool": "send_note", "args": {"to": "grace@example.com"}},
        {"tool": "send_note", "args": {"to": "grace@example.com", "text": "hi", "bcc": "eve@example.com"}},
        {"tool": "lookup", "args": {"query": "broken"}},
        {"tool": "slow_lookup", "args": {"query": "archive"}},
        NOTE, NOTE,
        {"final": "done, one note sent"},
    ],
    "credit": [{"tool": "apply_credit", "args": {"account": "acct-9", "amount": 20}}, {"final": "credited"}],
    "batch": [{"calls": [{"tool": "lookup", "args": {"query": "order A-2002"}, "call_id": "b-look"},
                         {**NOTE, "call_id": "b-grace"},
                         {"tool": "send_note", "args": {"to": "hal@example.com", "text": "Yours too."}, "call_id": "b-hal"},
                         {"tool": "no_such_tool", "args": {}, "call_id": "b-none"}],
               "text": "Reading the order and writing to both."},
              {"final": "Grace was told; Hal was not."}],
}


class Recorder:
    def __init__(self, workdir: Path) -> None:
        engine = make_engine(f"sqlite:///{workdir / 'corpus.db'}")
        upgrade(engine)
        self.ahead = timedelta(0)
        """How far the store's clock is moved on, for a recipe where time passes (an expiry)."""
        self.store = SqlStore(engine, clock=lambda: datetime.now(UTC) + self.ahead)
        self.tools = {**load_toolsets("demo", outbox=workdir / "outbox"), **load_toolsets(TOOLSET, outbox=workdir)}
        self.outages: list[int] = []

    def runner(self, **config: Any) -> Runner:
        return Runner(self.store, self.tools, self.policy, RunnerConfig(**{"lease": timedelta(seconds=30), **config}))

    def policy(self, spec: str) -> Any:
        scripted = ScriptedPolicy(SCRIPTS[spec.removeprefix("scripted:")], name=spec)
        outages = self.outages

        def answer(history: list[dict[str, Any]]) -> Any:
            turns = sum(1 for e in history if e.get("role") == "assistant")
            if turns in outages:
                outages.remove(turns)
                raise ModelUnavailable("503 from the model endpoint")
            return scripted(history)
        return answer

    def record(self, runner: Runner, run_id: str, toolset: str) -> dict[str, Any]:
        run = runner.get_run(run_id)
        return {"format": 1, "schema_version": SCHEMA_VERSION, "toolset": toolset, "status": run.status,
                "state": run.state, "events": runner.timeline(run_id)}


def approve_all(runner: Runner, run_id: str) -> None:
    while (approval := runner.pending_approval(run_id)) is not None:
        runner.decide(approval.approval_id, approval.digest, APPROVER, True, "looks right")
        runner.execute(run_id)


def demo_approved(r: Recorder) -> tuple[Runner, str]:
    runner = r.runner()
    run = runner.start_run("Ada says order A-1001 arrived damaged. Refund her and let her know.", REQUESTER,
                           model="scripted:demo")
    runner.execute(run.run_id)
    approve_all(runner, run.run_id)
    return runner, run.run_id


def demo_email_denied(r: Recorder) -> tuple[Runner, str]:
    runner = r.runner()
    run = runner.start_run("Refund Ada for order A-1001.", REQUESTER, model="scripted:demo")
    runner.execute(run.run_id)
    approval = runner.pending_approval(run.run_id)
    runner.decide(approval.approval_id, approval.digest, APPROVER, False, "refund first, then write")
    runner.execute(run.run_id)
    approve_all(runner, run.run_id)
    return runner, run.run_id


def budget_extended(r: Recorder) -> tuple[Runner, str]:
    runner = r.runner(extend_steps=4)
    run = runner.start_run("read the pages", REQUESTER, model="scripted:lookups",
                           budget=Budget(max_steps=2, max_tokens=1000))
    runner.execute(run.run_id)
    runner.extend(run.run_id, APPROVER, shown_version=runner.get_run(run.run_id).version)
    runner.execute(run.run_id)
    return runner, run.run_id


def model_outage_retried(r: Recorder) -> tuple[Runner, str]:
    r.outages.append(1)
    runner = r.runner()
    run = runner.start_run("tell Grace her order ships", REQUESTER, model="scripted:note")
    runner.execute(run.run_id)
    runner.retry(run.run_id, REQUESTER, shown_version=runner.get_run(run.run_id).version)
    runner.execute(run.run_id)
    approve_all(runner, run.run_id)
    return runner, run.run_id


def stalled_then_closed(r: Recorder) -> tuple[Runner, str]:
    runner = r.runner()
    run = runner.start_run("find the record", REQUESTER, model="scripted:loop", budget=Budget(max_steps=20))
    runner.execute(run.run_id)
    runner.cancel(run.run_id, APPROVER, "closed: it loops", shown_version=runner.get_run(run.run_id).version)
    runner.execute(run.run_id)
    return runner, run.run_id


def awkward_replies(r: Recorder) -> tuple[Runner, str]:
    runner = r.runner()
    run = runner.start_run("send Grace one note", REQUESTER, model="scripted:awkward", budget=Budget(max_steps=12))
    runner.execute(run.run_id)
    approve_all(runner, run.run_id)
    return runner, run.run_id


def cancelled_while_waiting(r: Recorder) -> tuple[Runner, str]:
    runner = r.runner()
    run = runner.start_run("tell Grace", REQUESTER, model="scripted:note")
    runner.execute(run.run_id)
    runner.cancel(run.run_id, REQUESTER, "not needed any more")
    runner.execute(run.run_id)
    return runner, run.run_id


def reconciled_done(r: Recorder) -> tuple[Runner, str]:
    """The credit started and its worker died before recording the outcome; a person checked."""
    runner = r.runner()
    run = runner.start_run("credit acct-9", REQUESTER, model="scripted:credit")
    runner.execute(run.run_id)
    approval = runner.pending_approval(run.run_id)
    runner.decide(approval.approval_id, approval.digest, APPROVER, True)
    r.store.claim(run.run_id, "a-worker-that-died", runner.config.lease)
    starting_calls.begin_execution(r.store, run.run_id, approval.tool, approval.args, approval.key, owner="a-worker-that-died",
                            lease=runner.config.lease, dispatch_window=runner.config.dispatch_window)
    r.store.release(run.run_id, "a-worker-that-died")
    noted = Runner(r.store, {k: v for k, v in r.tools.items() if k != "apply_credit"} | {
        "apply_credit": dataclass_replace(r.tools["apply_credit"], idempotent=False)}, r.policy, runner.config)
    noted.execute(run.run_id)  # not idempotent here: the run asks a person
    noted.reconcile(run.run_id, APPROVER, "done", {"credited": 20, "account": "acct-9", "checked": True},
                    "the ledger shows it", shown_version=noted.get_run(run.run_id).version)
    noted.execute(run.run_id)
    return noted, run.run_id


def expired_requested_again(r: Recorder) -> tuple[Runner, str]:
    """Nobody decided the note in time; its requester asked again, and it was approved."""
    runner = r.runner()
    run = runner.start_run("tell Grace her order ships", REQUESTER, model="scripted:note")
    runner.execute(run.run_id)
    r.ahead += runner.config.approval_ttl + timedelta(minutes=1)
    runner.expire_due()
    runner.request_again(run.run_id, REQUESTER, shown_version=runner.get_run(run.run_id).version)
    runner.execute(run.run_id)
    approve_all(runner, run.run_id)
    return runner, run.run_id


def batch_decided_out_of_order(r: Recorder) -> tuple[Runner, str]:
    """A turn of four calls: the read runs, the unknown tool is refused, the second note is denied
    first and the first approved after."""
    runner = r.runner()
    run = runner.start_run("tell Grace and Hal", REQUESTER, model="scripted:batch")
    runner.execute(run.run_id)
    grace, hal = sorted(runner.store.list_approvals(status="pending", run_id=run.run_id), key=lambda a: a.key)
    runner.decide(hal.approval_id, hal.digest, APPROVER, False, "not Hal")
    runner.execute(run.run_id)
    runner.decide(grace.approval_id, grace.digest, APPROVER, True, "fine")
    runner.execute(run.run_id)
    return runner, run.run_id


def dataclass_replace(tool: Any, **changes: Any) -> Any:
    import dataclasses
    return dataclasses.replace(tool, **changes)


RECIPES: dict[str, tuple[Callable[[Recorder], tuple[Runner, str]], str]] = {
    "demo-approved": (demo_approved, "demo"),
    "demo-email-denied": (demo_email_denied, "demo"),
    "budget-extended": (budget_extended, TOOLSET),
    "model-outage-retried": (model_outage_retried, TOOLSET),
    "stalled-then-closed": (stalled_then_closed, TOOLSET),
    "awkward-replies": (awkward_replies, TOOLSET),
    "cancelled-while-waiting": (cancelled_while_waiting, TOOLSET),
    "reconciled-done": (reconciled_done, TOOLSET),
    "expired-requested-again": (expired_requested_again, TOOLSET),
    "batch-decided-out-of-order": (batch_decided_out_of_order, TOOLSET),
}


def main(names: list[str]) -> int:
    CORPUS.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as workdir:
        recorder = Recorder(Path(workdir))
        for name, (recipe, toolset) in RECIPES.items():
            if names and name not in names:
                continue
            runner, run_id = recipe(recorder)
            recording = recorder.record(runner, run_id, toolset)
            (CORPUS / f"{name}.json").write_text(json.dumps(recording, indent=1, sort_keys=True, default=str) + "\n")
            print(f"{name}: {recording['status']}, {len(recording['events'])} events")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
