"""Signoff's own exceptions.

    SignoffError
    ├── ConfigError            bad settings or tools, raised at start-up, lists every problem
    ├── NotFound               an id we issued no longer exists
    ├── IncompatibleState      unknown schema version or corrupted run state
    ├── Conflict               a stale writer lost an optimistic-concurrency race
    ├── InvalidTransition      an operation that the run's status does not allow (decide with nothing pending)
    ├── ModelUnavailable       the model endpoint kept failing after bounded retries
    ├── ModelAuthError         the model endpoint refused our credentials
    └── DispatchError          raised by an executor: the call must not run, or its outcome is unknown
        ├── DispatchRefused    the approval is no longer valid (expired, consumed, digest changed)
        └── OutcomeUnknown     a previous attempt started and left no outcome
"""

from __future__ import annotations


class SignoffError(Exception):
    """Root of every error Signoff raises on purpose."""


class ConfigError(SignoffError):
    """Invalid configuration, reported once with every problem found."""

    def __init__(self, problems: list[str] | str) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("; ".join(self.problems))


class NotFound(SignoffError):
    """An id we issued (run, approval) does not exist."""


class IncompatibleState(SignoffError):
    """Run state that we cannot read safely: unknown schema version or corrupted JSON."""


class Conflict(SignoffError):
    """The row changed since it was read; nothing was written."""


class InvalidTransition(SignoffError):
    """The run's status does not allow this operation."""


class ModelUnavailable(SignoffError):
    """The model endpoint failed (timeouts, 429, 5xx) after bounded retries."""


class ModelAuthError(SignoffError):
    """The model endpoint rejected the API key."""


class DispatchError(SignoffError):
    """Raised by an executor instead of running a side-effecting call."""


class DispatchRefused(DispatchError):
    """The call must not run: its approval is expired, already consumed or does not match."""

    def __init__(self, reason: str, status: str = "failed") -> None:
        self.reason = reason
        self.status = status
        super().__init__(reason)


class OutcomeUnknown(DispatchError):
    """An earlier attempt of this call started and recorded no outcome."""
