"""The approval policy file's schema: pydantic models of what the YAML may say, and what each part becomes.

The models take the YAML strictly: its own values (a quorum is 2, never "2" or true), no field they do
not know, no null for a field left out, and on each rule only the fields its decision uses. Each model
builds the runtime value it stands for (`Requirement`, `Rule`, `Grant`, `Escalation`), checking there
what a rule inherits from the defaults. A validator that finds more than a wrong type words its own
error; `policy_file` words the rest. Pure: no I/O.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    PlainValidator,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from signoff.runtime.approval_policy import (
    DECISIONS,
    BreakGlass,
    Escalation,
    Grant,
    GrantScope,
    OnExpiry,
    PolicyError,
    Requirement,
    Rule,
)
from signoff.runtime.people import APPROVER_FORMS, approver_kind, is_slack_user

_DURATION = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
_WRONG = "wrong_value"
"""The error of a value its field does not take, which `policy_file` words as it words pydantic's type errors."""


def _wrong() -> PydanticCustomError:
    return PydanticCustomError(_WRONG, "not a value this field takes")


def _duration(value: object) -> timedelta:
    """`90s`, `15m`, `2h`, `1h30m`, `1d`, or a whole number of seconds; longer than zero."""
    match = _DURATION.fullmatch(value.strip().lower()) if isinstance(value, str) else None
    if match and any(match.groups()):
        days, hours, minutes, secs = (int(part or 0) for part in match.groups())
        seconds = ((days * 24 + hours) * 60 + minutes) * 60 + secs
    elif isinstance(value, int) and not isinstance(value, bool):
        seconds = value
    else:
        raise _wrong()
    if seconds <= 0:
        raise ValueError(f"ttl must be longer than zero, got {value!r}")
    return timedelta(seconds=seconds)


STEP_UP_LONGEST = timedelta(days=1)
"""The longest `step_up` a rule may ask: a sign-in older than a day proves nothing about who holds it now."""


def _step_up(value: object) -> timedelta:
    """`step_up: 10m`: a duration, as `ttl` takes, from a second to a day."""
    try:
        duration = _duration(value)
    except ValueError:  # zero or less is worded as any other value the field does not take
        raise _wrong() from None
    if duration > STEP_UP_LONGEST:
        raise ValueError(f"step_up is how recent a sign-in must be, at most 1d, got {value!r}")
    return duration


def _percent(value: object) -> float:
    """`50%` as the fraction 0.5, strictly between 0% and 100%."""
    text = value.strip() if isinstance(value, str) else ""
    try:
        percent = float(text[:-1]) if text.endswith("%") else None
    except ValueError:
        percent = None
    if percent is None or not 0 < percent < 100:
        raise _wrong()
    return percent / 100


def _approver(value: str) -> str:
    if approver_kind(value) is None:
        raise ValueError(f"approver {value!r} is not {APPROVER_FORMS}")
    return value


def _all_text(value: object) -> object:
    # A list with anything but text in it is refused whole, so that its message shows the list as written.
    if isinstance(value, list) and not all(isinstance(item, str) for item in value):
        raise _wrong()
    return value


def _not_blank(value: str) -> str:
    if not value.strip():
        raise _wrong()
    return value


Text = Annotated[str, AfterValidator(_not_blank)]
Duration = Annotated[timedelta, PlainValidator(_duration)]
StepUp = Annotated[timedelta, PlainValidator(_step_up)]
Quorum = Annotated[int, Field(ge=1)]
SlackIds = Annotated[list[Annotated[str, AfterValidator(_approver)]], BeforeValidator(_all_text)]
"""Slack user ids (U/W), user group ids (S), `*` and on-call schedules (`people.APPROVER_FORMS`)."""
Percents = list[Annotated[float, PlainValidator(_percent)]]


