"""The run state as typed, frozen, validated values: the one definition of its shape (version 2).

Its statuses and the run as a whole are here; what it is made of, each in its own module: the
values themselves (`values.py`), the history's entries (`history.py`) and the calls the run holds
on to (`pending_calls.py`).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Annotated, Any, Final, Literal, get_args

from pydantic import Field, JsonValue

from signoff.runtime.history import HistoryEntry
from signoff.runtime.pending_calls import Batch, PendingCall
from signoff.runtime.values import Count, Value

SCHEMA_VERSION: Final = 2
"""The version this code writes; version 1 is upgraded when read (`state_versions.upgrade`)."""

Status = Literal[
    "idle", "running", "awaiting_approval", "done", "budget_exhausted", "failed", "cancelled", "expired",
    "needs_reconciliation", "stalled", "awaiting_caller",
]
StatusGroup = Literal["active", "waiting_on_human", "waiting_on_caller", "terminal"]
STATUS_GROUPS: MappingProxyType[str, StatusGroup] = MappingProxyType({
    "idle": "active", "running": "active",
    "awaiting_approval": "waiting_on_human", "budget_exhausted": "waiting_on_human", "failed": "waiting_on_human",
    "needs_reconciliation": "waiting_on_human", "stalled": "waiting_on_human",
    "awaiting_caller": "waiting_on_caller",
    "done": "terminal", "cancelled": "terminal", "expired": "terminal",
})
"""Every status in exactly one group: the sets below are derived from this table, nowhere else."""
STATUSES: tuple[str, ...] = get_args(Status)
assert set(STATUS_GROUPS) == set(STATUSES), "every status belongs to exactly one group"
ACTIVE: frozenset[str] = frozenset(s for s, g in STATUS_GROUPS.items() if g == "active")
"""Statuses a worker moves on by itself (not started yet, or running)."""
WAITING_ON_HUMAN: frozenset[str] = frozenset(s for s, g in STATUS_GROUPS.items() if g == "waiting_on_human")
"""Statuses where the run keeps its state and waits for a person (decide, extend, retry, reconcile)."""
WAITING_ON_CALLER: frozenset[str] = frozenset(s for s, g in STATUS_GROUPS.items() if g == "waiting_on_caller")
"""Statuses where the run's call is its caller's to run (an approval asked for over the API): no
worker runs it, and nobody is told the run stopped; the caller starts the call and reports its outcome."""
TERMINAL: frozenset[str] = frozenset(s for s, g in STATUS_GROUPS.items() if g == "terminal")
"""Statuses a run ends in: no worker moves it on by itself, and it leaves them only as `REOPENABLE` says."""
REOPENABLE: frozenset[str] = frozenset({"expired"})
"""Endings a person may open again: a run that expired keeps the call nobody decided, and its
requester may ask for it again (a fresh approval, the run going on from where it paused)."""
assert REOPENABLE <= TERMINAL
STOPPED: frozenset[str] = WAITING_ON_HUMAN - {"awaiting_approval"}
"""Waiting on a person without a call to decide: the run stopped short of an answer (out of budget,
stalled, failed, unreconciled) until someone extends, retries or reconciles it."""

Number = Annotated[int | float, Field(gt=0)]
"""A positive limit; an int stays an int (a budget given as 5 is written back as 5, not 5.0)."""


class Usage(Value):
    model_calls: Count
    tool_calls: Count
    input_tokens: Count
    output_tokens: Count
    cost_usd: float
    seconds: float


USAGE_KEYS: tuple[str, ...] = tuple(Usage.model_fields)
NO_USAGE = Usage(model_calls=0, tool_calls=0, input_tokens=0, output_tokens=0, cost_usd=0.0, seconds=0.0)


class BudgetLimits(Value):
    """The limits of `budget.Budget` as stored; None is unlimited (steps are always bounded)."""

    max_steps: Number
    max_tool_calls: Number | None
    max_tokens: Number | None
    max_cost_usd: Number | None
    max_seconds: Number | None


class LastVersions(Value):
    """The model and prompt of the latest turn; a change is an audit event."""

    model: str | None
    prompt: str | None


class LimitUse(Value):
    used: float
    limit: int | float


class Stop(Value):
    """Why the run stopped where it did; which details are present depends on the ending."""

    reason: str
    step: Count
    budget: str | None = None
    """budget_exhausted: the limit reached, with every limit's use in `limits`."""
    limits: dict[str, LimitUse] | None = None
    detail: str | None = None
    """failed: what the model or the policy raised."""
    by: str | None = None
    """cancelled: who cancelled it."""
    repeats: int | None = None
    """stalled: the turns in a row that repeated earlier calls."""
    key: str | None = None
    tool: str | None = None
    """needs_reconciliation: the call whose outcome is unknown."""


class Fingerprint(Value):
    """What became of a side-effecting call, so an identical one is not proposed again."""

    outcome: Literal["executed", "attempted", "denied"]
    key: str


class RunState(Value):
    """A run's whole state. Every field is always present from version 2 on."""

    schema_version: Literal[2]
    run_id: str
    goal: str | None
    status: Status
    history: tuple[HistoryEntry, ...] = Field(strict=False)  # a JSON array becomes the tuple
    steps: Count
    pending: PendingCall | None
    answer: str | None
    stop: Stop | None
    budget: BudgetLimits
    usage: Usage
    fingerprints: dict[str, Fingerprint]
    """By `state.call_fingerprint` of the call."""
    model: dict[str, JsonValue] | None
    """What the latest reply said about its model (name, system prompt hash)."""
    contracts: dict[str, dict[str, str]]
    """Tool catalogues by hash: {catalogue: {tool: contract hash}}."""
    repeats: Count
    """The latest turns in a row that repeated an earlier call and got its result again."""
    last_versions: LastVersions | None
    batch: Batch | None = None
    """The turn being settled when the model asked for several calls at once (None: no such turn).
    Left out of the JSON until a run first makes one, so runs that never do read as before."""

    @classmethod
    def fresh(cls, run_id: str, budget: dict[str, Any]) -> RunState:
        """A run not yet started."""
        return cls(schema_version=SCHEMA_VERSION, run_id=run_id, goal=None, status="idle", history=(), steps=0,
                   pending=None, answer=None, stop=None, budget=BudgetLimits.model_validate(budget), usage=NO_USAGE,
                   fingerprints={}, model=None, contracts={}, repeats=0, last_versions=None)
