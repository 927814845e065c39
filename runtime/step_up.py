"""Step-up: a fresh sign-in to approve. A rule's `step_up` says how recent a sign-in at the web
console an approve of its calls needs; this is that rule, once, for every surface a decision comes
from (a Slack click has none, so it is refused with the way to the console). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from signoff.runtime.durations import spoken


@dataclass(frozen=True)
class SignIn:
    """A person's sign-in as the web console verified it: the issuer, and when the person last
    authenticated there (the ID token's `auth_time`, by the issuer's clock)."""

    issuer: str
    at: datetime

    def to_json(self, step_up: timedelta) -> dict[str, Any]:
        """The fact a stepped-up decision records: which issuer, when the sign-in was, and how recent
        the rule required it to be."""
        return {"issuer": self.issuer, "signed_in_at": self.at.isoformat(),
                "max_age_seconds": int(step_up.total_seconds())}


def step_up_of(asked: Mapping[str, Any] | None) -> timedelta | None:
    """How recent a sign-in approving under `asked` (an approval's `asked`) must be; None: any
    decision counts, wherever it comes from."""
    seconds = (asked or {}).get("step_up_seconds")
    return timedelta(seconds=seconds) if isinstance(seconds, int | float) and seconds > 0 else None


def step_up_refusal(needed: timedelta | None, signed_in: SignIn | None, now: datetime) -> str | None:
    """Why an approve made with `signed_in` (None: not from the web console, e.g. a Slack click)
    does not meet a rule's `step_up` of `needed`, or None if it does (or none is needed)."""
    if needed is None:
        return None
    if signed_in is None:
        return (f"approving this call needs a sign-in no older than {spoken(needed.total_seconds())} at "
                "Signoff's web console, so it cannot be approved from here: open its page there")
    age = now - signed_in.at
    if age > needed:
        minutes = int(age.total_seconds() // 60)
        return (f"approving this call needs a sign-in no older than {spoken(needed.total_seconds())}, and yours "
                f"was {f'{minutes} min' if minutes else spoken(age.total_seconds())} ago: sign in again")
    return None
