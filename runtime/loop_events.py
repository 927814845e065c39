"""The audit events the agent loop writes, as a tagged union (`LoopEvent`): one frozen type for each
kind, so that a transition cannot misspell a field, leave one out or give one of the wrong type.
Pure.

A transition records them on its `loop.Draft`; the step it hands out keeps them typed, and what the
stores write, `Checkpoint.events` hands out and `on_event` hears is `as_events` of them: each with
the run's id and the step after its `type`, then its fields, the JSON the loop has always written.
This module holds the events of the run as a whole (started, a model turn, extended, retried,
finished or ended); those of one call are in `call_events.py`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from signoff.runtime.call_events import CallEvent
from signoff.runtime.events import ENDINGS, FLAT, EventType, TypedEvent, ending, event
from signoff.runtime.schema import BudgetLimits, Status, Usage
from signoff.runtime.schema import Stop as StopReason


@dataclass(frozen=True, kw_only=True)
class RunStarted(TypedEvent):
    type: ClassVar[EventType] = "run_started"
    goal: str
    budget: BudgetLimits


# -- a model turn ----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ToolDecision(TypedEvent):
    """The model proposed a call: `args` as it gave them, secrets redacted."""

    type: ClassVar[EventType] = "decision"
    kind: Literal["tool"] = field(default="tool", init=False)
    tool: str
    args: Any
    """Any JSON: the model's, not yet checked against the tool."""


@dataclass(frozen=True, kw_only=True)
class FinalDecision(TypedEvent):
    """The model answered (the answer is in the `finished` event that follows)."""

    type: ClassVar[EventType] = "decision"
    kind: Literal["final"] = field(default="final", init=False)


@dataclass(frozen=True, kw_only=True)
class MalformedDecision(TypedEvent):
    """The model's reply was not a turn; `error` is what the model is told."""

    type: ClassVar[EventType] = "decision"
    kind: Literal["malformed"] = field(default="malformed", init=False)
    error: str


@dataclass(frozen=True, kw_only=True)
class VersionsChanged(TypedEvent):
    """The tools or the policy the model's turns saw, before this turn and now."""

    type: ClassVar[EventType] = "versions_changed"
    was: Mapping[str, Any]
    now: Mapping[str, Any]


# -- what people did of the run --------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class BudgetExtended(TypedEvent):
    type: ClassVar[EventType] = "budget_extended"
    limits: Mapping[str, float]
    """The limits raised, as the person gave them."""


@dataclass(frozen=True, kw_only=True)
class Retried(TypedEvent):
    type: ClassVar[EventType] = "retried"
    previous: StopReason | None
    """Why the run had stopped (None: it kept no reason)."""


# -- the run's end ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Finished(TypedEvent):
    type: ClassVar[EventType] = "finished"
    answer: str
    usage: Usage


@dataclass(frozen=True, kw_only=True)
class Ended(TypedEvent):
    """The run stopped short of an answer: its usage, then why, as its state keeps it (`stop`:
    the reason, the step and the details of its kind of ending). Each kind of ending is a type
    of its own, named by the status the run stops in (`events.ending`)."""

    type: ClassVar[EventType]
    usage: Usage
    stop: StopReason = field(metadata=FLAT)


@dataclass(frozen=True, kw_only=True)
class BudgetExhausted(Ended):
    type: ClassVar[EventType] = "budget_exhausted"


@dataclass(frozen=True, kw_only=True)
class Stalled(Ended):
    type: ClassVar[EventType] = "stalled"


@dataclass(frozen=True, kw_only=True)
class Failed(Ended):
    type: ClassVar[EventType] = "failed"


@dataclass(frozen=True, kw_only=True)
class NeedsReconciliation(Ended):
    type: ClassVar[EventType] = "needs_reconciliation"


@dataclass(frozen=True, kw_only=True)
class Cancelled(Ended):
    type: ClassVar[EventType] = "cancelled"


@dataclass(frozen=True, kw_only=True)
class Expired(Ended):
    type: ClassVar[EventType] = "expired"


_ENDED_AS: Mapping[EventType, type[Ended]] = {kind.type: kind for kind in (
    BudgetExhausted, Stalled, Failed, NeedsReconciliation, Cancelled, Expired)}
assert set(_ENDED_AS) == set(ENDINGS.values()), "every ending has its type, and only those"


def run_ended(status: Status, usage: Usage, stop: StopReason) -> Ended:
    """The event of a run's stop in `status` (a status no run stops in is a programming error)."""
    return _ENDED_AS[ending(status)](usage=usage, stop=stop)


RunEvent = (RunStarted | ToolDecision | FinalDecision | MalformedDecision | VersionsChanged | BudgetExtended
            | Retried | Finished | Ended)
"""Every event the loop writes of the run as a whole (an ending: one of `Ended`'s six kinds)."""

LoopEvent = RunEvent | CallEvent
"""Every event the agent loop writes."""


def as_events(events: Iterable[LoopEvent], *, run_id: str, step: int) -> list[dict[str, Any]]:
    """`events` as the audit log keeps them: each with the run and the step it was written at, after
    its `type`. (An ending's own `step`, its stop's, is that step.)"""
    return [{**event(said.type, run_id=run_id, step=step), **said.written()} for said in events]
