"""Keeping a run's lease while a worker drives it."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

from signoff.runtime.ports import RunStore

log = logging.getLogger("signoff.runner")


class Heartbeat:
    """Renews the run's lease while a worker drives it, so a long tool call is not taken for a crash."""

    def __init__(self, store: RunStore, run_id: str, owner: str, lease: timedelta) -> None:
        self._store, self._run_id, self._owner, self._lease = store, run_id, owner, lease
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"lease-{run_id}", daemon=True)

    def _beat(self) -> None:
        interval = max(self._lease.total_seconds() / 3, 0.05)
        while not self._stop.wait(interval):
            try:
                if not self._store.renew(self._run_id, self._owner, self._lease):
                    return
            except Exception as exc:  # a database hiccup: the next beat tries again
                log.warning("run %s: lease renewal failed: %s", self._run_id, exc)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
