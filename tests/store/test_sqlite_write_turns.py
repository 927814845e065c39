"""The writers of one process take turns before SQLite's write lock (`db._sqlite_engine`): many
threads writing at once all get through, and a write that fails or breaks its connection hands
the turn on instead of keeping every later writer waiting."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from signoff.runtime.adapters.db import make_engine, upgrade
from signoff.runtime.adapters.sql import SqlStore


def store_on(tmp_path: Path) -> SqlStore:
    engine = make_engine(f"sqlite:///{tmp_path / 'turns.db'}")
    upgrade(engine)
    return SqlStore(engine)


def write(store: SqlStore, marker: str) -> None:
    with store._tx() as conn:  # the store's own write transaction, as every write takes it
        conn.execute(text("CREATE TABLE IF NOT EXISTS marks (mark TEXT)"))
        conn.execute(text("INSERT INTO marks VALUES (:m)"), {"m": marker})


def marks(store: SqlStore) -> list[str]:
    with store.engine.connect() as conn:
        return sorted(conn.execute(text("SELECT mark FROM marks")).scalars())


def test_sixteen_threads_writing_at_once_all_commit(tmp_path: Path) -> None:
    store = store_on(tmp_path)
    threads = [threading.Thread(target=lambda i=i: [write(store, f"{i}-{n}") for n in range(20)]) for i in range(16)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert len(marks(store)) == 16 * 20
    assert time.monotonic() - started < 30, "writers queued behind a turn nobody handed on"


def test_a_write_that_fails_hands_the_turn_on(tmp_path: Path) -> None:
    store = store_on(tmp_path)
    with pytest.raises(RuntimeError), store._tx() as conn:
        conn.execute(text("CREATE TABLE IF NOT EXISTS marks (mark TEXT)"))
        raise RuntimeError("the write failed half way")
    done = threading.Event()
    threading.Thread(target=lambda: (write(store, "after"), done.set())).start()
    assert done.wait(5), "the next writer waited for a turn the failed write kept"
    assert marks(store) == ["after"]


def test_a_write_whose_connection_broke_hands_the_turn_on(tmp_path: Path) -> None:
    store = store_on(tmp_path)
    with pytest.raises(SQLAlchemyError), store._tx() as conn:
        conn.invalidate()  # as a disk error or a closed file would leave it
        conn.execute(text("SELECT 1"))
    done = threading.Event()
    threading.Thread(target=lambda: (write(store, "after"), done.set())).start()
    assert done.wait(5), "the next writer waited for a turn the broken connection kept"
