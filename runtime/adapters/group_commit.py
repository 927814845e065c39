"""Group commit: writes that arrive while another is being written are written together, in one
transaction, by one of their callers; each caller returns once the transaction holding its write
has committed (or raises what it raised).

A burst of new runs (a hundred `/signoff <goal>` at once) then takes the database's write lock, the
audit chain's head row and a commit's sync a few times instead of a hundred, while one caller alone
still writes at once: nobody waits for a timer to fill a batch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

MAX_BATCH = 64
"""Writes in one transaction at most: a batch's transaction must stay short, since every caller in it waits."""


class _Waiting(Generic[T, R]):
    def __init__(self, item: T) -> None:
        self.item = item
        self.done = threading.Event()
        self.leads = False
        """Woken to write the next batch rather than with a result."""
        self.result: R | None = None
        self.error: BaseException | None = None


class GroupCommit(Generic[T, R]):
    """Writes items with `write`, which takes a batch and returns each item's result (or the
    exception for that item alone) in order; an exception it raises fails the whole batch."""

    def __init__(self, write: Callable[[Sequence[T]], Sequence[R | BaseException]], max_batch: int = MAX_BATCH) -> None:
        self._write, self._max = write, max_batch
        self._queue: list[_Waiting[T, R]] = []
        self._writing = False
        self._lock = threading.Lock()

    def submit(self, item: T) -> R:
        waiting: _Waiting[T, R] = _Waiting(item)
        with self._lock:
            self._queue.append(waiting)
            leads = not self._writing
            self._writing = True
        if not leads:
            waiting.done.wait()
        if leads or waiting.leads:
            self._write_batch()
            waiting.done.wait()  # written by the batch just made, or by a leader before it
        if waiting.error is not None:
            raise waiting.error
        return waiting.result  # type: ignore[return-value]

    def _write_batch(self) -> None:
        """Write the oldest waiting items, then hand the writing on to the oldest still waiting."""
        with self._lock:
            batch, self._queue = self._queue[:self._max], self._queue[self._max:]
        try:
            results = list(self._write([w.item for w in batch]))
            if len(results) != len(batch):
                raise RuntimeError(f"a group commit wrote {len(results)} results for {len(batch)} items")
        except BaseException as exc:  # the whole transaction failed: every write in it did
            results = [exc] * len(batch)
        for waiting, result in zip(batch, results, strict=True):
            if isinstance(result, BaseException):
                waiting.error = result
            else:
                waiting.result = result
            waiting.done.set()
        with self._lock:
            if self._queue:
                following = self._queue[0]
                following.leads = True
                following.done.set()
            else:
                self._writing = False
