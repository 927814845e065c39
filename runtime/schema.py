"""The run state as typed, frozen, validated values: the one definition of its shape (version 2).

Pure: pydantic only. Every model refuses keys it does not know (`extra="forbid"`) and values of
the wrong type (`strict`: no `"3"` for 3, no `true` for 1). Optional fields that a writer leaves
out stay out of the JSON (dump with `exclude_unset`), so an entry reads back exactly as written.

History entries are a tagged union told apart by `role` and the key that defines each kind (a
tool call has `tool`, a final answer `final`, a tool's result `result`, ...), which is how
version 1 wrote them: the history's JSON is the same in both versions.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Annotated, Any, Final, Literal, Self, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Discriminator, Field, JsonValue, Tag

from signoff.runtime.digests import call_digest

SCHEMA_VERSION: Final = 2
"""The version this code writes; version 1 is upgraded when read (`state_versions.upgrade`)."""

Status = Literal[
    "idle", "running", "awaiting_approval", "done", "budget_exhausted", "failed", "cancelled", "expired",
    "needs_reconciliation", "stalled",
]
StatusGroup = Literal["active", "waiting_on_human", "terminal"]
STATUS_GROUPS: MappingProxyType[str, StatusGroup] = MappingProxyType({
    "idle": "active", "running": "active",
    "awaiting_approval": "waiting_on_human", "budget_exhausted": "waiting_on_human", "failed": "waiting_on_human",
    "needs_reconciliation": "waiting_on_human", "stalled": "waiting_on_human",
    "done": "terminal", "cancelled": "terminal", "expired": "terminal",
})
"""Every status in exactly one group: the sets below are derived from this table, nowhere else."""
STATUSES: tuple[str, ...] = get_args(Status)
assert set(STATUS_GROUPS) == set(STATUSES), "every status belongs to exactly one group"
ACTIVE: frozenset[str] = frozenset(s for s, g in STATUS_GROUPS.items() if g == "active")
"""Statuses a worker moves on by itself (not started yet, or running)."""
WAITING_ON_HUMAN: frozenset[str] = frozenset(s for s, g in STATUS_GROUPS.items() if g == "waiting_on_human")
"""Statuses where the run keeps its state and waits for a person (decide, extend, retry, reconcile)."""
TERMINAL: frozenset[str] = frozenset(s for s, g in STATUS_GROUPS.items() if g == "terminal")
"""Statuses a run ends in: no worker moves it on by itself, and it leaves them only as `REOPENABLE` says."""
REOPENABLE: frozenset[str] = frozenset({"expired"})
"""Endings a person may open again: a run that expired keeps the call nobody decided, and its
requester may ask for it again (a fresh approval, the run going on from where it paused)."""
assert REOPENABLE <= TERMINAL
STOPPED: frozenset[str] = WAITING_ON_HUMAN - {"awaiting_approval"}
"""Waiting on a person without a call to decide: the run stopped short of an answer (out of budget,
stalled, failed, unreconciled) until someone extends, retries or reconciles it."""

ErrorKind = Literal["exception", "unknown_tool", "invalid_args", "denied", "denied_by_rule", "duplicate", "timeout",
                    "refused", "unanswered"]
ERROR_KINDS: tuple[str, ...] = get_args(ErrorKind)
Number = Annotated[int | float, Field(gt=0)]
"""A positive limit; an int stays an int (a budget given as 5 is written back as 5, not 5.0)."""
Count = Annotated[int, Field(ge=0)]


class Value(BaseModel):
    """A frozen, strict value of the run state."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    def to_json(self) -> dict[str, Any]:
        """The JSON-shaped dict of this value, without the optional fields it was made without
        (what `model_dump(exclude_unset=True)` gives, read straight from the fields: a step makes
        several of these, and pydantic's serialiser costs more than the walk for values this small)."""
        fields_set = self.__pydantic_fields_set__
        return {name: _json_of(value) for name, value in self.__dict__.items() if name in fields_set}

    @classmethod
    def trusted(cls, **fields: Any) -> Self:
        """A value made of `fields` without validating them: only for the loop's transitions, which
        build values out of parts already validated where they came in (a policy's reply, a tool's
        result, a stored state) or made by the loop itself. Validating them again would give an
        equal value (tests/runtime/test_trusted_values.py shows it does), at several times the cost.

        Unknown or missing fields are refused (`TypeError`); their types are the caller's to keep.
        """
        template, required = _templates.get(cls) or _template(cls)
        values = {**template, **fields}  # the fields in declaration order, as validation orders them
        if len(values) != len(template) or not required <= fields.keys():
            raise TypeError(f"{cls.__name__}.trusted: unknown fields {sorted(set(fields) - set(template))} "
                            f"or missing {sorted(required - fields.keys())}")
        return _made(cls, values, set(fields))

    def evolved(self, **changes: Any) -> Self:
        """A copy with `changes`, which must already be valid values of their fields (the loop's
        transitions, whose inputs were validated where they came in). `model_copy` without its
        generality: a step makes a handful of these, so it is worth the few lines."""
        fields_set = self.__pydantic_fields_set__
        if not changes.keys() <= fields_set:  # shared otherwise: nothing changes a value's set
            fields_set = fields_set | changes.keys()
        return _made(type(self), {**self.__dict__, **changes}, fields_set)


