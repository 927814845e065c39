"""The runs a worker let pause, kept as it left them, so that the pass a decision starts resumes one
without reading, parsing and checking its whole history again: the approval then costs the same a
thousand steps into a run as ten.

A kept run is used only while it is still the run as stored: the same version (every write of a
run's state makes a new one, whoever makes it) and the same state apart from the history. Anything
else (another replica went on with the run, a newer release upgraded it) is read from the store.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from signoff.runtime.records import RunRecord
from signoff.runtime.schema import RunState

MAX_RUNS = 64
"""Runs kept at most; the least recently kept goes first."""
MAX_ENTRIES = 50_000
"""History entries kept at most over all kept runs, so a few very long runs cannot hold the memory."""


@dataclass(frozen=True)
class Kept:
    version: int
    checked: RunState
    state: Mapping[str, Any]
    """The state's read-only JSON as the agent left it (`Agent.state`); its history no longer grows."""

    def holds_for(self, run: RunRecord) -> bool:
        """Whether this is `run`'s state, as read without its history."""
        return (run.version == self.version
                and {k: v for k, v in run.state.items() if k != "history"}
                == {k: v for k, v in self.state.items() if k != "history"})


class KeptRuns:
    """What one worker last saved of the runs it let pause, by run id; safe from several threads."""

    def __init__(self, max_runs: int = MAX_RUNS, max_entries: int = MAX_ENTRIES) -> None:
        self.max_runs, self.max_entries = max_runs, max_entries
        self._kept: OrderedDict[str, Kept] = OrderedDict()
        self._entries = 0
        self._lock = threading.Lock()

    def keep(self, run_id: str, version: int, checked: RunState, state: Mapping[str, Any]) -> None:
        kept = Kept(version, checked, state)
        with self._lock:
            self._drop(run_id)
            self._kept[run_id] = kept
            self._entries += _size(kept)
            while self._kept and (len(self._kept) > self.max_runs or self._entries > self.max_entries):
                self._drop(next(iter(self._kept)))

    def holds(self, run_id: str) -> bool:
        """Whether something is kept of `run_id` (it may no longer be the run as stored)."""
        with self._lock:
            return run_id in self._kept

    def forget(self, run_id: str) -> None:
        with self._lock:
            self._drop(run_id)

    def whole(self, run: RunRecord) -> RunRecord | None:
        """`run`, read without its history, made whole from what was kept of it; None if nothing
        kept is its state as stored."""
        with self._lock:
            kept = self._kept.get(run.run_id)
        if kept is None or not kept.holds_for(run):
            return None
        return dataclasses.replace(run, state=dict(kept.state), checked=kept.checked)

    def _drop(self, run_id: str) -> None:
        kept = self._kept.pop(run_id, None)
        if kept is not None:
            self._entries -= _size(kept)


def _size(kept: Kept) -> int:
    return len(kept.state.get("history") or ()) + 1
