"""The agent loop as values: from a run's state and what just happened, the next state, the audit
events it says and what to do next. Pure: no I/O, no callbacks, nothing raised but refusals.

This module holds what every transition is made of: the next actions, the `Step` it hands out,
what the world said, and the `Draft` a transition is worked out in. The transitions: a model turn
in `replies.py` (each call it proposes judged in `judging.py`, several at once settled in
`batches.py`), a call's outcome in `call_outcomes.py`.

`driver.drive` does what a step asks (`CallModel`, `RunTool`), in order, and commits each step
whose next action is not a `RunTool`: a call's outcome belongs to the step that asked for it.
A person's request (approve, extend, retry, ...) is a transition too, in `requests.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from signoff.runtime.call_events import WhyAsked
from signoff.runtime.effects import Effect
from signoff.runtime.history import HistoryEntry, ToolError, ToolResult
from signoff.runtime.loop_events import LoopEvent, as_events, run_ended
from signoff.runtime.pending_calls import PendingCall
from signoff.runtime.schema import REOPENABLE, TERMINAL, RunState, Status, Usage
from signoff.runtime.schema import Stop as StopReason
from signoff.tools.base import Tool

# -- what to do next -------------------------------------------------------------------------------


@dataclass(frozen=True)
class CallModel:
    """Ask the policy for the next turn (after checking the budget: `budget_stop`)."""


@dataclass(frozen=True)
class RunTool:
    """Run this validated call, once, with its key; its outcome goes to `after_call`."""

    call: PendingCall
    tool: Tool
    retry: bool = False
    """A person asked to run again a call whose outcome was unknown."""
    in_turn: bool = False
    """Proposed by this turn and run without a person: its outcome counts towards a stall."""
    allowed_by: str | None = None
    """The policy rule that let this call run without a person; a side effect so allowed starts
    through the ledger with no approval to consume."""
    granted_by: str | None = None
    """The grant ("Approve + allow similar") that lets this call run unasked; the ledger checks it
    is still in force as the call starts."""

    @property
    def commits_first(self) -> bool:
        """Whether the step that proposed this call is committed before it runs: a side effect a
        rule or a grant let run unasked, so that its proposal and what allowed it are on record
        before it starts, as an approved one's are (a crash mid-call then finds the call it
        started, not the model's next)."""
        return (self.allowed_by is not None and self.tool.side_effect) or self.granted_by is not None


@dataclass(frozen=True)
class RunPreview:
    """Ask `tool` what `call` would do (`Tool.preview`: read-only, time-limited) before a person is
    asked about it; what it says goes to `after_preview`."""

    call: PendingCall
    tool: Tool
    why: WhyAsked | None = None
    """Why a person is asked about it once previewed, as the approval request's event says (None:
    one of a turn's calls, asked with the others once all are previewed)."""


@dataclass(frozen=True)
class ContinueBatch:
    """Take the next call of the turn being settled (`RunState.batch`): run the next one let run,
    pause on those that ask a person, or, once all are settled, go on to the model."""


@dataclass(frozen=True)
class AskApproval:
    """Pause: this side effect waits for a person."""

    call: PendingCall


@dataclass(frozen=True)
class Finish:
    """The run answered."""

    answer: str


@dataclass(frozen=True)
class Stop:
    """The run stopped short of an answer (ended, or waiting for a person's request)."""

    status: Status


Action = CallModel | RunTool | RunPreview | ContinueBatch | AskApproval | Finish | Stop


@dataclass(frozen=True)
class Step:
    """One transition: the state it leads to, the events it says, and what to do next."""

    state: RunState
    then: Action
    events: tuple[LoopEvent, ...] = ()
    execution: dict[str, Any] | None = None
    """The ledger outcome of a side effect settled in this transition."""
    effects: tuple[Effect, ...] = ()
    """What the transition does to approvals, applied by the store with the step."""

    def as_events(self) -> list[dict[str, Any]]:
        """`events` as the audit log keeps them: each written at the step the state is at (a
        transition records its events once its turn is counted: `Draft.evolve`)."""
        return as_events(self.events, run_id=self.state.run_id, step=self.state.steps)


# -- what the world said ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """What the policy returned, untrusted."""

    raw: Any


@dataclass(frozen=True)
class ModelFailed:
    """The policy could not answer: the stop reason and what it raised."""

    reason: str
    detail: str


# -- a transition being worked out -----------------------------------------------------------------