class _FileModel(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)
    _null_is_left_out: ClassVar[tuple[str, ...]] = ()
    """Fields where null (`allow_self_approval:` with nothing after it) has always meant "not set"."""

    @field_validator("*", mode="before", check_fields=False)
    @classmethod
    def _not_null(cls, value: object, info: ValidationInfo) -> object:
        # A field left out takes its default; one written as null is a value the field does not take.
        if value is None and info.field_name not in cls._null_is_left_out:
            raise _wrong()
        return value


class EscalateFile(_FileModel):
    """`escalate:`: after `after` with nobody deciding, `to` may decide too."""

    after: Duration
    to: Annotated[SlackIds, Field(min_length=1)]

    def escalation(self) -> Escalation:
        return Escalation(self.after, tuple(self.to))


class GrantFile(_FileModel):
    """`grant:`: what "Approve + allow similar" lets run unasked after it."""

    lasting: Duration = Field(alias="for")
    same: list[Annotated[str, Field(min_length=1)]] = []
    scope: GrantScope = "run"

    def grant(self) -> Grant:
        return Grant(self.lasting, tuple(self.same), self.scope)


REVIEW_LONGEST = timedelta(days=30)
"""The longest `review_within` a break-glass may wait for its review: past that nobody remembers why."""


def _review_within(value: object) -> timedelta:
    duration = _duration(value)
    if duration > REVIEW_LONGEST:
        raise ValueError(f"review_within is how soon a break-glass is reviewed, at most 30d, got {value!r}")
    return duration


def _channel(value: str) -> str:
    if not re.fullmatch(r"[CG][A-Z0-9]{2,}", value):
        raise ValueError(f"notify takes Slack channel ids such as C0SECURITY, got {value!r}")
    return value


class BreakGlassFile(_FileModel):
    """`break_glass:`: one person may approve alone, saying why; it is told and reviewed."""

    reason_min_chars: Annotated[int, Field(ge=1, le=500)] = 20
    review_within: Annotated[timedelta, PlainValidator(_review_within)] = timedelta(hours=24)
    notify: Annotated[list[Annotated[str, AfterValidator(_channel)]], BeforeValidator(_all_text),
                      Field(min_length=1)]

    def break_glass(self) -> BreakGlass:
        return BreakGlass(self.reason_min_chars, self.review_within, tuple(self.notify))


class DefaultsFile(_FileModel):
    """`defaults:`: what a side effect no rule names must meet, and what ask rules leave out."""

    approvers: SlackIds | None = None
    quorum: Quorum | None = None
    ttl: Duration | None = None
    allow_self_approval: bool | None = None
    on_expiry: OnExpiry | None = None
    remind: Percents | None = None
    escalate: EscalateFile | None = None

    def requirement(self, fallback: Requirement) -> Requirement:
        """These defaults, `fallback`'s where the file sets none."""
        defaults = Requirement(
            approvers=fallback.approvers if self.approvers is None else tuple(self.approvers),
            quorum=fallback.quorum if self.quorum is None else self.quorum,
            ttl=fallback.ttl if self.ttl is None else self.ttl,
            allow_self_approval=(fallback.allow_self_approval if self.allow_self_approval is None
                                 else self.allow_self_approval),
            on_expiry=fallback.on_expiry if self.on_expiry is None else self.on_expiry,
            remind=fallback.remind if self.remind is None else _reminders(self.remind),
            escalate=fallback.escalate if self.escalate is None else self.escalate.escalation())
        _check_quorum(defaults.quorum, defaults.approvers)
        return defaults


class _RuleFile(_FileModel):
    name: Text
    tool: str
    """A glob, checked as the rule is built; empty, it is refused there with a better reason."""
    when: Text | None = None


class AllowRuleFile(_RuleFile):
    decision: Literal["allow"]

    def rule(self, defaults: Requirement) -> Rule:
        return Rule(self.name, self.tool, self.decision, self.when)


class DenyRuleFile(_RuleFile):
    decision: Literal["deny"]
    reason: Text | None = None
    """What the model is told."""

    def rule(self, defaults: Requirement) -> Rule:
        return Rule(self.name, self.tool, self.decision, self.when, reason=self.reason)


