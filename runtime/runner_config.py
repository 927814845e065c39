"""How runs are started and kept: a runner's settings, with the defaults a newcomer gets."""

from __future__ import annotations

import functools
import os
import secrets
import socket
from dataclasses import dataclass, field
from datetime import timedelta

from signoff.runtime.approval_policy import ApprovalPolicy, default_policy
from signoff.runtime.budget import Budget
from signoff.runtime.failpoints import Failpoints
from signoff.runtime.receipts import SigningKey
from signoff.runtime.state import DEFAULT_REDACT_KEYS


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


@dataclass(frozen=True)
class RunnerConfig:
    """How runs are started and kept: defaults, timings and who may approve their own runs."""

    model: str = "scripted:demo"
    budget: Budget = field(default_factory=Budget)
    approval_ttl: timedelta = timedelta(minutes=30)
    dispatch_window: timedelta = timedelta(minutes=10)
    """How long after an approval its call may still start (busy workers, a restart in between)."""
    lease: timedelta = timedelta(seconds=60)
    worker_id: str = field(default_factory=default_worker_id)
    extend_steps: int = 4
    stall_after: int | None = 3
    """Turns in a row that repeat an earlier call with the same result before a run stops as stalled."""
    allow_self_approval: bool = False
    redact_keys: frozenset[str] = DEFAULT_REDACT_KEYS
    failpoints: Failpoints = field(default_factory=Failpoints)
    approval_policy: ApprovalPolicy | None = None
    """Which calls run, ask or are refused; None: the built-in policy (every side effect asks the
    configured approvers for `approval_ttl`, every read runs)."""
    signer: SigningKey | None = None
    """The key each decision's receipt is signed with (`SIGNOFF_SIGNING_KEY`); None: no receipts."""

    @functools.cached_property
    def policy(self) -> ApprovalPolicy:
        """The approval policy runs go by."""
        return self.approval_policy or default_policy(ttl=self.approval_ttl,
                                                      allow_self_approval=self.allow_self_approval)
