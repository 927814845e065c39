"""Every scenario of the suite ends with zero invariant violations and its own expectations met.

Real `signoff serve` processes, FakeSlack and real databases; the whole suite runs once per session.
"""

from __future__ import annotations

import os

import pytest

from scenarios.suite import Sizes, scenarios

NAMES = [s.name for s in scenarios(Sizes.named(os.environ.get("SIGNOFF_SCENARIOS", "full")))]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


@pytest.mark.parametrize("name", NAMES)
def test_scenario_keeps_every_invariant(name: str, suite_outcomes) -> None:
    outcome = suite_outcomes[name]
    if outcome.skipped:
        if os.environ.get("CI"):
            pytest.fail(f"{name}: {outcome.skipped}, and CI requires it")
        pytest.skip(outcome.skipped)
    assert outcome.total == 0, "\n".join(outcome.failures())
