"""The retry policy and the price table, on their own."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from signoff.runtime import ConfigError, ModelAuthError, ModelUnavailable
from signoff.runtime.models import RetryAttempt, RetryPolicy, load_prices
from signoff.runtime.models.pricing import Price
from signoff.runtime.models.retry import Retryable, call_with_retries, error_for_status, retry_after_s


class Flaky:
    """Fails with the given failures, then returns "ok"."""

    def __init__(self, *failures: Exception) -> None:
        self.failures = list(failures)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return "ok"


def test_backoff_doubles_with_jitter_and_is_reported():
    sleeps: list[float] = []
    reports: list[RetryAttempt] = []
    policy = RetryPolicy(max_retries=3, base_delay_s=1.0, sleep=sleeps.append, jitter=lambda: 1.0,
                         on_retry=reports.append)
    call = Flaky(Retryable("HTTP 503"), Retryable("HTTP 503"), Retryable("timed out"))

    assert call_with_retries(call, policy, "openai:gpt-4o") == "ok"

    assert sleeps == [1.0, 2.0, 4.0]
    assert [(r.attempt, r.reason) for r in reports] == [(1, "HTTP 503"), (2, "HTTP 503"), (3, "timed out")]


def test_jitter_spreads_waits_between_half_and_all_of_the_step():
    low = RetryPolicy(base_delay_s=4.0, jitter=lambda: 0.0)
    high = RetryPolicy(base_delay_s=4.0, jitter=lambda: 1.0, max_delay_s=10.0)

    assert [low.backoff(n) for n in (1, 2)] == [2.0, 4.0]
    assert [high.backoff(n) for n in (1, 2, 3)] == [4.0, 8.0, 10.0]


def test_retries_are_bounded():
    sleeps: list[float] = []
    call = Flaky(*(Retryable("HTTP 500") for _ in range(10)))

    with pytest.raises(ModelUnavailable, match=r"failed 3 time\(s\); last error: HTTP 500"):
        call_with_retries(call, RetryPolicy(max_retries=2, sleep=sleeps.append), "m")

    assert call.calls == 3 and len(sleeps) == 2


def test_auth_errors_are_not_retried():
    call = Flaky(ModelAuthError("bad key"))

    with pytest.raises(ModelAuthError):
        call_with_retries(call, RetryPolicy(sleep=lambda s: None), "m")

    assert call.calls == 1


@pytest.mark.parametrize(("status", "kind"), [
    (401, ModelAuthError), (403, ModelAuthError), (429, Retryable), (500, Retryable), (529, Retryable),
    (400, ModelUnavailable), (404, ModelUnavailable),
])
def test_statuses_are_classified(status, kind):
    assert isinstance(error_for_status("m", status, {}, "x"), kind)


def test_retry_after_reads_seconds_milliseconds_and_dates():
    now = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)

    assert retry_after_s({"Retry-After": "12"}) == 12.0
    assert retry_after_s({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert retry_after_s({"retry-after": "Wed, 01 Jan 2025 12:00:30 GMT"}, now=now) == 30.0
    assert retry_after_s({"retry-after": "soon"}) is None
    assert retry_after_s({}) is None


def test_builtin_prices_are_marked_as_samples():
    table = load_prices()

    assert "sample" in table.source
    assert table.lookup("gpt-4o-mini-2024-07-18") == table.prices["gpt-4o-mini"]
    assert table.lookup("gpt-4o-2024-08-06") == table.prices["gpt-4o"]
    assert table.lookup("o1") is None


def test_cost_uses_the_first_model_with_a_price(tmp_path):
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"models": {"house-model": {"input": 1.0, "output": 4.0}}}))
    table = load_prices(path)

    assert table.cost(["house-model-v2", "x"], 1_000_000, 500_000) == (3.0, None)
    usd, note = table.cost(["other"], 10, 10)
    assert usd == 0.0 and note == f"no price for model 'other' in {path}; cost counted as 0"


def test_builtin_prices_price_cache_reads_and_anthropic_cache_writes():
    table = load_prices()

    assert table.prices["claude-sonnet-4"] == Price(3.0, 15.0, cache_write=3.75, cache_read=0.30)
    assert table.prices["gpt-4o"] == Price(2.5, 10.0, cache_write=None, cache_read=1.25)


def write_table(tmp_path, models: dict) -> str:
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"models": models}))
    return str(path)


def test_missing_cache_prices_price_cache_tokens_as_input(tmp_path):
    table = load_prices(write_table(tmp_path, {
        "plain": {"input": 1.0, "output": 4.0},
        "reads-only": {"input": 2.0, "output": 4.0, "cache_read": 0.5},
    }))

    assert table.cost(["plain"], 1_000_000, 0, cache_write_tokens=300_000, cache_read_tokens=500_000) == (1.0, None)
    # 400k uncached and 200k written at 2.0, 400k read at 0.5.
    assert table.cost(["reads-only"], 1_000_000, 0, cache_write_tokens=200_000,
                      cache_read_tokens=400_000) == (1.4, None)


def test_more_cached_than_input_never_makes_uncached_tokens_negative(tmp_path):
    table = load_prices(write_table(tmp_path, {"m": {"input": 2.0, "output": 0.0, "cache_read": 1.0}}))

    assert table.cost(["m"], 100, 0, cache_read_tokens=1000) == (0.001, None)


def test_bad_cache_prices_are_refused_naming_the_model(tmp_path):
    path = write_table(tmp_path, {
        "a": {"input": 1, "output": 1, "cache_write": -1, "cache_read": True},
        "b": {"input": 1, "output": 1, "cache_read": "cheap"},
        "free-reads": {"input": 1, "output": 1, "cache_read": 0},
    })

    with pytest.raises(ConfigError) as caught:
        load_prices(path)

    rule = "when given it must be a non-negative number"
    assert caught.value.problems == [
        f"price table {path}: 'a' has \"cache_write\" -1; {rule}",
        f"price table {path}: 'a' has \"cache_read\" True; {rule}",
        f"price table {path}: 'b' has \"cache_read\" 'cheap'; {rule}",
    ]


def test_bad_price_tables_list_every_problem(tmp_path):
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"models": {"a": {"input": -1, "output": 1}, "b": {"input": 1}}}))

    with pytest.raises(ConfigError) as caught:
        load_prices(path)

    assert len(caught.value.problems) == 2
    with pytest.raises(ConfigError, match="cannot read price table"):
        load_prices(tmp_path / "missing.json")
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_prices(tmp_path / "broken.json")
