"""Our retry policy for model calls: bounded, jittered, honouring Retry-After, and logged.

The provider SDKs are built with `max_retries=0` so that this module is the only place a model
call is repeated. Adapters translate SDK exceptions into `Retryable` (timeouts, 429, 5xx) or raise
`ModelAuthError` / `ModelUnavailable` directly; `call_with_retries` does the rest.
"""

from __future__ import annotations

import email.utils
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from signoff.runtime.errors import ModelAuthError, ModelUnavailable

log = logging.getLogger("signoff.models")

T = TypeVar("T")

RETRYABLE_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
"""429 rate limits, 408/409 request conflicts, 5xx and Anthropic's 529 "overloaded"."""


class Retryable(Exception):
    """A failure worth another attempt; `retry_after` is the server's own wait, in seconds."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


@dataclass(frozen=True)
class RetryAttempt:
    """One scheduled retry, as reported to `RetryPolicy.on_retry` and the log."""

    what: str
    attempt: int
    """The attempt that failed, counting from 1."""
    reason: str
    delay_s: float


@dataclass(frozen=True)
class RetryPolicy:
    """How many times, and how long apart, a failed model call is tried again."""

    max_retries: int = 3
    base_delay_s: float = 1.0
    max_delay_s: float = 30.0
    """Longest single wait; a Retry-After beyond it ends the call instead of stalling the run."""
    sleep: Callable[[float], None] = time.sleep
    jitter: Callable[[], float] = random.random
    on_retry: Callable[[RetryAttempt], None] | None = field(default=None)

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError("max_retries must be zero or more")

    def backoff(self, attempt: int) -> float:
        """Exponential backoff with jitter between half and the whole of the step, for `attempt` >= 1."""
        step = min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1))
        return round(float(step) * (0.5 + self.jitter() / 2), 3)


def call_with_retries(call: Callable[[], T], policy: RetryPolicy, what: str) -> T:
    """Run `call`, retrying `Retryable` failures; raise `ModelUnavailable` once the retries are spent."""
    attempts = policy.max_retries + 1
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except Retryable as failure:
            if attempt == attempts:
                raise ModelUnavailable(
                    f"{what} failed {attempts} time(s); last error: {failure.reason}"
                ) from None
            delay = _delay(policy, attempt, failure, what)
            report = RetryAttempt(what=what, attempt=attempt, reason=failure.reason, delay_s=delay)
            log.warning("%s: %s; retry %d of %d in %.2fs", what, failure.reason, attempt,
                        policy.max_retries, delay)
            if policy.on_retry is not None:
                policy.on_retry(report)
            policy.sleep(delay)
    raise AssertionError("unreachable: the loop returns or raises")


def _delay(policy: RetryPolicy, attempt: int, failure: Retryable, what: str) -> float:
    if failure.retry_after is None:
        return policy.backoff(attempt)
    if failure.retry_after > policy.max_delay_s:
        raise ModelUnavailable(
            f"{what}: {failure.reason}; the server asked us to wait {failure.retry_after:g}s, "
            f"longer than the {policy.max_delay_s:g}s we allow"
        )
    return max(0.0, failure.retry_after)


def translate_sdk_errors(sdk: Any, call: Callable[[], T], what: str, message: Callable[[Any], str]) -> T:
    """Run a call of an official SDK (`openai` or `anthropic`, which share their error classes),
    turning its exceptions into `Retryable`, `ModelAuthError` or `ModelUnavailable`.

    `message(exc)` extracts the provider's own message from a status error.
    """
    try:
        return call()
    except sdk.APIStatusError as exc:
        raise error_for_status(what, exc.status_code, exc.response.headers, message(exc)[:300]) from None
    except sdk.APITimeoutError:
        raise Retryable("the request timed out") from None
    except sdk.APIConnectionError as exc:
        raise Retryable(f"could not connect: {exc}") from None
    except sdk.APIError as exc:  # e.g. a response body that is not a message or a completion
        raise ModelUnavailable(f"{what}: {exc}") from None


def error_for_status(what: str, status: int, headers: Mapping[str, str], message: str) -> Exception:
    """The exception for an HTTP error status: `ModelAuthError`, `Retryable` or `ModelUnavailable`."""
    detail = f"HTTP {status}: {message}".strip()
    if status in (401, 403):
        return ModelAuthError(f"{what}: the endpoint rejected the credentials ({detail})")
    if status in RETRYABLE_STATUSES:
        return Retryable(detail, retry_after=retry_after_s(headers))
    # 400, 404, 422...: trying again would get the same answer.
    return ModelUnavailable(f"{what}: the endpoint refused the request ({detail})")


def retry_after_s(headers: Mapping[str, str], now: datetime | None = None) -> float | None:
    """Seconds to wait from `retry-after-ms`, or `Retry-After` as seconds or an HTTP date."""
    lowered = {k.lower(): v for k, v in headers.items()}
    millis = lowered.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())
