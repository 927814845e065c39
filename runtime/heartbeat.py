"""Keeping a run's lease while a worker drives it.

One thread beats for every run this process drives, instead of a thread per pass: starting and
joining a thread cost about a tenth of an approval's whole round trip (`BENCHMARKS.md`), and most
passes end long before their first beat is due. Renewals are made one after another, so a
renewal the database holds up delays the others; each lease is renewed with two thirds of it
still ahead, which leaves that much time.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from signoff.runtime.ports import RunStore

log = logging.getLogger("signoff.runner")

MIN_INTERVAL_S = 0.05
"""The shortest time between two beats of one lease, whatever the lease."""
RENEWAL_WAIT_S = 5.0
"""How long a pass's end waits for a renewal of its lease that is under way."""


@dataclass
class _Beat:
    store: RunStore
    run_id: str
    owner: str
    lease: timedelta
    interval: float
    live: bool = field(default=True)


class _Beats:
    """The one beating thread: renews each registered lease a third of a lease after the last
    renewal, earliest first. It is started at the first registration and sleeps while none is due."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._due: list[tuple[float, int, _Beat]] = []
        self._order = itertools.count()
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._renewing: _Beat | None = None

    def add(self, beat: _Beat) -> None:
        with self._changed:
            heapq.heappush(self._due, (self._clock() + beat.interval, next(self._order), beat))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name="lease-heartbeat", daemon=True)
                self._thread.start()
            self._changed.notify()

    def remove(self, beat: _Beat) -> None:
        """Stop renewing `beat`, once a renewal of it under way has ended: after this, nothing of
        the pass touches the database on its behalf (a pass's end may be its store's end)."""
        with self._changed:
            beat.live = False
            # Bounded, as joining a thread of its own was: a database that hangs a renewal must not
            # also hang the pass's end (its lease then lapses, and the ledger fences any other pass).
            self._changed.wait_for(lambda: self._renewing is not beat, timeout=RENEWAL_WAIT_S)

    def _serve(self) -> None:
        while True:
            beat = self._next_due()
            try:
                renewed = beat.store.renew(beat.run_id, beat.owner, beat.lease)
            except Exception as exc:  # a database hiccup: the next beat tries again
                log.warning("run %s: lease renewal failed: %s", beat.run_id, exc)
                renewed = True
            with self._changed:
                self._renewing = None
                if renewed and beat.live:  # a lease lost to another worker is not beaten again
                    heapq.heappush(self._due, (self._clock() + beat.interval, next(self._order), beat))
                self._changed.notify_all()

    def _next_due(self) -> _Beat:
        with self._changed:
            while True:
                while self._due and not self._due[0][2].live:
                    heapq.heappop(self._due)
                wait = self._due[0][0] - self._clock() if self._due else None
                if wait is not None and wait <= 0:
                    self._renewing = heapq.heappop(self._due)[2]
                    return self._renewing
                self._changed.wait(wait)


_BEATS = _Beats()


def _forget_in_child() -> None:
    """A forked child drives none of its parent's runs: it must not keep their leases alive (a
    parent that died would hold its runs for as long as the child lives), nor inherit a lock
    another thread held at the fork."""
    global _BEATS
    _BEATS = _Beats()


os.register_at_fork(after_in_child=_forget_in_child)


class Heartbeat:
    """Renews the run's lease while a worker drives it, so a long tool call is not taken for a crash."""

    def __init__(self, store: RunStore, run_id: str, owner: str, lease: timedelta) -> None:
        self._beat = _Beat(store, run_id, owner, lease, max(lease.total_seconds() / 3, MIN_INTERVAL_S))

    def __enter__(self) -> Heartbeat:
        _BEATS.add(self._beat)
        return self

    def __exit__(self, *exc: object) -> None:
        _BEATS.remove(self._beat)
