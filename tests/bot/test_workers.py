from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from signoff.bot.slack.workers import Workers


class GatedRunner:
    """Stands in for `Runner.execute`: records each pass and holds it until the test lets it go."""

    def __init__(self) -> None:
        self.passes: list[str] = []
        self.leases: list[str | None] = []
        self.started = threading.Event()
        self.gate = threading.Event()

    def execute(self, run_id: str, lease: str | None = None) -> str:
        self.passes.append(run_id)
        self.leases.append(lease)
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

        def execute(self, run_id: str, lease: str | None = None) -> str:
            self.calls += 1
            raise RuntimeError("database went away")

    runner, pool = Broken(), ThreadPoolExecutor(max_workers=1)
    workers = Workers(runner, pool)
    workers.submit("run-1")
    assert workers.drain(5)
    workers.submit("run-1")
    assert workers.drain(5) and runner.calls == 2 and not workers.busy()
    pool.shutdown()


def test_a_lease_a_decision_took_reaches_the_pass_already_queued_for_the_run():
    """A recovery sweep queued the run, then a click decided it and took its lease: the one pass
    must drive under that lease, or it would find the run held and leave it until the lease lapsed."""
    runner, pool = GatedRunner(), ThreadPoolExecutor(max_workers=1)
    blocker = GatedRunner()
    workers = Workers(runner, pool)
    pool.submit(blocker.gate.wait, 5)
    workers.submit("run-1")
    workers.submit("run-1", lease="replica-a/1f2e3d")
    blocker.gate.set()
    runner.gate.set()
    assert workers.drain(5)
    assert runner.passes == ["run-1"] and runner.leases == ["replica-a/1f2e3d"]
    pool.shutdown()
