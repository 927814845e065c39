"""Failpoints: named places where a test can make the process die, to prove crash recovery.

Inert unless enabled: a `Failpoints` built from an empty spec does nothing. A spec such as
`after_ledger_row=exit` makes the process exit at once (`os._exit`, no cleanup, like SIGKILL)
whenever that point is reached; `=raise` raises `FailpointHit` instead. A crash test restarts
the process without the spec to recover.
"""

from __future__ import annotations

import os

POINTS = (
    "after_decision",           # the policy answered; the step is not yet saved
    "after_ledger_row",         # the execution ledger says "started"; the tool has not run
    "after_tool",               # the tool ran; its outcome is not yet saved
    "after_checkpoint",         # the step is saved; nobody has been told yet
    "after_approval_recorded",  # a decision is stored; the run has not continued
    "before_approval_post",     # an approval exists; its Slack message is not posted yet
    "after_sweep",              # a sweep's reminders or follow-ups are stored; nobody has been told yet
)


class FailpointHit(BaseException):
    """Raised at an enabled failpoint in `raise` mode.

    A `BaseException`, like `KeyboardInterrupt`: it must pass through every `except Exception`
    (the agent's handler for tool errors above all) so that it acts as a crash, not a tool failure.
    """


class Failpoints:
    """The set of enabled failpoints, parsed from `name=exit|raise[,name=...]`."""

    def __init__(self, spec: str = "") -> None:
        self.actions: dict[str, str] = {}
        for item in filter(None, (part.strip() for part in spec.split(","))):
            name, _, action = item.partition("=")
            if name not in POINTS or action not in ("exit", "raise"):
                raise ValueError(f"bad failpoint {item!r}: use one of {', '.join(POINTS)} with =exit or =raise")
            self.actions[name] = action

    def hit(self, name: str) -> None:
        assert name in POINTS, name
        action = self.actions.get(name)
        if action == "exit":
            os._exit(137)
        if action == "raise":
            raise FailpointHit(name)

    def __bool__(self) -> bool:
        return bool(self.actions)