class AskRuleFile(_RuleFile):
    _null_is_left_out = ("allow_self_approval",)
    decision: Literal["ask"] = "ask"
    approvers: Annotated[SlackIds, Field(min_length=1)] | None = None
    quorum: Quorum | None = None
    ttl: Duration | None = None
    allow_self_approval: bool | None = None
    confirm: bool = False
    on_expiry: OnExpiry | None = None
    grant: GrantFile | None = None
    remind: Percents | None = None
    escalate: EscalateFile | None = None
    step_up: StepUp | None = None
    break_glass: BreakGlassFile | None = None

    @model_validator(mode="after")
    def _grant_without_confirm(self) -> AskRuleFile:
        if self.break_glass is not None and self.step_up is not None:
            raise ValueError("break_glass is never offered with step_up: breaking the glass from Slack would "
                             "approve without the fresh sign-in step_up requires")
        if self.grant is not None and self.confirm:
            raise ValueError("grant is never offered with confirm: true: each call of the rule asks 'are you sure?'")
        if self.grant is not None and self.step_up is not None:
            raise ValueError("grant is never offered with step_up: each call of the rule needs a fresh sign-in, "
                             "and a grant would let later calls run with none")
        return self

    def rule(self, defaults: Requirement) -> Rule:
        """The rule, refused if what it asks cannot be given with the defaults it inherits."""
        approvers = None if self.approvers is None else tuple(self.approvers)
        quorum = defaults.quorum if self.quorum is None else self.quorum
        _check_quorum(quorum, defaults.approvers if approvers is None else approvers, inherited=approvers is None)
        if self.grant is not None and quorum > 1:
            raise PolicyError("grant is never offered where a quorum above 1 is needed: one person's yes cannot "
                              "stand for several later calls that each need more people")
        return Rule(name=self.name, tool=self.tool, decision=self.decision, when=self.when, approvers=approvers,
                    quorum=self.quorum, ttl=self.ttl, allow_self_approval=self.allow_self_approval,
                    confirm=self.confirm, on_expiry=self.on_expiry,
                    grant=None if self.grant is None else self.grant.grant(),
                    remind=None if self.remind is None else _reminders(self.remind),
                    escalate=None if self.escalate is None else self.escalate.escalation(),
                    step_up=self.step_up,
                    break_glass=None if self.break_glass is None else self.break_glass.break_glass())


def _decision_of(rule: object) -> str:
    # A rule naming no decision asks. One naming a decision that does not exist is read as an ask rule
    # too, so that its decision is refused with the same words as any other wrong value.
    decision = rule.get("decision", "ask") if isinstance(rule, dict) else "ask"
    return str(decision) if decision in DECISIONS else "ask"


RuleFile = Annotated[Annotated[AllowRuleFile, Tag("allow")] | Annotated[AskRuleFile, Tag("ask")]
                     | Annotated[DenyRuleFile, Tag("deny")], Discriminator(_decision_of)]


class PolicyFile(_FileModel):
    """The whole file: rules tried top to bottom, and the defaults."""

    defaults: DefaultsFile = DefaultsFile()
    rules: list[RuleFile] = []


def _reminders(fractions: list[float]) -> tuple[float, ...]:
    return tuple(sorted(set(fractions)))


def _check_quorum(quorum: int, approvers: tuple[str, ...], inherited: bool = False) -> None:
    """Refuse a quorum that named people alone cannot reach; groups, `*` and on-call schedules may
    hold anyone, so they pass."""
    people = sorted(set(approvers), key=approvers.index)
    if not people or any(not is_slack_user(a) for a in people):
        return
    if quorum > len(people):
        plural = "" if len(people) == 1 else "s"
        whose = "the default" if inherited else "its"
        raise PolicyError(f"quorum {quorum} is more than {whose} {len(people)} approver{plural} "
                          f"({', '.join(people)}) can give")

