"""Fixtures for the store tests: a store with a manual clock, its runner, and an effects file.

`store` is every adapter in turn: SQLite, PostgreSQL (skipped without a server, required in CI)
and in memory. A test that takes it states the contract of `ports.Store`, which each adapter
keeps; a test about SQL itself (raw rows, statements, engines, faults) takes `sql_store`, which
runs on SQLite and PostgreSQL only.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine
from store_harness import ManualClock, build_runner

from signoff.runtime.adapters.db import make_engine
from signoff.runtime.adapters.memory import MemoryStore
from signoff.runtime.adapters.sql import SqlStore
from signoff.runtime.ports import Store
from signoff.runtime.runner import Runner
from tests.conftest import fresh_database_url

STORES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres), "memory"]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, clock: ManualClock, tmp_path: Path) -> Iterator[Store]:
    """An empty store of each kind on the manual clock."""
    if request.param == "memory":
        yield MemoryStore(clock=clock)
        return
    databases = fresh_database_url(request.param, tmp_path)
    engine = make_engine(next(databases))
    try:
        yield SqlStore(engine, clock=clock)
    finally:
        engine.dispose()
        next(databases, None)  # drops the PostgreSQL schema


@pytest.fixture
def sql_store(engine: Engine, clock: ManualClock) -> SqlStore:
    return SqlStore(engine, clock=clock)


@pytest.fixture
def effects(tmp_path: Path) -> Path:
    """The file every side-effecting test tool appends `tool key` to, one line per execution."""
    return tmp_path / "effects.log"


@pytest.fixture
def runner(store: Store, effects: Path) -> Runner:
    return build_runner(store, effects, lease=30.0)


@pytest.fixture
def sql_runner(sql_store: SqlStore, effects: Path) -> Runner[SqlStore]:
    return build_runner(sql_store, effects, lease=30.0)
