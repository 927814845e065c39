"""Group commit: each caller gets its own write's result, or its own failure, however the writes
were batched; a batch that fails fails every write in it, and the next batch is written all the same."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from signoff.runtime.adapters.group_commit import GroupCommit


def test_writes_made_at_once_are_batched_and_each_caller_gets_its_own_result() -> None:
    batches: list[list[int]] = []
    gate = threading.Event()

    def write(items: Sequence[int]) -> list[int | BaseException]:
        batches.append(list(items))
        gate.wait(timeout=10)  # the first batch writes while the others arrive
        return [ValueError(f"no {i}") if i == 7 else i * 10 for i in items]

    group: GroupCommit[int, int] = GroupCommit(write)
    results: dict[int, object] = {}

    def submit(i: int) -> None:
        try:
            results[i] = group.submit(i)
        except ValueError as exc:
            results[i] = str(exc)

    first = threading.Thread(target=submit, args=(0,))
    first.start()
    while not batches:
        threading.Event().wait(0.001)
    others = [threading.Thread(target=submit, args=(i,)) for i in range(1, 20)]
    for thread in others:
        thread.start()
    gate.set()
    for thread in [first, *others]:
        thread.join(timeout=10)
    assert results == {i: "no 7" if i == 7 else i * 10 for i in range(20)}
    assert batches[0] == [0] and sorted(i for batch in batches for i in batch) == list(range(20))
    assert len(batches) < 20, "writes that waited behind the first were written together"


def test_a_failed_batch_fails_each_of_its_writes_and_the_next_is_written() -> None:
    calls = 0

    def write(items: Sequence[str]) -> list[str | BaseException]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("the database went away")
        return [item.upper() for item in items]

    group: GroupCommit[str, str] = GroupCommit(write)
    with pytest.raises(ConnectionError):
        group.submit("a")
    assert group.submit("b") == "B"
