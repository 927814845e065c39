"""A forked child keeps none of its parent's leases alive."""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta

import pytest

from signoff.runtime.heartbeat import Heartbeat


class CountingStore:
    """Counts renewals, in whichever process makes them."""

    def __init__(self) -> None:
        self.renewals: dict[str, int] = {}

    def renew(self, run_id: str, owner: str, lease: timedelta) -> bool:
        self.renewals[run_id] = self.renewals.get(run_id, 0) + 1
        return True


@pytest.mark.skipif(sys.platform == "win32", reason="fork")
def test_a_forked_child_does_not_renew_the_parents_leases() -> None:
    store = CountingStore()
    with Heartbeat(store, "run-1", "owner-1", timedelta(seconds=0.3)):  # type: ignore[arg-type]
        time.sleep(0.25)
        assert store.renewals.get("run-1", 0) >= 1, "the parent's lease is renewed"
        child = os.fork()
        if child == 0:  # the child drives a run of its own, with time for several beats
            before = store.renewals.get("run-1", 0)
            with Heartbeat(store, "run-2", "owner-2", timedelta(seconds=0.3)):  # type: ignore[arg-type]
                time.sleep(0.5)
            os._exit(min(store.renewals.get("run-1", 0) - before, 100) + (0 if store.renewals.get("run-2") else 101))
        _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the child renewed a lease of its parent's"
