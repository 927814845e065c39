"""Approval policy as code: rules that allow, ask or deny each proposed tool call. Pure: no I/O, no Slack, no SQL.

What an asked call needs (its `Requirement`, and the `Grant`, `Escalation` and `BreakGlass` a rule may
add) is `approval_requirements`; its names are imported from here as well.

`policy_file.parse_policy` reads a policy file into an `ApprovalPolicy`; `evaluate` then decides every
call: the first rule that names the tool and whose `when` holds wins, and an expression that cannot be
evaluated for a call never lets it run unasked.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal, TypeAlias, assert_never, get_args

from signoff.runtime.approval_requirements import ON_EXPIRY as ON_EXPIRY
from signoff.runtime.approval_requirements import BreakGlass as BreakGlass
from signoff.runtime.approval_requirements import Escalation as Escalation
from signoff.runtime.approval_requirements import Grant as Grant
from signoff.runtime.approval_requirements import GrantScope as GrantScope
from signoff.runtime.approval_requirements import OnExpiry as OnExpiry
from signoff.runtime.approval_requirements import Requirement as Requirement
from signoff.runtime.approval_requirements import json_seconds
from signoff.runtime.cel_strict import ValueRead
from signoff.runtime.policy_cel import Facts, When, WhenError

Decision = Literal["allow", "ask", "deny"]
DECISIONS: tuple[str, ...] = get_args(Decision)
BUILT_IN = "built-in"
"""The `source` of `default_policy()`."""

_TOOLS_REMEMBERED = 1024
_LONGEST_TOOL_REMEMBERED = 200


class PolicyError(ValueError):
    """A policy that cannot be loaded; the one message names the source, the rule and the problem."""


@dataclass(frozen=True)
class Allow:
    """The call runs without a person."""

    rule: str | None
    """None: no rule named the call, which is read-only."""
    errors: tuple[str, ...] = ()
    """Expressions that could not be evaluated on the way, for the audit trail."""


@dataclass(frozen=True)
class Ask:
    """The call waits until `requirement` is met."""

    rule: str | None
    """None: no rule named the call, which has a side effect, so the defaults apply."""
    requirement: Requirement
    errors: tuple[str, ...] = ()


@dataclass(frozen=True)
class Deny:
    """The call never runs; `reason` is what the model is told."""

    rule: str
    reason: str
    errors: tuple[str, ...] = ()


Verdict: TypeAlias = Allow | Ask | Deny


@dataclass(frozen=True)
class ProposedCall:
    """The facts a rule may look at."""

    tool: str
    args: Mapping[str, Any]
    """The model's arguments: untrusted JSON."""
    side_effect: bool
    requester: str = ""
    channel: str = ""
    usage: Mapping[str, Any] = field(default_factory=dict)
    """The run's usage so far, e.g. `{"steps": 3, "tool_calls": 1, "cost_usd": 0.01}`."""


@dataclass(frozen=True)
class Rule:
    """One rule as loaded; `when` keeps its source text, and the glob and expression compile on creation."""

    name: str
    tool: str
    decision: Decision
    when: str | None = None
    approvers: tuple[str, ...] | None = None
    quorum: int | None = None
    ttl: timedelta | None = None
    allow_self_approval: bool | None = None
    confirm: bool = False
    reason: str | None = None
    on_expiry: OnExpiry | None = None
    grant: Grant | None = None
    remind: tuple[float, ...] | None = None
    escalate: Escalation | None = None
    step_up: timedelta | None = None
    """Approving needs a sign-in no older than this, at the web console (`Requirement.step_up`)."""
    break_glass: BreakGlass | None = None
    """One person may approve alone with a justification (`Requirement.break_glass`)."""
    _glob: re.Pattern[str] = field(init=False, repr=False, compare=False)
    _when: When | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_glob", _compile_glob(self.tool))
        object.__setattr__(self, "_when", None if self.when is None else _compile_when(self.when))

    def names(self, tool: str) -> bool:
        """Whether the rule's glob matches this tool name (case-sensitive)."""
        return self._glob.match(tool) is not None

    def holds(self, call: ProposedCall) -> bool | str:
        """Whether `when` is true for `call` (a rule without one holds for every call); a string says
        why it could not be evaluated."""
        return True if self._when is None else self._when.holds(_facts(call))

    def value_reads(self) -> tuple[ValueRead, ...]:
        """The arguments `when` converts or compares, where a value it was not written for is an error."""
        return () if self._when is None else self._when.value_reads()

    def holds_in_celpy(self, call: ProposedCall) -> bool | str:
        """`holds` as celpy alone decides it, without the fast check: the meaning that check must keep."""
        return True if self._when is None else self._when.holds_in_celpy(_facts(call))


