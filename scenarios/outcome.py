"""What one scenario did and found: counts of runs, faults, races and hostile inputs, and violations."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from scenarios.invariants import INVARIANTS, check, gather


@dataclass
class Outcome:
    name: str
    group: str
    runs: int = 0
    faults: int = 0
    races: int = 0
    hostile: int = 0
    violations: dict[str, list[str]] = field(default_factory=lambda: {i: [] for i in INVARIANTS})
    expectations: list[str] = field(default_factory=list)
    """Scenario-specific promises that did not hold (a fault that never fired, a refusal not given, ...)."""
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    skipped: str | None = None

    def expect(self, condition: Any, failure: str) -> bool:
        if not condition:
            self.expectations.append(failure)
        return bool(condition)

    @property
    def total(self) -> int:
        return sum(len(v) for v in self.violations.values()) + len(self.expectations)

    def failures(self) -> list[str]:
        """One line per broken invariant or expectation, naming the scenario."""
        lines = [f"{self.name}: {inv} {INVARIANTS[inv]}: {v}" for inv, found in self.violations.items() for v in found]
        return lines + [f"{self.name}: E expectation: {e}" for e in self.expectations]


SLACK_CATCH_UP_S = 15.0
"""How long Slack is given to show what the database says once the scenario is over: a decided card
is updated beside its run, not before the run goes on, so the last run can end while its card's
update still waits out a Slack error's backoff (the longest: a 429's Retry-After, at most a few s)."""


def settled_check(world: Any) -> dict[str, list[str]]:
    """The invariants on what the world left behind; Slack's (I6) read again until it holds or
    `SLACK_CATCH_UP_S` passed, since Slack follows the database rather than leading it."""
    deadline = time.monotonic() + SLACK_CATCH_UP_S
    found = check(gather(world), world.policy)
    while found["I6"] and time.monotonic() < deadline:
        time.sleep(0.25)
        found = check(gather(world), world.policy)
    return found


@contextmanager
def observed(outcome: Outcome, world_factory: Callable[[], Any]) -> Iterator[Any]:
    """Run a scenario body in a fresh world, then check the invariants on what it left behind.

    A scenario that raises still gets its invariants checked, and the error is an expectation failure.
    """
    started = time.monotonic()
    world = world_factory()
    try:
        try:
            yield world
        except Exception as exc:  # a scenario that blew up is a finding, reported like one
            outcome.expectations.append(f"the scenario raised {type(exc).__name__}: {exc}")
            outcome.notes.append(traceback.format_exc(limit=4))
        for name, found in settled_check(world).items():
            outcome.violations[name].extend(found)
        for what in world.untold:
            outcome.violations["I6"].append(f"{what}: Slack never showed this button; the person was never told")
    finally:
        world.close()
        outcome.seconds = round(time.monotonic() - started, 1)
