"""What one step hands to `on_checkpoint`, and the read-only JSON of a run's state. Pure."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from signoff.runtime.effects import Effect
from signoff.runtime.frozen import SCALARS, FrozenDict, FrozenList, frozen
from signoff.runtime.schema import RunState
from signoff.runtime.values import Value


@dataclass(frozen=True)
class Checkpoint:
    """What one step changed, handed to `on_checkpoint` before the next policy call."""

    state: dict[str, Any]
    """The state after the step, as read-only JSON (`StateJson.view`): what the store saves. Its
    history list is the run's own and grows as the run goes on: read it while the step is saved, and
    take this step's entries from `new_history`."""
    history_start: int
    """Index in `state["history"]` of the first entry this step appended."""
    events: list[dict[str, Any]]
    execution: dict[str, Any] | None = None
    """The outcome of a side-effecting call made in this step: key, tool, ok, result or error, seconds."""
    history_end: int | None = None
    """Index just past this step's last entry (None: the end of `state["history"]` as it is read)."""
    effects: tuple[Effect, ...] = ()
    """What the step does to approvals (`effects`), applied by the store in the same write."""
    last: bool = False
    """The driver stops after this step: the run pauses or ends here, unless whoever drives it acts
    again (a store may then let go of the run in the same write)."""

    @property
    def new_history(self) -> list[dict[str, Any]]:
        history: list[dict[str, Any]] = self.state["history"]
        return history[self.history_start : self.history_end]


@dataclass
class StepRecord:
    """What the step in progress produced so far: its audit events and a side effect's outcome."""

    events: list[dict[str, Any]] = field(default_factory=list)
    execution: dict[str, Any] | None = None
    effects: list[Effect] = field(default_factory=list)


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
        self._sources: dict[str, Any] = dict.fromkeys(_HEADER, _UNSEEN)
        """The value each field of `_header` was made from."""
        self._header: dict[str, Any] = {}
        self._shared: dict[str, tuple[Value, FrozenDict]] = {}
        """By field: the latest value inside an entry and its JSON, which the next entry often
        shares (a run's turns mostly have the same `versions`)."""

    def append(self, entries: Iterable[Value]) -> None:
        list.extend(self.history, map(self._entry_json, entries))  # ours to grow; read-only to others

    def view(self, run: RunState) -> FrozenDict:
        sources, header, fields_set = self._sources, self._header, run.__pydantic_fields_set__
        for name, value in run.__dict__.items():
            if sources.get(name) is not value and name != "history" and name in fields_set:
                # A field a run was made without (`batch`, until its first turn of several calls)
                # stays out of its JSON, as `to_json` leaves it out.
                sources[name], header[name] = value, value if type(value) in SCALARS else _frozen_field(value)
        view = FrozenDict(header)
        dict.__setitem__(view, "history", self.history)  # ours to fill; read-only to others
        return view

    def _entry_json(self, entry: Value) -> FrozenDict:
        """`frozen_json(entry)`, with the JSON of a value it shares with the previous entry shared too."""
        fields_set, shared, json = entry.__pydantic_fields_set__, self._shared, {}
        for name, item in entry.__dict__.items():
            if name not in fields_set:
                continue
            if type(item) in SCALARS:
                json[name] = item
            elif isinstance(item, Value):
                known = shared.get(name)
                if known is None or known[0] is not item:
                    known = shared[name] = (item, frozen_json(item))
                json[name] = known[1]
            else:
                json[name] = frozen(item)  # an entry's containers are JSON: arguments, a result
        return FrozenDict(json)


_UNSEEN: Any = object()


def frozen_json(value: Value) -> FrozenDict:
    """`frozen(value.to_json())` in one pass, straight from the fields (each history entry is made
    into this once, so it is worth not making the plain JSON first)."""
    fields_set = value.__pydantic_fields_set__
    return FrozenDict({name: item if type(item) in SCALARS else _frozen_field(item)
                       for name, item in value.__dict__.items() if name in fields_set})


def _frozen_field(value: Any) -> Any:
    if isinstance(value, Value):
        return frozen_json(value)
    if type(value) is dict and any(isinstance(item, Value) for item in value.values()):
        return FrozenDict({key: _frozen_field(item) for key, item in value.items()})  # e.g. fingerprints
    if type(value) is list and any(isinstance(item, Value) for item in value):
        return FrozenList([_frozen_field(item) for item in value])  # e.g. a batch's calls
    return frozen(value)