@dataclass(frozen=True)
class ApprovalPolicy:
    """The rules, tried top to bottom, and the requirement a side effect no rule names must meet."""

    defaults: Requirement
    rules: tuple[Rule, ...]
    source: str
    """The file's path as given, or `built-in`."""
    digest: str
    """16 hex characters identifying the parsed policy: comments and layout do not change it, any rule does."""
    _naming: dict[str, tuple[Rule, ...]] = field(default_factory=dict, init=False, repr=False, compare=False)
    """The rules that name each tool seen so far, in order: every call would otherwise match every glob."""

    @classmethod
    def build(cls, defaults: Requirement, rules: tuple[Rule, ...], source: str) -> ApprovalPolicy:
        """The policy of these rules and defaults, with its digest."""
        canonical = {"defaults": defaults.to_json(), "rules": [_rule_json(rule) for rule in rules]}
        text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return cls(defaults, rules, source, hashlib.sha256(text.encode()).hexdigest()[:16])

    def rule(self, name: str) -> Rule | None:
        """The rule called `name`, if there is one."""
        return next((rule for rule in self.rules if rule.name == name), None)

    def requirement(self, rule: Rule) -> Requirement:
        """What `rule` asks of a call, the defaults filling in what it leaves out."""
        return _requirement(rule, self.defaults)

    def rules_naming(self, tool: str) -> tuple[Rule, ...]:
        """The rules whose glob names `tool`, top to bottom."""
        naming = self._naming.get(tool)
        if naming is None:
            naming = tuple(rule for rule in self.rules if rule.names(tool))
            # The model picks the tool names: remember a bounded number of short ones, and match the rest anew.
            if len(self._naming) < _TOOLS_REMEMBERED and len(tool) <= _LONGEST_TOOL_REMEMBERED:
                self._naming[tool] = naming
        return naming


def default_policy(approvers: Iterable[str] = (), ttl: timedelta = timedelta(minutes=30),
                   allow_self_approval: bool = False) -> ApprovalPolicy:
    """The built-in policy, with no rules: side effects ask the defaults, reads run unasked."""
    return ApprovalPolicy.build(Requirement(tuple(approvers), 1, ttl, allow_self_approval), (), BUILT_IN)


def evaluate(policy: ApprovalPolicy, call: ProposedCall) -> Verdict:
    """The verdict of the first rule that names the call and whose `when` holds; never raises.

    A `when` that cannot be evaluated fails closed: an ask or deny rule then matches, an allow rule does
    not. Each such error is kept in the verdict's `errors`.
    """
    errors: list[str] = []
    facts: Facts | None = None  # read once, and only if some rule has a `when`
    for rule in policy.rules_naming(call.tool):
        if rule._when is not None:
            if facts is None:
                facts = _facts(call)
            holds = rule._when.holds(facts)
            if isinstance(holds, str):
                errors.append(f"rule {rule.name!r}: {holds}")
                if rule.decision == "allow":
                    continue
            elif not holds:
                continue
        return _verdict(rule, policy.defaults, tuple(errors))
    if call.side_effect:
        return Ask(None, policy.defaults, tuple(errors))
    return Allow(None, tuple(errors))


def _verdict(rule: Rule, defaults: Requirement, errors: tuple[str, ...]) -> Verdict:
    match rule.decision:
        case "allow":
            return Allow(rule.name, errors)
        case "deny":
            return Deny(rule.name, rule.reason or f"denied by policy rule {rule.name}", errors)
        case "ask":
            return Ask(rule.name, _requirement(rule, defaults), errors)
        case _:
            assert_never(rule.decision)


def _requirement(rule: Rule, defaults: Requirement) -> Requirement:
    return Requirement(
        approvers=defaults.approvers if rule.approvers is None else rule.approvers,
        quorum=defaults.quorum if rule.quorum is None else rule.quorum,
        ttl=defaults.ttl if rule.ttl is None else rule.ttl,
        allow_self_approval=(defaults.allow_self_approval if rule.allow_self_approval is None
                             else rule.allow_self_approval),
        confirm=rule.confirm,
        on_expiry=defaults.on_expiry if rule.on_expiry is None else rule.on_expiry,
        grant=rule.grant,
        remind=defaults.remind if rule.remind is None else rule.remind,
        escalate=defaults.escalate if rule.escalate is None else rule.escalate,
        step_up=rule.step_up,
        break_glass=rule.break_glass,
    )


def _facts(call: ProposedCall) -> Facts:
    return Facts(call.tool, call.args, call.requester, call.channel, call.usage)


def _compile_when(text: str) -> When:
    try:
        return When(text)
    except WhenError as exc:
        raise PolicyError(str(exc)) from None


def _compile_glob(glob: str) -> re.Pattern[str]:
    if not glob:
        raise PolicyError("tool glob is empty; write the tool's name, or a pattern such as 'send_*'")
    position = 0
    while (position := glob.find("[", position)) != -1:
        # fnmatch reads an unclosed `[` as a literal, so `send_[` would quietly name no tool at all.
        end = position + 1 + (glob[position + 1:position + 2] == "!")
        end += glob[end:end + 1] == "]"  # a `]` right after `[` or `[!` is part of the set
        close = glob.find("]", end)
        if close == -1:
            raise PolicyError(f"tool glob {glob!r} has a '[' at position {position + 1} that is never closed")
        position = close + 1
    return re.compile(fnmatch.translate(glob))


def _rule_json(rule: Rule) -> dict[str, Any]:
    return {"name": rule.name, "tool": rule.tool, "decision": rule.decision, "when": rule.when,
            "approvers": None if rule.approvers is None else list(rule.approvers), "quorum": rule.quorum,
            "ttl_seconds": None if rule.ttl is None else rule.ttl.total_seconds(),
            "allow_self_approval": rule.allow_self_approval, "confirm": rule.confirm, "reason": rule.reason,
            **({"on_expiry": rule.on_expiry} if rule.on_expiry is not None else {}),
            **({"grant": rule.grant.to_json()} if rule.grant is not None else {}),
            **({"remind": list(rule.remind)} if rule.remind is not None else {}),
            **({"escalate": rule.escalate.to_json()} if rule.escalate is not None else {}),
            **({"step_up_seconds": json_seconds(rule.step_up)} if rule.step_up is not None else {}),
            **({"break_glass": rule.break_glass.to_json()} if rule.break_glass is not None else {})}


