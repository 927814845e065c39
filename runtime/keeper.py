"""Keeping a run's state: the frozen value each transition replaces, its read-only JSON, and the
step's audit events and checkpoint. Pure; the base of `agent.Agent`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from signoff.runtime.checkpoints import Checkpoint, StateJson, StepRecord
from signoff.runtime.frozen import FrozenDict
from signoff.runtime.schema import TERMINAL, HistoryEntry, RunState, Status, Stop


class StateKeeper:
    """Holds the typed state (`run_state`) and hands it out as JSON (`state`), one step at a time."""

    def __init__(self, run: RunState, history_json: list[FrozenDict], *, clock: Callable[[], float],
                 on_event: Callable[[dict[str, Any]], None] | None,
                 on_checkpoint: Callable[[Checkpoint], None] | None) -> None:
        self.clock = clock
        self.on_event = on_event
        self.on_checkpoint = on_checkpoint
        self._run = run
        self._json = StateJson(history_json)
        self._view: FrozenDict | None = None
        self._step = StepRecord()
        self._mark = len(run.history)
        self._clock_mark: float | None = None

    def _restore(self, run: RunState, history_json: list[FrozenDict]) -> None:
        """Continue from a stored state (`history_json`: its entries' JSON)."""
        self._run, self._json, self._view, self._mark = run, StateJson(history_json), None, len(run.history)

    @property
    def run_state(self) -> RunState:
        """The typed state: a frozen value, replaced (never changed) by each transition."""
        return self._run

    @property
    def state(self) -> dict[str, Any]:
        """The state as JSON, read-only (writing raises `TypeError`): `state["pending"]["key"]`."""
        if self._view is None:
            self._view = self._json.view(self._run)
        return self._view

    @property
    def status(self) -> str:
        return self._run.status

    def _evolve(self, **changes: Any) -> None:
        """The next state: `changes` are already-validated values of `RunState`'s fields."""
        self._run = self._run.model_copy(update=changes)
        self._view = None

    def _append(self, *entries: HistoryEntry) -> None:
        self._json.append(entries)
        self._evolve(history=self._run.history + entries)

    def _charge_time(self) -> None:
        """Add the wall time spent running since the last charge; waiting for a human is never charged."""
        if self._clock_mark is not None:
            now, usage = self.clock(), self._run.usage
            self._evolve(usage=usage.model_copy(update={"seconds": round(usage.seconds + now - self._clock_mark, 6)}))
            self._clock_mark = now

    def _stop(self, status: Status, reason: str, **detail: Any) -> None:
        stop = Stop.model_validate({"reason": reason, "step": self._run.steps, **detail})
        self._evolve(status=status, stop=stop, **({"pending": None} if status in TERMINAL else {}))
        self._emit(_STOP_EVENTS[status], **{"usage": self._run.usage.to_json(), **stop.to_json()})
        self._commit()

    def _emit(self, event_type: str, **payload: Any) -> None:
        event = {"type": event_type, "run_id": self._run.run_id, "step": self._run.steps, **payload}
        self._step.events.append(event)
        if self.on_event is not None:
            self.on_event(event)

    def _commit(self) -> None:
        self._charge_time()
        step, self._step = self._step, StepRecord()
        start, self._mark = self._mark, len(self._run.history)
        if self.on_checkpoint is not None:
            self.on_checkpoint(Checkpoint(self.state, start, step.events, step.execution))


_STOP_EVENTS = {
    "budget_exhausted": "budget_exhausted",
    "stalled": "stalled",
    "failed": "failed",
    "cancelled": "cancelled",
    "expired": "expired",
    "needs_reconciliation": "needs_reconciliation",
}