_templates: dict[type[Value], tuple[dict[str, Any], frozenset[str]]] = {}
"""By class: every field with its default (None where it has none), and the fields without one."""

# The slots of a pydantic model, set directly: `object.__setattr__` looks each one up through the
# class's whole MRO.
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__
_set_dict = BaseModel.__dict__["__dict__"].__set__
_new = object.__new__


def _template(cls: type[Value]) -> tuple[dict[str, Any], frozenset[str]]:
    fields = cls.model_fields
    made = _templates[cls] = ({name: None if info.is_required() else info.get_default(call_default_factory=True)
                               for name, info in fields.items()},
                              frozenset(name for name, info in fields.items() if info.is_required()))
    return made


V = TypeVar("V", bound=Value)


def _made(cls: type[V], values: dict[str, Any], fields_set: set[str]) -> V:
    made = _new(cls)
    _set_dict(made, values)
    _set_fields_set(made, fields_set)
    _set_extra(made, None)
    _set_private(made, None)
    return made


def _json_of(value: Any) -> Any:
    """A field's value as `model_dump(mode="python", exclude_unset=True)` gives it: values as their
    JSON, containers copied, except that a tuple (the history) becomes a list, a JSON array."""
    kind = type(value)
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    if isinstance(value, Value):
        return value.to_json()
    if kind is dict:
        return {k: _json_of(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [_json_of(v) for v in value]
    return value


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


class Versions(Value):
    """What produced a model turn: the model spec, the system prompt's hash and the tool catalogue's
    hash (a key of the state's `contracts`)."""

    model: str | None
    prompt: str | None
    tools: str | None


class LastVersions(Value):
    """The model and prompt of the latest turn; a change is an audit event."""

    model: str | None
    prompt: str | None


class ReportedUsage(Value):
    """The usage a reply reported, as reported (untrusted: a replay charges the same)."""

    input_tokens: JsonValue = None
    output_tokens: JsonValue = None
    cost_usd: JsonValue = None


class _Turn(Value):
    role: Literal["assistant"]
    step: Count
    versions: Versions | None = None
    usage: ReportedUsage | None = None


class Goal(Value):
    role: Literal["user"]
    content: str


class ToolCall(_Turn):
    tool: str
    args: JsonValue
    """As proposed: not necessarily an object (that is for the tool to refuse)."""
    call_id: str
    text: str | None = None
    """What the model said beside its call."""
    note: str | None = None
    """What an adapter did with the reply, e.g. dropped calls."""


class FinalAnswer(_Turn):
    final: str


class MalformedReply(_Turn):
    malformed: str


class _Observation(Value):
    role: Literal["tool"]
    step: Count
    tool: str
    call_id: str
    rule: str | None = None
    """The approval policy's rule that allowed (a result) or denied (an error) the call without a person."""
    edited: str | None = None
    """How a person changed the call before it ran, as the model is told it."""
    grant: str | None = None
    """The grant ("Approve + allow similar") that let the call run unasked."""


class ToolResult(_Observation):
    result: JsonValue


class ToolError(_Observation):
    error: str
    error_kind: ErrorKind | None = None


class RuntimeFeedback(Value):
    role: Literal["runtime"]
    step: Count
    error: str


def entry_kind(entry: Any) -> str | None:
    """The tag of a history entry (a dict or a model): its role and the key that defines its kind."""
    if isinstance(entry, Value):
        return _KINDS.get(type(entry))
    if not isinstance(entry, dict):
        return None
    match entry.get("role"):
        case "user":
            return "goal"
        case "assistant":
            return next((kind for key, kind in _TURN_KEYS if key in entry), None)
        case "tool":
            return "tool_result" if "result" in entry else "tool_error" if "error" in entry else None
        case "runtime":
            return "runtime_feedback"
    return None


_TURN_KEYS = (("tool", "tool_call"), ("final", "final_answer"), ("malformed", "malformed_reply"))
_KINDS: dict[type[Value], str] = {
    Goal: "goal", ToolCall: "tool_call", FinalAnswer: "final_answer", MalformedReply: "malformed_reply",
    ToolResult: "tool_result", ToolError: "tool_error", RuntimeFeedback: "runtime_feedback",
}

HistoryEntry = Annotated[
    Annotated[Goal, Tag("goal")] | Annotated[ToolCall, Tag("tool_call")]
    | Annotated[FinalAnswer, Tag("final_answer")] | Annotated[MalformedReply, Tag("malformed_reply")]
    | Annotated[ToolResult, Tag("tool_result")] | Annotated[ToolError, Tag("tool_error")]
    | Annotated[RuntimeFeedback, Tag("runtime_feedback")],
    Discriminator(entry_kind, custom_error_type="unknown_history_entry",
                  custom_error_message="not a history entry: its role is not user, assistant, tool or runtime, "
                                       "or it lacks the key that says what it is (tool, final, malformed, "
                                       "result or error)"),
]


class Asked(Value):
    """What the approval policy required of a call when it was proposed: the rule that asked (None:
    the policy's defaults), the policy's digest, and who, how many and for how long."""

    rule: str | None
    policy: str
    approvers: list[str]
    quorum: Annotated[int, Field(ge=1)]
    ttl_seconds: Annotated[int, Field(ge=1)]
    allow_self_approval: bool
    confirm: bool = False
    on_expiry: Literal["end", "continue"] = "end"
    """Nobody decided in time: end the run as `expired`, or tell the model and go on."""
    grant: GrantOffer | None = None
    """What approving with "allow similar" would let run unasked afterwards (None: not offered)."""
    remind: list[float] = Field(default_factory=list)
    """Fractions of the time limit at which the approvers are reminded."""
    escalate: EscalationOffer | None = None
    """Who is added, and told, if nobody has decided after a while."""
    defaulted: list[str] | None = None
    """Arguments the rules did not see: the caller left them out and the tool filled in its defaults
    (None: every argument was sent). Every later look at the call sees it as this one did."""


class EscalationOffer(Value):
    after_seconds: Annotated[int | float, Field(gt=0)]
    to: list[str]


class GrantOffer(Value):
    """A rule's grant: for how long, which arguments must be the same, in this run or the requester's."""

    for_seconds: Annotated[int | float, Field(gt=0)]
    same: list[str]
    scope: Literal["run", "requester"]


class Edited(Value):
    """A person changed a proposed call before it was approved: who, what the model proposed, and
    each change as people and the model read it (`amount_usd: "500.00" -> "50.00"`)."""

    by: str | None
    proposed: dict[str, JsonValue]
    changes: list[str]


class Preview(Value):
    """What a call would do, as its tool's `preview` said when it was asked about: shown to the
    approvers and bound into the approval's digest (`digest`; None: no preview, it failed)."""

    shown: JsonValue = None
    digest: str | None = None
    error: str | None = None
    """Why there is no preview (it raised, or ran past its time limit)."""
    was: JsonValue = None
    """The preview an earlier approval of this call showed, when the world changed since."""


class PendingCall(Value):
    """A validated call waiting for a person (or for reconciliation), bound to its key `run_id:step`."""

    tool: str
    args: dict[str, JsonValue]
    key: str
    step: Count
    call_id: str
    contract: str | None = None
    """The hash of its tool's contract when it was proposed (None: recorded before Signoff kept it)."""
    asked: Asked | None = None
    """What the approval policy asked of it when it was proposed (None: recorded before Signoff
    had policies, or not asked about: reconciliation)."""
    edited: Edited | None = None
    """Set when a person changed the arguments the model proposed; `args` are the changed ones."""
    preview: Preview | None = None
    """What the call would do, as its tool previewed it when it was asked about."""

    @property
    def digest(self) -> str:
        """What an approval of this call is bound to. Derived, never stored: a stored copy could
        disagree with the arguments, and it is the store that checks an approval against them."""
        return call_digest(self.tool, self.args, self.key, self.preview.digest if self.preview else None)


BatchOutcome = Annotated[
    Annotated[ToolResult, Tag("tool_result")] | Annotated[ToolError, Tag("tool_error")],
    Discriminator(entry_kind),
]


class BatchCall(Value):
    """One call of a model turn that made several, and what has become of it so far."""

    call_id: str
    tool: str
    key: str
    """`run_id:step.n`: the call's own key, from its place in the turn (`state.batch_key`)."""
    pending: PendingCall | None = None
    """The call as its tool validated it (None: refused on the spot, so its outcome is set)."""
    runs: bool = False
    """Let run without a person (a read no rule names, a rule's allow or a grant): it runs in turn."""
    allowed_by: str | None = None
    granted_by: str | None = None
    outcome: BatchOutcome | None = None
    """What the model will be told of it (None: not settled yet)."""

    @property
    def waiting(self) -> bool:
        """Asked about, and not yet decided or settled."""
        return self.outcome is None and not self.runs and self.pending is not None


class Batch(Value):
    """The calls of the turn at `step`, each settled on its own (run, denied by a person or a rule,
    expired); the model is told every outcome, in the order it asked, once all are settled."""

    step: Count
    calls: list[BatchCall]
    requested: bool = False
    """Its asked calls' approvals were opened (all at once, the first time the batch paused)."""

    def of(self, key: str) -> BatchCall | None:
        return next((call for call in self.calls if call.key == key), None)

    def first_waiting(self) -> BatchCall | None:
        return next((call for call in self.calls if call.waiting), None)

    def first_unsettled(self) -> BatchCall | None:
        return next((call for call in self.calls if call.outcome is None), None)

    def with_call(self, key: str, **changes: Any) -> Batch:
        """The batch with the call `key` changed (`changes` already valid values of its fields)."""
        return self.evolved(calls=[call.evolved(**changes) if call.key == key else call for call in self.calls])

    def settled(self, outcome: ToolResult | ToolError) -> Batch | None:
        """The batch with `outcome` as the outcome of its call (by call id), or None if no call of
        the batch is `outcome`'s. A call keeps the first outcome it was given."""
        for index, call in enumerate(self.calls):
            if call.call_id == outcome.call_id:
                if call.outcome is not None:
                    return self
                return self.evolved(calls=[*self.calls[:index], call.evolved(outcome=outcome), *self.calls[index + 1:]])
        return None


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
