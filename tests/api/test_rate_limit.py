"""The approval API's per-key rate limit: a bucket per key, refilled with time."""

from __future__ import annotations

from signoff.bot.api.limits import RateLimit


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_key_gets_its_minute_s_worth_at_once_then_one_as_each_refills() -> None:
    clock = Clock()
    limit = RateLimit(60, clock=clock)
    assert [limit.wait_for("ci-bot") for _ in range(60)] == [0.0] * 60
    assert limit.wait_for("ci-bot") == 1.0, "the 61st waits a second for the next"
    assert limit.wait_for("other-bot") == 0.0, "each key has its own"
    clock.now = 1.0
    assert limit.wait_for("ci-bot") == 0.0
    assert limit.wait_for("ci-bot") > 0.0
