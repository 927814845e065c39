"""Concurrency with separate processes: eight deciders on one approval, eight workers on one orphaned run.

Each worker process builds its own engine from the URL, then waits on a barrier so they all
hit the database at once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine
from store_harness import (
    APPROVER,
    REQUESTER,
    SEND,
    build_runner,
    decide_together,
    execute_together,
    init_worker,
    side_effects,
    worker_context,
)

from signoff.runtime.adapters.sql import SqlStore
from signoff.runtime.records import Decided
from signoff.runtime.runner import Runner

WORKERS = 8
ONLY_POSTGRES = pytest.mark.parametrize(
    "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pool() -> Iterator[ProcessPoolExecutor]:
    """Eight worker processes, lined up by one barrier per round."""
    context = worker_context()
    barrier = context.Barrier(WORKERS)
    with ProcessPoolExecutor(WORKERS, mp_context=context, initializer=init_worker, initargs=(barrier,)) as pool:
        yield pool


@pytest.fixture
def runner(engine: Engine, effects: Path) -> Runner:
    """A runner on the real clock, which the worker processes share."""
    return build_runner(SqlStore(engine), effects, lease=30.0)


def test_eight_processes_deciding_at_once_produce_one_decision(pool: ProcessPoolExecutor, database_url: str,
                                                               runner: Runner, effects: Path) -> None:
    run = runner.start_run("tell Ana", REQUESTER)
    assert runner.execute(run.run_id) == "awaiting_approval"
    approval = runner.pending_approval(run.run_id)
    users = [f"U_APPROVER_{i}" for i in range(WORKERS)]
    futures = [pool.submit(decide_together, database_url, str(effects), approval.approval_id, approval.digest, u)
               for u in users]
    results = [f.result(timeout=120) for f in futures]

    assert Counter(r["outcome"] for r in results) == {"Decided": 1, "AlreadyDecided": WORKERS - 1}
    [winner] = [r["user"] for r in results if r["outcome"] == "Decided"]
    assert {(r["status"], r["decided_by"]) for r in results} == {("approved", winner)}
    recorded = [e for e in runner.timeline(run.run_id) if e["type"] == "approval_recorded"]
    assert [e["by"] for e in recorded] == [winner]
    assert runner.execute(run.run_id) == "done"
    assert side_effects(effects) == [(SEND, approval.key)]


@ONLY_POSTGRES
def test_eight_workers_recovering_one_orphaned_run_claim_it_once(pool: ProcessPoolExecutor, database_url: str,
                                                                 runner: Runner, effects: Path) -> None:
    run = runner.start_run("tell Ana", REQUESTER)
    assert runner.execute(run.run_id) == "awaiting_approval"
    approval = runner.pending_approval(run.run_id)
    assert isinstance(runner.decide(approval.approval_id, approval.digest, APPROVER, True), Decided)
    # A worker took the run and died: its lease ran out a minute ago.
    runner.store.claim(run.run_id, "dead-worker", timedelta(minutes=-1))
    assert run.run_id in runner.store.runs_needing_work()

    futures = [pool.submit(execute_together, database_url, str(effects), run.run_id) for _ in range(WORKERS)]
    statuses = [f.result(timeout=120) for f in futures]

    assert Counter(statuses) == {"done": 1, None: WORKERS - 1}
    assert side_effects(effects) == [(SEND, approval.key)]
    started = [e for e in runner.timeline(run.run_id) if e["type"] == "execution_started"]
    assert len(started) == 1
    assert runner.get_run(run.run_id).lease_owner is None
