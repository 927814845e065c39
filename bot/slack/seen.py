"""Slash commands taken once: Slack retries a command, and a signed request replayed inside its
signature window verifies again, so each trigger id starts at most one run per process."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable


class SeenTriggers:
    """Slash-command trigger ids taken inside the signature window, with the run each started."""

    def __init__(self, window_s: float, clock: Callable[[], float]) -> None:
        self._window, self._clock = window_s, clock
        self._items: OrderedDict[str, tuple[float, str]] = OrderedDict()
        self._lock = threading.Lock()

    def claim(self, key: str | None) -> str | None:
        """None if `key` is new (and now taken); else the run it started ("" while starting)."""
        if not key:
            return None
        with self._lock:
            limit = self._clock() - self._window
            while self._items and next(iter(self._items.values()))[0] < limit:
                self._items.popitem(last=False)
            if key in self._items:
                return self._items[key][1]
            self._items[key] = (self._clock(), "")
        return None

    def settle(self, key: str | None, run_id: str) -> None:
        if key:
            with self._lock:
                self._items[key] = (self._clock(), run_id)

    def forget(self, key: str | None) -> None:
        if key:
            with self._lock:
                self._items.pop(key, None)
