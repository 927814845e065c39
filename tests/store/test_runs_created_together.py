"""Runs started at the same moment (a burst of `/signoff <goal>`) are created together, in one
transaction of several where the store can: every one of them is created once, a replayed request
among them gets its first run, and the audit log's chains verify. On SQLite, PostgreSQL and in memory."""

from __future__ import annotations

import threading
from pathlib import Path

from store_harness import REQUESTER, build_runner

from signoff.runtime.adapters.sql import SqlStore
from signoff.runtime.audit_verify import verify
from signoff.runtime.ports import Store
from signoff.runtime.records import RunRecord

STARTERS = 24


def start_together(runner, requests: list[str | None]) -> list[RunRecord]:
    """Start one run per request id at once, from as many threads; the runs, in order."""
    barrier, made = threading.Barrier(len(requests)), [None] * len(requests)
    errors: list[BaseException] = []

    def start(index: int, request_id: str | None) -> None:
        barrier.wait()
        try:
            made[index] = runner.start_run(f"goal {index}", REQUESTER, request_id=request_id)
        except BaseException as exc:  # reported below, with the others
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(i, r)) for i, r in enumerate(requests)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    return made  # type: ignore[return-value]


def test_runs_started_at_once_are_each_created_once_and_the_audit_log_verifies(store: Store, effects: Path) -> None:
    runner = build_runner(store, effects, lease=30.0)
    made = start_together(runner, [f"trigger-{i}" for i in range(STARTERS)])
    assert len({run.run_id for run in made}) == STARTERS
    for index, run in enumerate(made):
        stored = store.get_run(run.run_id)
        assert stored is not None and stored.goal == f"goal {index}" and stored.request_id == f"trigger-{index}"
    assert len(store.list_runs(limit=1000)) == STARTERS
    assert verify(store.audit_records()) is None


def test_a_request_replayed_beside_others_gets_its_first_run_and_the_others_theirs(store: Store, effects: Path) -> None:
    runner = build_runner(store, effects, lease=30.0)
    first = runner.start_run("the first", REQUESTER, request_id="trigger-replayed")
    requests: list[str | None] = ["trigger-replayed", "trigger-new", None, "trigger-twice", "trigger-twice"]
    made = start_together(runner, requests)
    assert made[0].run_id == first.run_id, "a replay returns the run its first delivery started"
    assert made[3].run_id == made[4].run_id, "one request delivered twice at once starts one run"
    assert len({made[1].run_id, made[2].run_id, made[3].run_id, first.run_id}) == 4
    assert len(store.list_runs(limit=1000)) == 4
    assert verify(store.audit_records()) is None


def test_two_replicas_delivered_the_same_requests_at_once_start_one_run_for_each(
        sql_store: SqlStore, effects: Path) -> None:
    replica_a = build_runner(sql_store, effects, lease=30.0, worker_id="replica-a")
    replica_b = build_runner(SqlStore(sql_store.engine, clock=sql_store.clock), effects, lease=30.0,
                             worker_id="replica-b")
    requests = [f"trigger-{i}" for i in range(8)]
    barrier, made = threading.Barrier(2), {}

    def deliver(name: str, runner) -> None:
        barrier.wait()
        made[name] = start_together(runner, list(requests))

    threads = [threading.Thread(target=deliver, args=(name, runner))
               for name, runner in (("a", replica_a), ("b", replica_b))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert [run.run_id for run in made["a"]] == [run.run_id for run in made["b"]]
    assert len(sql_store.list_runs(limit=1000)) == len(requests)
    assert verify(sql_store.audit_records()) is None
