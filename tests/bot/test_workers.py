from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from signoff.bot.slack.workers import Workers


class GatedRunner:
    """Stands in for `Runner.execute`: records each pass and holds it until the test lets it go."""

    def __init__(self) -> None:
        self.passes: list[str] = []
        self.started = threading.Event()
        self.gate = threading.Event()

    def execute(self, run_id: str) -> str:
        self.passes.append(run_id)
        self.started.set()
        self.gate.wait(5)
        return "done"


def test_a_run_queued_twice_executes_once():
    runner, pool = GatedRunner(), ThreadPoolExecutor(max_workers=1)
    blocker = GatedRunner()
    workers = Workers(runner, pool)
    pool.submit(blocker.gate.wait, 5)  # keep the only thread busy so both submits queue
    workers.submit("run-1")
    workers.submit("run-1")
    blocker.gate.set()
    runner.gate.set()
    assert workers.drain(5)
    assert runner.passes == ["run-1"]
    pool.shutdown()


def test_a_submit_while_running_schedules_one_more_pass():
    runner, pool = GatedRunner(), ThreadPoolExecutor(max_workers=2)
    workers = Workers(runner, pool)
    workers.submit("run-1")
    assert runner.started.wait(5)
    workers.submit("run-1")  # e.g. a Cancel pressed while the run was finishing
    workers.submit("run-1")
    runner.gate.set()
    assert workers.drain(5)
    assert runner.passes == ["run-1", "run-1"]
    pool.shutdown()


def test_a_failing_pass_does_not_stop_the_pool():
    class Broken:
        def __init__(self) -> None:
            self.calls = 0

        def execute(self, run_id: str) -> str:
            self.calls += 1
            raise RuntimeError("database went away")

    runner, pool = Broken(), ThreadPoolExecutor(max_workers=1)
    workers = Workers(runner, pool)
    workers.submit("run-1")
    assert workers.drain(5)
    workers.submit("run-1")
    assert workers.drain(5) and runner.calls == 2 and not workers.busy()
    pool.shutdown()


def test_a_run_decided_while_a_pass_is_queued_for_it_is_driven_by_that_one_pass():
    """A recovery sweep queued the run, then a click decided it and took its lease: the edge only
    says "drive run-1" again, and the one queued pass drives it (the runner redeems the lease its
    decision took: tests/store/test_decider_drives.py), with no second pass behind it."""
    runner, pool = GatedRunner(), ThreadPoolExecutor(max_workers=1)
    blocker = GatedRunner()
    workers = Workers(runner, pool)
    pool.submit(blocker.gate.wait, 5)
    workers.submit("run-1")
    workers.submit("run-1")
    blocker.gate.set()
    runner.gate.set()
    assert workers.drain(5)
    assert runner.passes == ["run-1"]
    pool.shutdown()
