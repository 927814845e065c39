"""How often a key may ask: a token bucket per key, in this process.

Each `signoff serve` process keeps its own buckets (several replicas let a key make that many
requests on each): the limit keeps one runaway program from crowding out the others and Slack, it
is not a quota.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class RateLimit:
    """`per_minute` requests a minute for each key, up to that many at once after a quiet minute."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity, self.refill = float(per_minute), per_minute / 60.0
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def wait_for(self, key: str) -> float:
        """Take one request for `key`: 0 when it may go now, else the seconds until it may."""
        now = self.clock()
        with self._lock:
            tokens, at = self._buckets.get(key, (self.capacity, now))
            tokens = min(self.capacity, tokens + (now - at) * self.refill)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                return 0.0
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / self.refill
