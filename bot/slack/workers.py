"""The worker pool: runs execute here, never inside a Slack request, so every request is
acknowledged well inside Slack's 3-second limit."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Executor

from signoff.runtime.errors import IncompatibleState
from signoff.runtime.runner import Runner

log = logging.getLogger("signoff.bot.slack.workers")


class Workers:
    """Submits `runner.execute(run_id)` to a pool; at most one queued execution per run.

    A submit for a run that is executing right now schedules one more pass after it, so a
    command left while the run was finishing is not missed. A submit with the lease a decision
    took (`Decided.lease`) hands it to the run's next pass, queued already or not.
    """

    def __init__(self, runner: Runner, pool: Executor) -> None:
        self.runner, self.pool = runner, pool
        self._state: dict[str, str] = {}
        self._changed = threading.Condition()

    def submit(self, run_id: str) -> None:
        with self._changed:
            state = self._state.get(run_id)
            if state in ("queued", "again"):
                return
            if state == "running":
                self._state[run_id] = "again"
                return
            self._state[run_id] = "queued"
        self.pool.submit(self._execute, run_id)

    def _execute(self, run_id: str) -> None:
        with self._changed:
            self._state[run_id] = "running"
        try:
            status = self.runner.execute(run_id)
            log.debug("run %s: worker pass ended with %s", run_id, status)
        except IncompatibleState as exc:  # damaged or from a newer Signoff: an operator must look; no traceback
            log.error("run %s cannot be executed: %s", run_id, exc)
        except Exception:  # one broken run must not take the pool down; recovery retries it
            log.exception("run %s: execution failed", run_id)
        finally:
            with self._changed:
                again = self._state.pop(run_id, None) == "again"
                if again:
                    self._state[run_id] = "queued"
                self._changed.notify_all()
        if again:
            self.pool.submit(self._execute, run_id)

    def busy(self) -> bool:
        with self._changed:
            return bool(self._state)

    def drain(self, timeout: float = 10.0) -> bool:
        """Wait until nothing is queued or running; False if `timeout` passed first."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._state:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
        return True
