"""A call the model proposed, judged: recorded in the history, then refused on the spot, run, or
asked about, as its tool, the run's settled side effects, the approval policy in force and the
grants people made say; and what the loop knows besides the state to judge it (`Context`).

Pure, like the rest of the loop (`loop.py`): each function works on a `Draft` and hands out a
`Step` or the call's fate.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

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
from signoff.runtime.call_events import (
    ApprovalRequested,
    CallAllowedByGrant,
    CallAllowedByRule,
    CallDeniedByRule,
    GrantNotApplied,
    Proposed,
    WhyAsked,
)
from signoff.runtime.decisions import is_plain_json, jsonable
from signoff.runtime.effects import AskAbout
from signoff.runtime.grants import grant_refusal, grant_unfit
from signoff.runtime.history import ErrorKind, ToolCall
from signoff.runtime.loop import AskApproval, Draft, RunPreview, Step
from signoff.runtime.loop_events import ToolDecision
from signoff.runtime.pending_calls import Asked, GrantOffer, PendingCall, Preview
from signoff.runtime.records import GrantRecord
from signoff.runtime.schema import RunState, Usage
from signoff.runtime.stalls import Repeats
from signoff.runtime.state import call_fingerprint, redact, secret_names
from signoff.runtime.turns import Catalogue
from signoff.runtime.values import valid
from signoff.tools.base import CheckedArgs, Tool, without

# -- what the loop knows besides the state ---------------------------------------------------------


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
    answers for what was sent. Every look at a call, first or again, goes through here. A tool that
    cannot wait as long as the policy would have people take (`Tool.approval_ttl_s`) shortens it."""
    verdict = evaluate(policy, ProposedCall(tool=tool.name, args=without(args, frozenset(defaulted)),
                                            side_effect=tool.side_effect,
                                            requester=caller.requester, channel=caller.channel, usage=usage))
    if isinstance(verdict, Ask) and tool.approval_ttl_s is not None:
        return dataclasses.replace(verdict, requirement=verdict.requirement.waiting_at_most(tool.approval_ttl_s))
    return verdict


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


# -- a proposed call's fate ------------------------------------------------------------------------


@dataclass(frozen=True)
class NotMade:
    """The call is not made: the model is told why (it was settled on the spot)."""

    error: str
    kind: ErrorKind
    rule: str | None = None


@dataclass(frozen=True)
class RunsUnasked:
    """The call runs without a person: a read no rule names, a rule's allow, or a grant."""

    pending: PendingCall
    tool: Tool
    allowed_by: str | None = None
    granted_by: str | None = None


@dataclass(frozen=True)
class AsksAPerson:
    """The call waits for a person, as the policy's `pending.asked` says."""

    pending: PendingCall
    why: Proposed


Fate = NotMade | RunsUnasked | AsksAPerson


def recorded(draft: Draft, context: Context, decision: Mapping[str, Any], default_id: str,
             provenance: Mapping[str, Any]) -> ToolCall:
    """The call `decision` proposes, appended to the history and audited as a decision."""
    step = draft.steps
    # JSON-only from here on: a checkpoint must be able to hold whatever the policy proposed.
    name, args = decision["tool"], jsonable(decision.get("args", {}))
    said = {k: decision[k] for k in ("text", "note") if isinstance(decision.get(k), str)}
    # The policy's strings are trusted as they are only when they are exact strings (pydantic
    # would make a subclass one); the arguments are plain JSON, just made so by `jsonable`.
    call = valid(ToolCall, type(name) is str and all(type(text) is str for text in said.values()),
                 role="assistant", step=step, tool=name, args=args,
                 call_id=str(decision.get("call_id") or default_id), **said, **provenance)
    draft.append(call)
    draft.record(ToolDecision(tool=name, args=context.redacted(name, args)))
    return call


def judged(draft: Draft, context: Context, call: ToolCall, key: str, proposed: set[str]) -> Fate:
    """What becomes of `call` under `key`: refused on the spot, run, or asked about, as its tool,
    the run's settled side effects (and `proposed`, those of this turn so far) and the policy say."""
    name, step = call.tool, call.step
    tool = context.tools.get(name)
    if tool is None:
        return NotMade(f"unknown tool {name}", "unknown_tool")
    try:
        checked = tool.checked(call.args)
    except ValueError as exc:
        return NotMade(str(exc), "invalid_args")
    args = checked.args
    pending = valid(PendingCall, type(args) is dict and is_plain_json(args),  # as the tool validated them
                    tool=name, args=args, key=key, step=step, call_id=call.call_id, contract=tool.contract)
    if tool.side_effect:
        repeated = _repeated(draft.state, name, args, key, proposed)
        if repeated is not None:
            return repeated
    return _ruled(draft, context, tool, pending, checked)


