"""The outbox in memory: messages owed to people, kept and taken as `sql_notices` keeps and takes
them, under the store's lock."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from signoff.runtime.adapters.memory_reads import MemoryReads
from signoff.runtime.notices import AT_ONCE, HeldNotice, Notice


@dataclass
class _Owed:
    seq: int
    run_id: str
    notice: Notice
    made_at: datetime
    next_at: datetime
    tries: int = 0
    last_error: str | None = None


class MemoryNotices(MemoryReads):
    def __init__(self, *, clock: Callable[[], datetime] | None = None) -> None:
        super().__init__(clock=clock)
        self._owed: dict[int, _Owed] = {}
        self._owed_seq = itertools.count(1)

    def _owe(self, run_id: str, owed: Iterable[Notice], now: datetime) -> None:
        """Keep `owed` (the caller holds the lock, in the write that owes them), due at once."""
        for notice in owed:
            seq = next(self._owed_seq)
            self._owed[seq] = _Owed(seq, run_id, notice, now, now)

    def _drop_told(self, told: Iterable[int]) -> None:
        """Drop the notices `told` (the caller holds the lock, in the write that drops them)."""
        for seq in told:
            self._owed.pop(seq, None)

    def _step_notices(self, run_id: str, owed: Sequence[Notice], told: Iterable[int],
                      now: datetime) -> tuple[HeldNotice, ...] | None:
        """A step's write to the outbox (the caller holds the lock): `owed` kept, `told` dropped;
        what the run owes of its own after it, if the step owed anything (`Saved.owed`)."""
        self._owe(run_id, owed, now)
        self._drop_told(told)
        return tuple(self._due_of_run(run_id, now, AT_ONCE)) if owed else None

    def take_notices(self, fence: timedelta, *, run_id: str | None = None, limit: int = 50) -> list[HeldNotice]:
        with self._lock:
            now, firsts = self.now(), dict[str, _Owed]()
            for owed in self._in_order():
                if owed.notice.about is not None:
                    firsts.setdefault(owed.notice.about, owed)
            held: list[HeldNotice] = []
            for owed in sorted(firsts.values(), key=lambda o: o.seq):
                if len(held) < limit and owed.next_at <= now and run_id in (None, owed.run_id):
                    owed.next_at = owed.next_at if not owed.notice.fenced else now + fence
                    owed.tries += 1
                    held.append(HeldNotice(owed.seq, owed.run_id, owed.notice, owed.made_at, owed.tries))
            return held

    def run_notices(self, run_id: str, limit: int = 50) -> list[HeldNotice]:
        with self._lock:
            return self._due_of_run(run_id, self.now(), limit)

    def _due_of_run(self, run_id: str, now: datetime, limit: int) -> list[HeldNotice]:
        due = list[HeldNotice]()
        for owed in self._in_order():
            if owed.run_id == run_id and owed.notice.about is None:
                if owed.next_at > now or len(due) == limit:
                    break
                due.append(HeldNotice(owed.seq, owed.run_id, owed.notice, owed.made_at, owed.tries + 1))
        return due

    def hold_notice(self, seq: int, fence: timedelta) -> bool:
        with self._lock:
            if (owed := self._owed.get(seq)) is None:
                return False
            owed.next_at = self.now() + fence
            return True

    def runs_owed_notices(self, older_than: timedelta, *, limit: int = 50) -> list[str]:
        with self._lock:
            now, firsts = self.now(), dict[str, _Owed]()
            for owed in self._in_order():
                if owed.notice.about is None:
                    firsts.setdefault(owed.run_id, owed)
            return sorted(run_id for run_id, owed in firsts.items()
                          if owed.next_at <= now and owed.made_at < now - older_than
                          and run_id in self._runs and self._runs[run_id].free(now))[:limit]

    def _in_order(self) -> list[_Owed]:
        return sorted(self._owed.values(), key=lambda o: o.seq)

    def notice_sent(self, seq: int) -> None:
        with self._lock:
            self._owed.pop(seq, None)

    def notice_failed(self, seq: int, retry_in: timedelta, error: str) -> None:
        with self._lock:
            if (owed := self._owed.get(seq)) is not None:
                owed.next_at, owed.last_error = self.now() + retry_in, error[:500]
                if owed.notice.about is None:  # a run's notice is read, not taken: its tries count here
                    owed.tries += 1
