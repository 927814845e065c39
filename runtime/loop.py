"""The agent loop as values: from a run's state and what just happened, the next state, the audit
events it says and what to do next. Pure: no I/O, no callbacks, nothing raised but refusals.

`driver.drive` does what a step asks (`CallModel`, `RunTool`), in order, and commits each step
whose next action is not a `RunTool`: a call's outcome belongs to the step that asked for it.
A person's request (approve, extend, retry, ...) is a transition too, in `requests.py`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from signoff.runtime.approval_policy import (
    Allow,
    ApprovalPolicy,
    Ask,
    Deny,
    ProposedCall,
    Requirement,
    Verdict,
    default_policy,
    evaluate,
)
from signoff.runtime.budget import exhausted_limit, usage_report
from signoff.runtime.decisions import is_plain_json, jsonable, malformed, shortened
from signoff.runtime.grants import grant_refusal, grant_unfit
from signoff.runtime.history import (
    ErrorKind,
    FinalAnswer,
    HistoryEntry,
    MalformedReply,
    RuntimeFeedback,
    ToolCall,
    ToolError,
    ToolResult,
)
from signoff.runtime.pending_calls import Asked, Batch, BatchCall, GrantOffer, PendingCall, Preview
from signoff.runtime.records import GrantRecord
from signoff.runtime.schema import REOPENABLE, TERMINAL, Fingerprint, RunState, Status, Usage
from signoff.runtime.schema import Stop as StopReason
from signoff.runtime.stalls import Repeats
from signoff.runtime.state import call_fingerprint, idempotency_key, redact, secret_names
from signoff.runtime.tool_calls import (
    Failed,
    NotGranted,
    Outcome,
    PreviewChanged,
    Ran,
    Refused,
    TimedOut,
    Unknown,
)
from signoff.runtime.turns import Catalogue, Provenance, read_turn
from signoff.runtime.values import Value
from signoff.tools.base import Tool, without

V = TypeVar("V", bound=Value)

# -- what to do next --------------------------------------------------------------------------


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
    said: dict[str, Any] = field(default_factory=dict)
    """What the approval request's event says besides the call (the policy's digest, ...)."""
    alone: bool = True
    """Asked about on its own once previewed (False: one of a turn's calls, asked with the others)."""


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
    events: tuple[dict[str, Any], ...] = ()
    execution: dict[str, Any] | None = None
    """The ledger outcome of a side effect settled in this transition."""


# -- what the world said -------------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """What the policy returned, untrusted."""

    raw: Any


@dataclass(frozen=True)
class ModelFailed:
    """The policy could not answer: the stop reason and what it raised."""

    reason: str
    detail: str


# -- what the loop knows besides the state -----------------------------------------------------


@dataclass(frozen=True)
class Caller:
    """Who a run is for, as the approval policy's rules see it (`requester`, `channel`)."""

    requester: str = ""
    channel: str = ""


@dataclass
class Context:
    """The tools a run calls and the rules it runs by. `repeats` is a cache of outcomes the run has
    seen (read from its history once), not state: dropping it changes no result."""

    tools: Mapping[str, Tool]
    redact_keys: frozenset[str]
    stall_after: int | None = 3
    repeats: Repeats = field(default_factory=Repeats)
    approval_policy: ApprovalPolicy = field(default_factory=default_policy)
    caller: Caller = field(default_factory=Caller)
    grants: tuple[GrantRecord, ...] = ()
    """Grants in force when the run was picked up (the ledger checks each again as its call starts)."""
    unfit_granters: Mapping[str, str] = field(default_factory=dict)
    """By grant id: why its maker may no longer approve calls under its rule, as the policy in force
    says (worked out where the run was picked up: who may approve is the edge's to tell)."""

    def grant_for(self, run_id: str, tool: str, rule: str | None, args: Mapping[str, Any],
                  offered: GrantOffer | None) -> tuple[GrantRecord | None, list[tuple[GrantRecord, str]]]:
        """A grant that lets this call run unasked under the policy in force (`offered`: the grant
        the rule that matched it offers now), if one does; and each grant that covers the call but
        may not let it run, with why (the audit log says why it was asked about all the same)."""
        unfit: list[tuple[GrantRecord, str]] = []
        for grant in self.grants:
            if grant_refusal(grant, run_id=run_id, requester=self.caller.requester, tool=tool, rule=rule, args=args,
                             now=None) is not None:
                continue  # it does not cover this call at all
            reason = grant_unfit(grant, offered, run_id=run_id, granter_refusal=self.unfit_granters.get(grant.grant_id))
            if reason is None:
                return grant, unfit
            unfit.append((grant, reason))
        return None, unfit
    _catalogue: Catalogue | None = None
    _secrets: dict[str, frozenset[str]] = field(default_factory=dict)

    @property
    def catalogue(self) -> Catalogue:
        if self._catalogue is None:
            self._catalogue = Catalogue.of(self.tools)
        return self._catalogue

    def verdict(self, tool: Tool, args: Mapping[str, Any], usage: Usage, defaulted: Iterable[str] = ()) -> Verdict:
        """What the approval policy says of calling `tool` with `args` now (`defaulted`: the
        arguments the caller left out, which the rules do not see)."""
        return classify(self.approval_policy, tool, args, self.caller, usage.to_json(), defaulted)

    def secrets(self, tool_name: str) -> frozenset[str]:
        """The argument names hidden in `tool_name`'s calls, wherever they are shown or kept."""
        secrets = self._secrets.get(tool_name)
        if secrets is None:  # the same for every call of a tool: worked out once
            secrets = self._secrets[tool_name] = secret_names(self.tools.get(tool_name), configured=self.redact_keys)
        return secrets

    def redacted(self, tool_name: str, args: Any) -> Any:
        return redact(args, self.secrets(tool_name))


def classify(policy: ApprovalPolicy, tool: Tool, args: Mapping[str, Any], caller: Caller,
             usage: Mapping[str, Any], defaulted: Iterable[str] = ()) -> Verdict:
    """What `policy` says of `caller`'s run calling `tool` with `args`, with `usage` spent so far.

    The rules see the arguments as the tool validated them, less `defaulted` (those the caller left
    out, which the tool's defaults filled in): a default never widens a rule, and `has(args.x)`
    answers for what was sent. Every look at a call, first or again, goes through here."""
    return evaluate(policy, ProposedCall(tool=tool.name, args=without(args, frozenset(defaulted)),
                                         side_effect=tool.side_effect,
                                         requester=caller.requester, channel=caller.channel, usage=usage))


def asked_by(context: Context, rule: str | None, requirement: Requirement, defaulted: Iterable[str]) -> Asked:
    """What the policy in force asks of a call under `rule`, seen without `defaulted`."""
    hidden = sorted(defaulted)
    asked: dict[str, Any] = {"rule": rule, "policy": context.approval_policy.digest, **requirement.to_json(),
                             **({"defaulted": hidden} if hidden else {})}
    return Asked.model_validate(asked)


def defaulted_of(asked: Asked | Mapping[str, Any] | None) -> tuple[str, ...]:
    """The arguments of an asked call that the rules did not see (`Asked.defaulted`)."""
    if asked is None:
        return ()
    names = asked.defaulted if isinstance(asked, Asked) else asked.get("defaulted")
    return tuple(names or ())


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
        self.events: list[dict[str, Any]] = []
        self.execution: dict[str, Any] | None = None

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

    def emit(self, event_type: str, **payload: Any) -> None:
        self.events.append({"type": event_type, "run_id": self._state.run_id, "step": self.steps, **payload})

    def then(self, action: Action) -> Step:
        return Step(self.state, action, tuple(self.events), self.execution)

    def stop(self, status: Status, reason: str, **detail: Any) -> Step:
        stop = StopReason.model_validate({"reason": reason, "step": self.steps, **detail})
        # An ending keeps no call, but one a person may open again keeps the call to ask about again
        # (not one of a turn's several: the model is told of each of those as the turn closes).
        ended = status in TERMINAL and (status not in REOPENABLE or self.state.batch is not None)
        if status in TERMINAL and self.state.batch is not None:
            self.close_batch(f"not executed: the run ended ({status}) before this call was settled")
        self.evolve(status=status, stop=stop, **({"pending": None} if ended else {}))
        self.emit(status, **{"usage": self.usage.to_json(), **stop.to_json()})
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


# -- a model turn ------------------------------------------------------------------------------


def budget_stop(state: RunState) -> Step | None:
    """The stop of a run that has reached a limit, or None if another policy call is allowed."""
    limit = exhausted_limit(state)
    if limit is None:
        return None
    return Draft(state).stop("budget_exhausted", reason=f"{limit} reached", budget=limit, limits=usage_report(state))


def after_reply(state: RunState, context: Context, reply: Reply | ModelFailed) -> Step:
    """One policy reply read: a final answer, a call (run, asked about or refused), or feedback."""
    draft = Draft(state)
    if isinstance(reply, ModelFailed):
        return draft.stop("failed", reason=reply.reason, detail=reply.detail)
    turn = read_turn(reply.raw, state, context.catalogue)
    step = state.steps + 1
    draft.evolve(steps=step, **turn.changes)
    if turn.versions_changed is not None:
        was, now = turn.versions_changed
        draft.emit("versions_changed", was=was, now=now)
    problem = malformed(turn.decision)
    if problem:
        draft.append(MalformedReply(role="assistant", step=step, malformed=shortened(reply.raw), **turn.provenance),
                     RuntimeFeedback(role="runtime", step=step, error=problem))
        draft.emit("decision", kind="malformed", error=problem)
        return draft.go_on()
    if "final" in turn.decision:
        return _finish(draft, turn.decision, turn.provenance)
    decision = turn.decision
    if "calls" in decision:
        if len(decision["calls"]) > 1:
            return _propose_batch(draft, context, decision, turn.provenance)
        decision = {**decision.pop("calls")[0], **decision}  # a list of one is one call
    proposed = _propose(draft, context, decision, turn.provenance)
    if proposed is not None:
        return proposed
    return _count_repeat(draft, context)


def _finish(draft: Draft, decision: dict[str, Any], provenance: Provenance) -> Step:
    answer = jsonable(decision["final"])
    answer = answer if isinstance(answer, str) else json.dumps(answer)
    draft.append(FinalAnswer(role="assistant", step=draft.steps, final=answer, **provenance))
    draft.evolve(answer=answer, status="done")
    draft.emit("decision", kind="final")
    draft.emit("finished", answer=answer, usage=draft.usage.to_json())
    return draft.then(Finish(answer))


MAX_BATCH_CALLS = 8
"""Calls of one model turn that are made; the rest are refused, and the model told so (one card
holds a turn's requests, and Slack's messages hold 50 blocks)."""


@dataclass(frozen=True)
class _Refused:
    """The call is not made: the model is told why (it was settled on the spot)."""

    error: str
    kind: ErrorKind
    rule: str | None = None


@dataclass(frozen=True)
class _Runs:
    """The call runs without a person: a read no rule names, a rule's allow, or a grant."""

    pending: PendingCall
    tool: Tool
    allowed_by: str | None = None
    granted_by: str | None = None


@dataclass(frozen=True)
class _Asks:
    """The call waits for a person, as the policy's `pending.asked` says."""

    pending: PendingCall
    ruled: dict[str, Any]


def _propose(draft: Draft, context: Context, decision: dict[str, Any], provenance: Provenance) -> Step | None:
    """Record the call and decide its fate: a step that runs it or asks about it, or None when it
    was refused on the spot (unknown tool, invalid arguments, a repeat of a settled side effect)."""
    step = draft.steps
    call = _recorded(draft, context, decision, f"call-{step}", provenance)
    match _judged(draft, context, call, idempotency_key(draft.state.run_id, step), set()):
        case _Refused(error=error, kind=kind, rule=rule):
            observe(draft, call, error=error, kind=kind, rule=rule)
            return None
        case _Runs(pending=pending, tool=tool, allowed_by=allowed_by, granted_by=granted_by):
            return draft.then(RunTool(pending, tool, in_turn=True, allowed_by=allowed_by, granted_by=granted_by))
        case _Asks(pending=pending, ruled=ruled):
            return ask_approval(draft, context, pending, **ruled)
    raise AssertionError("unreachable")


def _propose_batch(draft: Draft, context: Context, decision: dict[str, Any], provenance: Provenance) -> Step:
    """Record every call of a turn that made several and decide each one's fate on its own, each
    with its own key (`run_id:step.n`); the turn is then settled call by call (`continue_batch`)."""
    step, run_id = draft.steps, draft.state.run_id
    said: dict[str, Any] = {k: decision[k] for k in ("text", "note") if k in decision}
    limit = draft.state.budget.max_tool_calls
    slots = None if limit is None else max(int(limit) - draft.usage.tool_calls, 0)
    proposed: set[str] = set()  # side effects proposed earlier in this turn, by fingerprint
    recorded: list[tuple[ToolCall, str, _Refused | _Runs | _Asks]] = []
    call_ids: set[str] = set()
    for place, raw in enumerate(decision["calls"], start=1):
        # What the model said beside its calls, and the turn's usage, are recorded once, on the first.
        call = _recorded(draft, context, {**raw, **(said if place == 1 else {})}, f"call-{step}.{place}",
                         provenance if place == 1 else {"versions": provenance["versions"]})
        if call.call_id in call_ids:  # each call's outcome is told under its own id
            call = call.evolved(call_id=f"{call.call_id}.{place}")
        call_ids.add(call.call_id)
        key = idempotency_key(run_id, step, place)
        fate: _Refused | _Runs | _Asks
        if place > MAX_BATCH_CALLS:
            fate = _Refused(f"not made: at most {MAX_BATCH_CALLS} calls are made of one reply; propose it again "
                            "once these are settled", "refused")
        else:
            fate = _judged(draft, context, call, key, proposed)
        if not isinstance(fate, _Refused) and slots is not None:
            if slots == 0:
                fate = _Refused(f"not made: the run's budget of {limit} tool calls is used up by the calls before "
                                "it", "refused")
            else:
                slots -= 1
        recorded.append((call, key, fate))
    calls = []
    for call, key, fate in recorded:
        match fate:
            case _Runs(pending=pending, allowed_by=allowed_by, granted_by=granted_by):
                calls.append(BatchCall(call_id=call.call_id, tool=call.tool, key=key, pending=pending, runs=True,
                                       allowed_by=allowed_by, granted_by=granted_by))
            case _Asks(pending=pending):
                calls.append(BatchCall(call_id=call.call_id, tool=call.tool, key=key, pending=pending))
            case _Refused():
                calls.append(BatchCall(call_id=call.call_id, tool=call.tool, key=key))
    draft.evolve(batch=Batch(step=step, calls=calls))
    for call, _, fate in recorded:
        if isinstance(fate, _Refused):
            observe(draft, call, error=fate.error, kind=fate.kind, rule=fate.rule)
    return draft.go_on()


def _recorded(draft: Draft, context: Context, decision: Mapping[str, Any], default_id: str,
              provenance: Mapping[str, Any]) -> ToolCall:
    """The call `decision` proposes, appended to the history and audited as a decision."""
    step = draft.steps
    # JSON-only from here on: a checkpoint must be able to hold whatever the policy proposed.
    name, args = decision["tool"], jsonable(decision.get("args", {}))
    said = {k: decision[k] for k in ("text", "note") if isinstance(decision.get(k), str)}
    # The policy's strings are trusted as they are only when they are exact strings (pydantic
    # would make a subclass one); the arguments are plain JSON, just made so by `jsonable`.
    call = _valid(ToolCall, type(name) is str and all(type(text) is str for text in said.values()),
                  role="assistant", step=step, tool=name, args=args,
                  call_id=str(decision.get("call_id") or default_id), **said, **provenance)
    draft.append(call)
    draft.emit("decision", kind="tool", tool=name, args=context.redacted(name, args))
    return call


def _judged(draft: Draft, context: Context, call: ToolCall, key: str,
            proposed: set[str]) -> _Refused | _Runs | _Asks:
    """What becomes of `call` under `key`: refused on the spot, run, or asked about, as its tool,
    the run's settled side effects (and `proposed`, those of this turn so far) and the policy say."""
    name, step = call.tool, call.step
    tool = context.tools.get(name)
    if tool is None:
        return _Refused(f"unknown tool {name}", "unknown_tool")
    try:
        checked = tool.checked(call.args)
    except ValueError as exc:
        return _Refused(str(exc), "invalid_args")
    args = checked.args
    pending = _valid(PendingCall, type(args) is dict and is_plain_json(args),  # as the tool validated them
                     tool=name, args=args, key=key, step=step, call_id=call.call_id, contract=tool.contract)
    if tool.side_effect:
        fingerprint = call_fingerprint(name, args)
        repeated = repeat_of(draft.state, name, args, key)
        if repeated is not None:
            return _Refused(f"refused: {repeated}; it is not proposed again", "duplicate")
        if fingerprint in proposed:
            return _Refused(f"refused: an identical {name} call is already proposed in this reply; it is made once",
                            "duplicate")
        proposed.add(fingerprint)
    verdict = context.verdict(tool, args, draft.usage, checked.defaulted)
    ruled = {"policy": context.approval_policy.digest, **({"errors": list(verdict.errors)} if verdict.errors else {})}
    match verdict:
        case Allow(rule=None) if not verdict.errors:  # a read-only call no rule names: the common case
            return _Runs(pending, tool)
        case Allow(rule=rule):
            draft.emit("call_allowed_by_rule", key=key, tool=name, rule=rule, **ruled)
            return _Runs(pending, tool, allowed_by=rule)
        case Deny(rule=rule, reason=reason):
            draft.emit("call_denied_by_rule", key=key, tool=name, rule=rule, reason=reason, **ruled)
            return _Refused(denied_by_rule(rule, reason), "denied_by_rule", rule)
        case Ask(rule=rule, requirement=requirement):
            asked = asked_by(context, rule, requirement, checked.defaulted)
    pending = pending.evolved(asked=asked)
    grant = granted(draft, context, pending, ruled)
    if grant is not None:
        return _Runs(pending, tool, granted_by=grant.grant_id)
    return _Asks(pending, ruled)


def granted(draft: Draft, context: Context, call: PendingCall, ruled: Mapping[str, Any]) -> GrantRecord | None:
    """The grant that lets the asked `call` run unasked, said in the audit log; each grant that
    covers it but may not, under the policy in force, said too, with why."""
    asked = call.asked
    assert asked is not None, "only an asked call can be granted"
    grant, unfit = context.grant_for(draft.state.run_id, call.tool, asked.rule, call.args, asked.grant)
    for grant_not_used, reason in unfit:
        draft.emit("grant_not_applied", key=call.key, tool=call.tool, rule=asked.rule,
                   grant_id=grant_not_used.grant_id, reason=reason, **ruled)
    if grant is not None:
        draft.emit("call_allowed_by_grant", key=call.key, tool=call.tool, rule=asked.rule, grant_id=grant.grant_id,
                   granted_by=grant.created_by, **ruled)
    return grant


def repeat_of(state: RunState, tool: str, args: Mapping[str, Any], key: str) -> str | None:
    """What a side-effecting call of `tool` with `args` under `key` would repeat, or None: a call
    the run already settled, or another call of the turn being settled. The one repeat rule, for
    the model's proposals and a person's edits alike."""
    fingerprint = call_fingerprint(tool, args)
    earlier = state.fingerprints.get(fingerprint)
    if earlier is not None:
        return f"an identical {tool} call was already {earlier.outcome} (key {earlier.key})"
    for call in state.batch.calls if state.batch is not None else ():
        if (call.key != key and call.pending is not None and call.tool == tool
                and call_fingerprint(call.tool, call.pending.args) == fingerprint):
            return f"an identical {tool} call is already proposed in this turn (key {call.key})"
    return None


def continue_batch(state: RunState, context: Context) -> Step:
    """The next step of settling the turn `state.batch`: run the next call let run (in the order
    they were made, one at a time); then, with none left to run, pause on those that ask a person,
    every one's approval opened at once the first time. A call's outcome goes to the batch
    (`Draft.observe`), and the last one settled tells the model every outcome."""
    draft, batch = Draft(state), state.batch
    if batch is None:
        return draft.go_on()
    for call in batch.calls:
        if call.runs and call.outcome is None and call.pending is not None:
            tool = context.tools.get(call.tool)
            if tool is None:  # gone since it was proposed (a deploy in between): nothing to run
                observe(draft, call.pending, error=f"not executed: tool {call.tool} is no longer registered",
                        kind="unknown_tool")
                return draft.go_on()
            return draft.then(RunTool(call.pending, tool, allowed_by=call.allowed_by, granted_by=call.granted_by))
    waiting = [call.pending for call in batch.calls if call.waiting and call.pending is not None]
    if not waiting:
        return draft.go_on()
    for pending in waiting:  # each call's preview, before any is asked about
        tool = context.tools.get(pending.tool)
        if tool is not None and tool.preview is not None and pending.preview is None:
            return draft.then(RunPreview(pending, tool, alone=False))
    if not batch.requested:
        draft.evolve(batch=batch.evolved(requested=True))
        for pending in waiting:
            asked = pending.asked
            draft.emit("approval_requested", key=pending.key, tool=pending.tool,
                       args=context.redacted(pending.tool, dict(pending.args)),
                       rule=asked.rule if asked is not None else None, quorum=asked.quorum if asked is not None else 1,
                       policy=context.approval_policy.digest, batch=len(batch.calls))
    draft.evolve(pending=waiting[0], status="awaiting_approval")
    return draft.then(AskApproval(waiting[0]))


def ask_approval(draft: Draft, context: Context, pending: PendingCall, **said: Any) -> Step:
    """Pause on `pending`, asked about as its `asked` says; first, if its tool previews what it
    would do, take the preview, which the approval then shows and is bound to."""
    tool = context.tools.get(pending.tool)
    if tool is not None and tool.preview is not None and pending.preview is None:
        return draft.then(RunPreview(pending, tool, said))
    asked, name = pending.asked, pending.tool
    draft.evolve(pending=pending, status="awaiting_approval")
    draft.emit("approval_requested", key=pending.key, tool=name, args=context.redacted(name, dict(pending.args)),
               rule=asked.rule if asked is not None else None, quorum=asked.quorum if asked is not None else 1, **said)
    return draft.then(AskApproval(pending))


def after_preview(state: RunState, context: Context, action: RunPreview, preview: Preview) -> Step:
    """The call's preview taken: it is asked about with it (one of a turn's several calls waits for
    the others' previews, and all are asked about at once)."""
    draft = Draft(state)
    call = action.call.evolved(preview=preview)
    if state.batch is not None and state.batch.of(call.key) is not None:
        draft.evolve(batch=state.batch.with_call(call.key, pending=call))
        if not action.alone:
            return draft.go_on()
    return ask_approval(draft, context, call, **action.said)


def denied_by_rule(rule: str, reason: str) -> str:
    """What the model is told of a call the policy denied."""
    return f"denied by policy rule {rule}: {reason}"


def _count_repeat(draft: Draft, context: Context) -> Step:
    """Count a turn that called a tool as it was called before and got the same result again, and
    stop the run as `stalled` after `stall_after` of them in a row: a loop, not progress."""
    if context.stall_after is None or draft.state.status != "running":
        return draft.go_on()
    repeats = context.repeats.after_turn(draft.state.history, draft.state.repeats)
    if repeats is None:
        return draft.go_on()
    draft.evolve(repeats=repeats)
    if repeats >= context.stall_after:
        return draft.stop("stalled", reason=f"the last {repeats} turns repeated earlier calls and got the same results",
                          repeats=repeats)
    return draft.go_on()


# -- a call's outcome ------------------------------------------------------------------------------


def after_call(state: RunState, context: Context, action: RunTool, outcome: Outcome) -> Step:
    """What came of running `action.call`, recorded: the result or error the model sees, the usage,
    and for a side effect its fingerprint and ledger outcome."""
    draft, call, tool = Draft(state), action.call, action.tool
    match outcome:
        case Ran(value=value, seconds=seconds):  # the common case first
            record_execution(draft, context, call, ok=True, value=value, seconds=seconds, retried=action.retry)
            observe(draft, call, result=value, rule=action.allowed_by, edited=edit_note(call), grant=action.granted_by)
        case Refused(reason=reason, status=status):
            return refuse(draft, call, status, f"not executed: {reason}")
        case PreviewChanged(preview=now):  # the world changed since the approval: a person decides again
            return preview_changed(draft, context, call, now)
        case NotGranted(reason=reason):  # revoked or expired since: a person decides after all
            batch = draft.state.batch
            if batch is not None and batch.of(call.key) is not None:
                draft.evolve(batch=batch.with_call(call.key, runs=False, granted_by=None))
            return ask_approval(draft, context, call, policy=context.approval_policy.digest, reason=reason)
        case Unknown(reason=reason):
            return needs_reconciliation(draft, call, reason)
        case TimedOut(message=message) if tool.side_effect:
            return needs_reconciliation(draft, call, f"timed out: {message}; it may or may not have taken effect")
        case TimedOut(message=message, seconds=seconds):
            # It was called, so it counts towards max_tool_calls like any other failure.
            record_execution(draft, context, call, ok=False, value=f"timeout: {message}", seconds=seconds)
            observe(draft, call, error=f"timeout: {message}", kind="timeout")
        case Failed(error=error, seconds=seconds):
            record_execution(draft, context, call, ok=False, value=error, seconds=seconds)
            observe(draft, call, error=error, kind="exception")
    return _count_repeat(draft, context) if action.in_turn else draft.go_on()


def preview_changed(draft: Draft, context: Context, call: PendingCall, now: Preview) -> Step:
    """Just before it was to start, `call`'s preview said something else than what was approved:
    its approval is void (closed as superseded), nothing ran, and a fresh approval shows the
    preview as it is now beside the one that was approved."""
    was = call.preview
    changed = call.evolved(preview=now.evolved(was=was.shown if was is not None else None))
    draft.emit("preview_changed", key=call.key, tool=call.tool, was=was.digest if was is not None else None,
               now=now.digest)
    draft.revise(changed)
    draft.evolve(status="running")
    batch = draft.state.batch
    if batch is not None and batch.of(call.key) is not None:
        draft.evolve(batch=batch.with_call(call.key, pending=changed, runs=False, allowed_by=None, granted_by=None))
    return ask_approval(draft, context, changed, policy=context.approval_policy.digest, supersedes=True,
                        reason="the preview changed since it was approved")


def through_ledger(tool: Tool | None, call: PendingCall) -> bool:
    """Whether `call` starts through the execution ledger, once: every side effect, and a read-only
    call a person was asked about (its approval is consumed as it starts)."""
    return bool(tool and tool.side_effect) or call.asked is not None


def record_execution(draft: Draft, context: Context, call: PendingCall, ok: bool, value: Any, seconds: float,
                     **extra: Any) -> None:
    tool = context.tools.get(call.tool)
    usage = draft.usage
    draft.evolve(usage=usage.evolved(tool_calls=usage.tool_calls + 1))
    side_effect = bool(tool and tool.side_effect)
    draft.emit("tool_executed" if ok else "tool_failed", tool=call.tool, key=call.key, seconds=round(seconds, 6),
               side_effect=side_effect, **extra, **({"error": value} if not ok else {}))
    if through_ledger(tool, call):
        if side_effect:
            settle(draft, call, "executed" if ok else "attempted")
        draft.evolve(pending=None)
        draft.execution = {"key": call.key, "tool": call.tool, "ok": ok, "result" if ok else "error": value,
                           "seconds": round(seconds, 6)}


def settle(draft: Draft, call: PendingCall, outcome: str) -> None:
    """Remember what became of a side-effecting call, so that an identical one is refused."""
    settled = Fingerprint.model_validate({"outcome": outcome, "key": call.key})
    draft.evolve(fingerprints={**draft.state.fingerprints, call_fingerprint(call.tool, call.args): settled})


def refuse(draft: Draft, call: PendingCall, status: Status, reason: str) -> Step:
    """Stop without running `call`: it is settled (nothing stays pending) and the model is told why."""
    observe(draft, call, error=reason, kind="refused")
    if draft.state.pending == call:
        draft.evolve(pending=None)
    return draft.stop(status, reason=reason)


def needs_reconciliation(draft: Draft, call: PendingCall, reason: str) -> Step:
    draft.evolve(pending=call)
    return draft.stop("needs_reconciliation", reason=reason, key=call.key, tool=call.tool)


def edit_note(call: PendingCall) -> str | None:
    """What the model is told of a call a person changed before it ran, so that it does not
    propose the original again; None for a call that ran as proposed."""
    if call.edited is None:
        return None
    who = call.edited.by or "a person"
    return (f"{who} changed this call before it ran ({'; '.join(call.edited.changes)}); it ran as changed, "
            "so do not propose the original again")


def observe(draft: Draft, call: ToolCall | PendingCall, *, result: Any = None, error: str | None = None,
            kind: ErrorKind | None = None, rule: str | None = None, edited: str | None = None,
            grant: str | None = None) -> None:
    # The call is a valid value already; a result (from a tool, the ledger or a person) is
    # validated unless it is plain JSON as it is, and an error is the loop's own text.
    ruled = {"rule": rule} if rule is not None else {}
    if edited is not None:
        ruled["edited"] = edited
    if grant is not None:
        ruled["grant"] = grant
    if error is None:
        draft.observe(_valid(ToolResult, is_plain_json(result), role="tool", step=call.step, tool=call.tool,
                             call_id=call.call_id, result=result, **ruled))
    else:
        draft.observe(_valid(ToolError, type(error) is str, role="tool", step=call.step, tool=call.tool,
                             call_id=call.call_id, error=error, error_kind=kind, **ruled))


def _valid(kind: type[V], trusted: bool, **fields: Any) -> V:
    """A `kind` of `fields`: made as it is when `trusted` (every field already a valid value of
    its type, see `Value.trusted`), validated otherwise."""
    return kind.trusted(**fields) if trusted else kind(**fields)


def charge_time(state: RunState, seconds: float) -> RunState:
    """`state` with `seconds` more of running time; waiting for a person is never charged."""
    if seconds <= 0:
        return state
    usage = state.usage
    return state.evolved(usage=usage.evolved(seconds=round(usage.seconds + seconds, 6)))