class Draft:
    """A transition being worked out: the state as it becomes and the events it says. Local to one
    transition function; what it hands out is a frozen `Step`.

    Changes are gathered and made into one new state when the state is next read, not copied in
    one by one: a transition makes several, and appending copies the whole history.
    """

    def __init__(self, state: RunState) -> None:
        self._state = state
        self._changes: dict[str, Any] = {}
        self._entries: list[HistoryEntry] = []
        self.events: list[LoopEvent] = []
        self.execution: dict[str, Any] | None = None
        self.effects: list[Effect] = []

    @property
    def state(self) -> RunState:
        """The state with every change so far."""
        if self._entries:
            self._changes["history"] = self._state.history + tuple(self._entries)
            self._entries = []
        if self._changes:
            self._state, self._changes = self._state.evolved(**self._changes), {}
        return self._state

    @property
    def steps(self) -> int:
        """`state.steps`, read without making the state."""
        steps: int = self._changes.get("steps", self._state.steps)
        return steps

    @property
    def usage(self) -> Usage:
        """`state.usage`, read without making the state."""
        usage: Usage = self._changes.get("usage", self._state.usage)
        return usage

    def evolve(self, **changes: Any) -> None:
        """`changes` are already-validated values of `RunState`'s fields (the history's excepted:
        entries are appended)."""
        # The events a step hands out are written at the step its state is at (`Step.as_events`).
        assert "steps" not in changes or not self.events, "a turn is counted before its events are recorded"
        self._changes.update(changes)

    def append(self, *entries: HistoryEntry) -> None:
        self._entries.extend(entries)

    def observe(self, entry: ToolResult | ToolError) -> None:
        """Tell the model what came of a call: now, or, for a call of the turn being settled, once
        every call of that turn is settled (then all of them, in the order they were made)."""
        batch = self._changes.get("batch", self._state.batch)
        placed = batch.settled(entry) if batch is not None and batch.step == entry.step else None
        if placed is None:
            self.append(entry)
            return
        if placed.first_unsettled() is None:
            self.append(*(call.outcome for call in placed.calls if call.outcome is not None))
            self.evolve(batch=None)
        else:
            self.evolve(batch=placed)

    def revise(self, call: PendingCall) -> None:
        """`call` (edited, asked afresh, its requirement raised) is the one the run waits on under
        its key: as its pending call, and in the turn being settled."""
        state = self.state
        if state.pending is not None and state.pending.key == call.key:
            self.evolve(pending=call)
        if state.batch is not None and state.batch.of(call.key) is not None:
            self.evolve(batch=state.batch.with_call(call.key, pending=call))

    def close_batch(self, reason: str) -> None:
        """The run ends with its turn's calls not all settled: the model is told, of each one left,
        that it was not made (the history keeps every call with an outcome)."""
        batch = self.state.batch
        assert batch is not None
        for call in batch.calls:
            if call.outcome is None:
                self.observe(ToolError.trusted(role="tool", step=batch.step, tool=call.tool, call_id=call.call_id,
                                               error=reason, error_kind="refused"))

    def record(self, event: LoopEvent) -> None:
        self.events.append(event)

    def then(self, action: Action) -> Step:
        return Step(self.state, action, tuple(self.events), self.execution, tuple(self.effects))

    def stop(self, status: Status, reason: str, **detail: Any) -> Step:
        stop = StopReason.model_validate({"reason": reason, "step": self.steps, **detail})
        # An ending keeps no call, but one a person may open again keeps the call to ask about again
        # (not one of a turn's several: the model is told of each of those as the turn closes).
        ended = status in TERMINAL and (status not in REOPENABLE or self.state.batch is not None)
        if status in TERMINAL and self.state.batch is not None:
            self.close_batch(f"not executed: the run ended ({status}) before this call was settled")
        self.evolve(status=status, stop=stop, **({"pending": None} if ended else {}))
        self.record(run_ended(status, self.usage, stop))
        return self.then(Stop(status))

    def go_on(self) -> Step:
        """The next action from the status the draft reached."""
        match self.state.status:
            case "running" if self.state.batch is not None:
                return self.then(ContinueBatch())
            case "running":
                return self.then(CallModel())
            case "awaiting_approval" if self.state.pending is not None:
                return self.then(AskApproval(self.state.pending))
            case "done":
                return self.then(Finish(self.state.answer or ""))
            case status:
                return self.then(Stop(status))


def charge_time(state: RunState, seconds: float) -> RunState:
    """`state` with `seconds` more of running time; waiting for a person is never charged."""
    if seconds <= 0:
        return state
    usage = state.usage
    return state.evolved(usage=usage.evolved(seconds=round(usage.seconds + seconds, 6)))
