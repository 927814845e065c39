"""What an asked call needs before it runs, as values: who may approve and how many, the time limit and
what its end does to the run, and what an approval may offer or demand (a grant, reminders,
escalation, a fresh sign-in, break-glass). `approval_policy` picks one for each call; an approval
stores it as `to_json` wrote it, and reads it back with `from_json`, which refuses anything else.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal, TypeGuard

OnExpiry = Literal["end", "continue"]
"""What a request nobody decided in time does to its run: end it as `expired`, or tell the model
the call was not made (a timeout, never worded as a denial) and go on."""
ON_EXPIRY: tuple[str, ...] = ("end", "continue")

GrantScope = Literal["run", "requester"]


@dataclass(frozen=True)
class Grant:
    """What "Approve + allow similar" lets run unasked after it: calls of the same tool under the
    same rule, for `lasting`, whose `same` arguments equal the approved call's, in the same run
    (`scope: run`) or in any run of the same requester (`scope: requester`)."""

    lasting: timedelta
    same: tuple[str, ...]
    scope: GrantScope = "run"

    @classmethod
    def from_json(cls, data: Any) -> Grant:
        """The grant `to_json` stored; raises `ValueError` on anything else."""
        if not (isinstance(data, Mapping) and _is_number(data.get("for_seconds")) and data["for_seconds"] > 0
                and isinstance(data.get("same"), list) and all(isinstance(n, str) for n in data["same"])
                and data.get("scope") in ("run", "requester")):
            raise ValueError(f"not a stored grant: {data!r}")
        return cls(timedelta(seconds=data["for_seconds"]), tuple(data["same"]),
                   "run" if data["scope"] == "run" else "requester")

    def to_json(self) -> dict[str, Any]:
        seconds = self.lasting.total_seconds()
        return {"for_seconds": int(seconds) if seconds.is_integer() else seconds, "same": list(self.same),
                "scope": self.scope}


@dataclass(frozen=True)
class Escalation:
    """After `after` with nobody deciding, `to` may decide too, and are told."""

    after: timedelta
    to: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        seconds = self.after.total_seconds()
        return {"after_seconds": int(seconds) if seconds.is_integer() else seconds, "to": list(self.to)}

    @classmethod
    def from_json(cls, data: Any) -> Escalation:
        if not (isinstance(data, Mapping) and _is_number(data.get("after_seconds")) and data["after_seconds"] > 0
                and isinstance(data.get("to"), list) and all(isinstance(i, str) for i in data["to"])):
            raise ValueError(f"not a stored escalation: {data!r}")
        return cls(timedelta(seconds=data["after_seconds"]), tuple(data["to"]))


@dataclass(frozen=True)
class BreakGlass:
    """One person may approve alone, typing why (at least `reason_min_chars`), and the call runs at
    once; `notify` (channel ids) are told loudly, and the rule's approvers review it within
    `review_within`."""

    reason_min_chars: int
    review_within: timedelta
    notify: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"reason_min_chars": self.reason_min_chars, "review_within_seconds": json_seconds(self.review_within),
                "notify": list(self.notify)}

    @classmethod
    def from_json(cls, data: Any) -> BreakGlass:
        if not (isinstance(data, Mapping) and _is_count(data.get("reason_min_chars")) and data["reason_min_chars"] >= 1
                and _is_number(data.get("review_within_seconds")) and data["review_within_seconds"] > 0
                and isinstance(data.get("notify"), list) and all(isinstance(c, str) for c in data["notify"])):
            raise ValueError(f"not a stored break-glass offer: {data!r}")
        return cls(data["reason_min_chars"], timedelta(seconds=data["review_within_seconds"]), tuple(data["notify"]))


@dataclass(frozen=True)
class Requirement:
    """What an asked call needs before it runs."""

    approvers: tuple[str, ...]
    """Slack user ids (U/W), user group ids (S) and `*`, in the order written."""
    quorum: int
    """How many distinct people must approve."""
    ttl: timedelta
    allow_self_approval: bool
    confirm: bool = False
    """Approve asks "are you sure?" first."""
    on_expiry: OnExpiry = "end"
    grant: Grant | None = None
    """Offered with the approval: "Approve + allow similar"."""
    remind: tuple[float, ...] = ()
    """Fractions of `ttl` (0.5 is half way) at which the approvers are reminded."""
    escalate: Escalation | None = None
    step_up: timedelta | None = None
    """Approving needs a sign-in at the web console no older than this (None: any decision counts)."""
    break_glass: BreakGlass | None = None
    """One person may approve alone with a justification, reviewed afterwards (None: never)."""

    def waiting_at_most(self, seconds: float) -> Requirement:
        """This requirement, its time limit `seconds` if that is shorter (never longer)."""
        limit = timedelta(seconds=seconds)
        return dataclasses.replace(self, ttl=limit) if limit < self.ttl else self

    def to_json(self) -> dict[str, Any]:
        """The requirement as stored with an approval."""
        seconds = self.ttl.total_seconds()
        return {"approvers": list(self.approvers), "quorum": self.quorum,
                "ttl_seconds": int(seconds) if seconds.is_integer() else seconds,
                "allow_self_approval": self.allow_self_approval, "confirm": self.confirm,
                "on_expiry": self.on_expiry, **({"grant": self.grant.to_json()} if self.grant else {}),
                **({"remind": list(self.remind)} if self.remind else {}),
                **({"escalate": self.escalate.to_json()} if self.escalate else {}),
                **({"step_up_seconds": json_seconds(self.step_up)} if self.step_up else {}),
                **({"break_glass": self.break_glass.to_json()} if self.break_glass else {})}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Requirement:
        """The requirement `to_json` stored; raises `ValueError` on anything else."""
        approvers, quorum, seconds, self_approval = (
            data.get(key) for key in ("approvers", "quorum", "ttl_seconds", "allow_self_approval"))
        confirm = data.get("confirm", False)
        on_expiry = data.get("on_expiry", "end")
        if not (isinstance(approvers, list) and all(isinstance(a, str) for a in approvers)
                and _is_count(quorum) and quorum >= 1 and _is_number(seconds) and seconds > 0
                and isinstance(self_approval, bool) and isinstance(confirm, bool) and on_expiry in ON_EXPIRY):
            raise ValueError(f"not a stored approval requirement: {dict(data)!r}")
        grant, remind, escalate = data.get("grant"), data.get("remind", []), data.get("escalate")
        step_up = data.get("step_up_seconds")
        if not (isinstance(remind, list) and all(_is_number(f) and 0 < f < 1 for f in remind)
                and (step_up is None or (_is_number(step_up) and step_up > 0))):
            raise ValueError(f"not a stored approval requirement: {dict(data)!r}")
        return cls(tuple(approvers), quorum, timedelta(seconds=seconds), self_approval, confirm, on_expiry,
                   Grant.from_json(grant) if grant is not None else None, tuple(remind),
                   Escalation.from_json(escalate) if escalate is not None else None,
                   None if step_up is None else timedelta(seconds=step_up),
                   BreakGlass.from_json(data["break_glass"]) if data.get("break_glass") is not None else None)


def json_seconds(duration: timedelta) -> int | float:
    """A duration as stored: whole seconds as an int, else a float."""
    seconds = duration.total_seconds()
    return int(seconds) if seconds.is_integer() else seconds


def _is_count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)
