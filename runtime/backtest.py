"""A policy backtest: each recorded call's ruling then beside the ruling a policy gives it now, and
how the two differ. Pure: no I/O (`recorded_calls` reads the calls out of what a store kept).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, assert_never, get_args

from signoff.runtime.approval_policy import (
    Allow,
    ApprovalPolicy,
    Ask,
    Decision,
    Deny,
    ProposedCall,
    Verdict,
    evaluate,
)

Change = Literal["newly_allowed", "newly_asked", "newly_denied", "changed_approvers", "unchanged"]
CHANGES: tuple[Change, ...] = get_args(Change)
_NEWLY: dict[Decision, Change] = {"allow": "newly_allowed", "ask": "newly_asked", "deny": "newly_denied"}


@dataclass(frozen=True)
class Ruling:
    """What a policy decided of a call: allow, ask or deny, by which rule (None: no rule named it, so
    the default applied), and for an ask, whom and how many (None: not recorded)."""

    decision: Decision
    rule: str | None
    approvers: tuple[str, ...] | None = None
    quorum: int | None = None

    @classmethod
    def of(cls, verdict: Verdict) -> Ruling:
        """The ruling a verdict gives."""
        match verdict:
            case Allow(rule=rule):
                return cls("allow", rule)
            case Deny(rule=rule):
                return cls("deny", rule)
            case Ask(rule=rule, requirement=requirement):
                return cls("ask", rule, requirement.approvers, requirement.quorum)
            case _:
                assert_never(verdict)

    def to_json(self) -> dict[str, Any]:
        asked = {"approvers": None if self.approvers is None else list(self.approvers), "quorum": self.quorum}
        return {"decision": self.decision, "rule": self.rule, **(asked if self.decision == "ask" else {})}


@dataclass(frozen=True)
class RecordedCall:
    """A call a run proposed, as its store recorded it: the facts a rule sees, and the ruling then."""

    run_id: str
    key: str
    at: datetime
    call: ProposedCall
    then: Ruling


@dataclass(frozen=True)
class Backtested:
    """A recorded call, the ruling a policy gives it now, and how that differs from then."""

    recorded: RecordedCall
    now: Ruling
    change: Change

    def to_json(self) -> dict[str, Any]:
        recorded = self.recorded
        return {"change": self.change, "tool": recorded.call.tool, "run_id": recorded.run_id, "key": recorded.key,
                "at": recorded.at.isoformat(), "then": recorded.then.to_json(), "now": self.now.to_json()}


@dataclass(frozen=True)
class Backtest:
    """How many recorded calls fall in each change, and the calls that changed, in the order recorded."""

    counts: dict[Change, int]
    changed: tuple[Backtested, ...]

    def to_json(self) -> dict[str, Any]:
        return {"counts": dict(self.counts), "calls": [call.to_json() for call in self.changed]}


def change(then: Ruling, now: Ruling) -> Change:
    """How the ruling `now` differs from `then`: a new decision, the same ask of other people (or of
    another number of them), or nothing that changes what happens to the call.

    Approvers are compared as a set: their order says nothing about who may decide. What was not
    recorded then (`None`) is not counted as a change."""
    if now.decision != then.decision:
        return _NEWLY[now.decision]
    if now.decision == "ask":
        if then.approvers is not None and set(then.approvers) != set(now.approvers or ()):
            return "changed_approvers"
        if then.quorum is not None and then.quorum != now.quorum:
            return "changed_approvers"
    return "unchanged"


def backtest(policy: ApprovalPolicy, calls: Iterable[RecordedCall]) -> Backtest:
    """Each of `calls` decided again by `policy`, beside its ruling then."""
    counts: dict[Change, int] = dict.fromkeys(CHANGES, 0)
    changed: list[Backtested] = []
    for recorded in calls:
        now = Ruling.of(evaluate(policy, recorded.call))
        kind = change(recorded.then, now)
        counts[kind] += 1
        if kind != "unchanged":
            changed.append(Backtested(recorded, now, kind))
    return Backtest(counts, tuple(changed))
