"""Fixtures for the durable store tests: a store with a manual clock, its runner, and an effects file."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine
from store_harness import ManualClock, build_runner

from signoff.runtime.adapters.sql import SqlStore
from signoff.runtime.runner import Runner


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def store(engine: Engine, clock: ManualClock) -> SqlStore:
    return SqlStore(engine, clock=clock)


@pytest.fixture
def effects(tmp_path: Path) -> Path:
    """The file every side-effecting test tool appends `tool key` to, one line per execution."""
    return tmp_path / "effects.log"


@pytest.fixture
def runner(store: SqlStore, effects: Path) -> Runner:
    return build_runner(store, effects, lease=30.0)
