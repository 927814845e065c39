"""What one step hands to `on_checkpoint`, and the read-only JSON of a run's state. Pure."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from signoff.runtime.frozen import FrozenDict, FrozenList, frozen
from signoff.runtime.schema import RunState, Value


@dataclass(frozen=True)
class Checkpoint:
    """What one step changed, handed to `on_checkpoint` before the next policy call."""

    state: dict[str, Any]
    """The state after the step, as read-only JSON (`StateJson.view`): what the store saves."""
    history_start: int
    """Index in `state["history"]` of the first entry this step appended."""
    events: list[dict[str, Any]]
    execution: dict[str, Any] | None = None
    """The outcome of a side-effecting call made in this step: key, tool, ok, result or error, seconds."""
    history_end: int | None = None
    """Index just past this step's last entry (None: the end of `state["history"]` as it is read)."""

    @property
    def new_history(self) -> list[dict[str, Any]]:
        history: list[dict[str, Any]] = self.state["history"]
        return history[self.history_start : self.history_end]


@dataclass
class StepRecord:
    """What the step in progress produced so far: its audit events and a side effect's outcome."""

    events: list[dict[str, Any]] = field(default_factory=list)
    execution: dict[str, Any] | None = None


_HEADER = tuple(name for name in RunState.model_fields if name != "history")


class StateJson:
    """A run's state as read-only JSON, made as it grows: each history entry once, when appended,
    and each other field again only when its value was replaced (values are frozen, so the same
    object has the same JSON). A step then costs the same early in a run and a thousand steps in.

    Every view shares one read-only history list, which grows as entries are appended (as the
    state a checkpoint hands out always did): read a view, do not keep it.
    """

    def __init__(self, history: list[FrozenDict]) -> None:
        self.history = FrozenList(history)
        self._fields: dict[str, tuple[Any, Any]] = {}

    def append(self, entries: Iterable[Value]) -> None:
        list.extend(self.history, (frozen(entry.to_json()) for entry in entries))  # ours to grow; read-only to others

    def view(self, run: RunState) -> FrozenDict:
        stale = {name for name in _HEADER if (cached := self._fields.get(name)) is None
                 or cached[0] is not getattr(run, name)}
        if stale:
            dumped = run.model_dump(mode="python", include=stale, exclude_unset=True)
            self._fields.update({name: (getattr(run, name), frozen(dumped[name])) for name in stale})
        return FrozenDict({**{name: self._fields[name][1] for name in _HEADER}, "history": self.history})