def _repeated(state: RunState, name: str, args: Mapping[str, Any], key: str, proposed: set[str]) -> NotMade | None:
    """The refusal of a side effect that repeats a call the run settled, another of the turn being
    settled, or one proposed earlier in this reply (`proposed`, by fingerprint, which it joins)."""
    fingerprint = call_fingerprint(name, args)
    repeated = repeat_of(state, name, args, key)
    if repeated is not None:
        return NotMade(f"refused: {repeated}; it is not proposed again", "duplicate")
    if fingerprint in proposed:
        return NotMade(f"refused: an identical {name} call is already proposed in this reply; it is made once",
                       "duplicate")
    proposed.add(fingerprint)
    return None


def _ruled(draft: Draft, context: Context, tool: Tool, pending: PendingCall, checked: CheckedArgs) -> Fate:
    """What the policy in force makes of `pending`, its arguments as the tool `checked` them: it runs
    (a read no rule names, a rule's allow, a grant), a rule denies it, or a person is asked."""
    key, name, args = pending.key, pending.tool, checked.args
    verdict = context.verdict(tool, args, draft.usage, checked.defaulted)
    policy, errors = context.approval_policy.digest, verdict.errors or None
    match verdict:
        case Allow(rule=None) if not verdict.errors:  # a read-only call no rule names: the common case
            return RunsUnasked(pending, tool)
        case Allow(rule=rule):
            draft.record(CallAllowedByRule(key=key, tool=name, rule=rule, policy=policy, errors=errors))
            return RunsUnasked(pending, tool, allowed_by=rule)
        case Deny(rule=rule, reason=reason):
            draft.record(CallDeniedByRule(key=key, tool=name, rule=rule, reason=reason, policy=policy, errors=errors))
            return NotMade(denied_by_rule(rule, reason), "denied_by_rule", rule)
        case Ask(rule=rule, requirement=requirement):
            asked = asked_by(context, rule, requirement, checked.defaulted)
    pending = pending.evolved(asked=asked)
    grant = granted(draft, context, pending, errors)
    if grant is not None:
        return RunsUnasked(pending, tool, granted_by=grant.grant_id)
    return AsksAPerson(pending, Proposed(policy=policy, errors=errors))


def granted(draft: Draft, context: Context, call: PendingCall,
            errors: tuple[str, ...] | None = None) -> GrantRecord | None:
    """The grant that lets the asked `call` run unasked, said in the audit log; each grant that
    covers it but may not, under the policy in force, said too, with why (`errors`: what the
    policy could not read of its rules as it judged the call)."""
    asked = call.asked
    assert asked is not None, "only an asked call can be granted"
    grant, unfit = context.grant_for(draft.state.run_id, call.tool, asked.rule, call.args, asked.grant)
    policy = context.approval_policy.digest
    for grant_not_used, reason in unfit:
        draft.record(GrantNotApplied(key=call.key, tool=call.tool, rule=asked.rule, grant_id=grant_not_used.grant_id,
                                     reason=reason, policy=policy, errors=errors))
    if grant is not None:
        draft.record(CallAllowedByGrant(key=call.key, tool=call.tool, rule=asked.rule, grant_id=grant.grant_id,
                                        granted_by=grant.created_by, policy=policy, errors=errors))
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


def denied_by_rule(rule: str, reason: str) -> str:
    """What the model is told of a call the policy denied."""
    return f"denied by policy rule {rule}: {reason}"


# -- asking a person -------------------------------------------------------------------------------


def ask_approval(draft: Draft, context: Context, pending: PendingCall, why: WhyAsked) -> Step:
    """Pause on `pending`, asked about as its `asked` says, for the reason `why`; first, if its tool
    previews what it would do, take the preview, which the approval then shows and is bound to."""
    tool = context.tools.get(pending.tool)
    if tool is not None and tool.preview is not None and pending.preview is None:
        return draft.then(RunPreview(pending, tool, why))
    draft.evolve(pending=pending, status="awaiting_approval")
    draft.record(approval_requested(context, pending, why))
    draft.effects.append(AskAbout(pending.key))
    return draft.then(AskApproval(pending))


def approval_requested(context: Context, pending: PendingCall, why: WhyAsked) -> ApprovalRequested:
    """The event of a person asked about `pending`: its arguments as approvers see them, the rule
    that asks and how many must approve (the built-in policy's one, without a rule)."""
    asked, name = pending.asked, pending.tool
    return ApprovalRequested(key=pending.key, tool=name, args=context.redacted(name, dict(pending.args)),
                             rule=asked.rule if asked is not None else None,
                             quorum=asked.quorum if asked is not None else 1, why=why)


def after_preview(state: RunState, context: Context, action: RunPreview, preview: Preview) -> Step:
    """The call's preview taken: it is asked about with it (one of a turn's several calls waits for
    the others' previews, and all are asked about at once)."""
    draft = Draft(state)
    call = action.call.evolved(preview=preview)
    if state.batch is not None and state.batch.of(call.key) is not None:
        draft.evolve(batch=state.batch.with_call(call.key, pending=call))
    if action.why is None:  # one of a turn's calls: asked with the others once all are previewed
        return draft.go_on()
    return ask_approval(draft, context, call, action.why)

