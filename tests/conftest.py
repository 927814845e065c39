"""Shared fixtures: a fresh database per test, on SQLite and (where reachable) PostgreSQL.

PostgreSQL tests skip when no server answers, but fail when `CI` is set, so CI always covers them.
Each PostgreSQL test gets a schema of its own, dropped afterwards.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import OperationalError

from signoff.runtime.adapters.db import make_engine, upgrade

POSTGRES_URL = os.environ.get("SIGNOFF_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
_postgres_reachable: bool | None = None


def postgres_or_skip() -> str:
    """The test PostgreSQL URL; skips the test when none answers (fails instead when CI is set)."""
    global _postgres_reachable
    if _postgres_reachable is None:
        try:
            probe = create_engine(POSTGRES_URL, connect_args={"connect_timeout": 3})
            with probe.connect() as conn:
                conn.execute(text("select 1"))
            probe.dispose()
            _postgres_reachable = True
        except (OperationalError, ModuleNotFoundError):
            _postgres_reachable = False
    if not _postgres_reachable:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL is required in CI but {POSTGRES_URL} is unreachable")
        pytest.skip("PostgreSQL is not reachable")
    return POSTGRES_URL


def postgres_schema_url(schema: str) -> str:
    """A URL whose connections use `schema` first, so tests never see each other's tables."""
    joiner = "&" if "?" in POSTGRES_URL else "?"
    return f"{POSTGRES_URL}{joiner}options=-csearch_path%3D{schema}"


def fresh_database_url(kind: str, tmp_path) -> Iterator[str]:
    """Yield the URL of an empty, migrated database of `kind`, cleaned up afterwards."""
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'signoff.db'}"
        engine = make_engine(url)
        upgrade(engine)
        engine.dispose()
        yield url
        return
    admin_url = postgres_or_skip()
    schema = "t_" + secrets.token_hex(6)
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    url = postgres_schema_url(schema)
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    try:
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request, tmp_path) -> Iterator[str]:
    """A migrated, empty database URL; every test using it runs on SQLite and on PostgreSQL."""
    yield from fresh_database_url(request.param, tmp_path)


@pytest.fixture
def sqlite_url(tmp_path) -> Iterator[str]:
    yield from fresh_database_url("sqlite", tmp_path)


@pytest.fixture
def engine(database_url) -> Iterator[Engine]:
    engine = make_engine(database_url)
    yield engine
    engine.dispose()
