"""The calls runs proposed, read back out of their audit events and approvals, for a backtest: what
each call was (tool, arguments, who asked, where) and what the policy then made of it. Pure: the
store's adapter reads the rows (`adapters/recorded_reads.py`); this decides what they mean.

A call's ruling then is the first the audit log records for its key: `call_allowed_by_rule`,
`call_denied_by_rule`, `approval_requested` or `call_allowed_by_grant` (asked about, and let run by
a grant); a read-only call no rule named has none, only its `tool_executed`. Edits and policy
changes while a call waited are not replayed: a call is compared as it was first proposed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from signoff.runtime.approval_policy import ProposedCall
from signoff.runtime.backtest import RecordedCall, Ruling
from signoff.runtime.digests import batch_place
from signoff.runtime.schema import NO_USAGE

RULED = ("call_allowed_by_rule", "call_denied_by_rule", "approval_requested", "call_allowed_by_grant")
"""The events that record what the policy made of a call, by its key."""
EXECUTED = ("tool_executed", "tool_failed")
PROPOSED = "decision"
EVENT_TYPES = (PROPOSED, *RULED, *EXECUTED)
"""Every event a backtest reads."""


@dataclass(frozen=True)
class StoredEvent:
    """An audit event as stored: its payload decoded."""

    run_id: str
    type: str
    payload: Mapping[str, Any]
    at: datetime


@dataclass(frozen=True)
class StoredApproval:
    """The first approval opened for a key: the arguments as the tool validated them, what the policy
    asked (`asked`: rule, approvers, quorum, the defaulted arguments) and the run's usage then."""

    args: Mapping[str, Any]
    asked: Mapping[str, Any] | None
    usage: Mapping[str, Any] | None


@dataclass(frozen=True)
class StoredCaller:
    """Who a run was for and where, as rules see them (`requester`, `channel`)."""

    requester: str
    channel: str


@dataclass
class _Seen:
    """What the events said of one key so far."""

    run_id: str
    tool: str
    step: int | None
    at: datetime
    ruled: StoredEvent | None = None
    side_effect: bool | None = None
    proposed_args: Mapping[str, Any] | None = field(default=None, repr=False)


def recorded_calls(events: Iterable[StoredEvent], approvals: Mapping[str, StoredApproval],
                   callers: Mapping[str, StoredCaller]) -> list[RecordedCall]:
    """The calls in `events` (in each run's order) that a policy ruled on, with their rulings then,
    oldest first."""
    proposed: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    seen: dict[str, _Seen] = {}
    for event in events:
        payload = event.payload
        if event.type == PROPOSED:
            if payload.get("kind") == "tool" and isinstance(payload.get("step"), int):
                args = payload.get("args")
                proposed.setdefault((event.run_id, payload["step"]), []).append(args if isinstance(args, dict) else {})
            continue
        key, tool = payload.get("key"), payload.get("tool")
        if not isinstance(key, str) or not isinstance(tool, str):
            continue
        step = payload.get("step")
        known = seen.setdefault(key, _Seen(event.run_id, tool, step if isinstance(step, int) else None, event.at))
        if event.type in RULED and known.ruled is None:
            known.ruled = event
        elif event.type in EXECUTED and isinstance(payload.get("side_effect"), bool):
            known.side_effect = payload["side_effect"]
    side_effects = {known.tool: known.side_effect for known in seen.values() if known.side_effect is not None}
    calls = []
    for key, known in seen.items():
        then = _ruling(known, approvals.get(key))
        if then is None:
            continue
        approval = approvals.get(key)
        call = _call(known, then, _args(key, known, approval, proposed), side_effects, approval,
                     callers.get(known.run_id))
        calls.append(RecordedCall(known.run_id, key, known.at, call, then))
    return sorted(calls, key=lambda recorded: recorded.at)  # stable: a run's calls at one moment stay in order


def _ruling(known: _Seen, approval: StoredApproval | None) -> Ruling | None:
    """The ruling then; None for a side effect that ran with none recorded (nothing to compare)."""
    ruled = known.ruled
    if ruled is None:
        return Ruling("allow", None) if known.side_effect is False else None
    rule = ruled.payload.get("rule")
    rule = rule if isinstance(rule, str) else None
    match ruled.type:
        case "call_allowed_by_rule":
            return Ruling("allow", rule)
        case "call_denied_by_rule":
            return Ruling("deny", rule)
        case "approval_requested":
            asked = approval.asked if approval is not None else None
            approvers = asked.get("approvers") if asked is not None else None
            quorum = ruled.payload.get("quorum")
            return Ruling("ask", rule, tuple(approvers) if isinstance(approvers, list) else None,
                          quorum if isinstance(quorum, int) else None)
        case _:  # let run by a grant: asked about under `rule`, whom and how many not recorded
            return Ruling("ask", rule)


def _args(key: str, known: _Seen, approval: StoredApproval | None,
          proposed: Mapping[tuple[str, int], list[Mapping[str, Any]]]) -> Mapping[str, Any]:
    """The arguments the rules saw: an asked call's as its tool validated them, less the defaults it
    filled in (`asked.defaulted`); any other call's as the model proposed them."""
    if approval is not None:
        defaulted = (approval.asked or {}).get("defaulted") or ()
        return {name: value for name, value in approval.args.items() if name not in defaulted}
    if known.step is None:
        return {}
    in_step = proposed.get((known.run_id, known.step), [])
    place = batch_place(key) or 1  # a turn's n-th call has the key `run:step.n`
    return in_step[place - 1] if place <= len(in_step) else {}


def _call(known: _Seen, then: Ruling, args: Mapping[str, Any], side_effects: Mapping[str, bool],
          approval: StoredApproval | None, caller: StoredCaller | None) -> ProposedCall:
    side_effect = known.side_effect
    if side_effect is None:
        # Not run: a default ask says it has a side effect; else another call of its tool may say.
        # Failing that it is taken to have one, so that no rule's silence lets it run unasked.
        side_effect = True if then.decision == "ask" and then.rule is None else side_effects.get(known.tool, True)
    usage = approval.usage if approval is not None and approval.usage is not None else NO_USAGE.to_json()
    caller = caller or StoredCaller("", "")
    return ProposedCall(tool=known.tool, args=args, side_effect=side_effect, requester=caller.requester,
                        channel=caller.channel, usage=usage)
