"""Shared fixtures: a fresh database per test, on SQLite and (where reachable) PostgreSQL.

PostgreSQL tests skip when no server answers, but fail when `CI` is set, so CI always covers them.
Each PostgreSQL test gets a schema of its own, dropped afterwards. Under pytest-xdist each worker
also gets a database of its own (`<database>_gw0_<run>`, ...), made when the worker starts and
dropped when it ends, so nothing one worker does to its database (or its connections) reaches another,
nor another test session's workers on the same server.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, event, make_url, text
from sqlalchemy.exc import OperationalError

from signoff.runtime.adapters.db import make_engine, upgrade

# celpy raises the recursion limit to 2500 each time it makes a CEL environment. Where the first one
# of a test process is made inside a Hypothesis test, Hypothesis fails that test for the change
# ("The recursion limit will not be reset"): so the limit is celpy's from the start.
sys.setrecursionlimit(max(sys.getrecursionlimit(), 2500))

POSTGRES_URL = os.environ.get("SIGNOFF_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
_postgres_reachable: bool | None = None
_WORKER_DATABASE_LOCK = 0x5167_0ff0
"""The advisory lock held while a worker makes its database: the workers make theirs one at a time."""
_worker_database = pytest.StashKey[tuple[str, str]]()
"""On an xdist worker: the server's URL and the name of the database made for this worker."""
_postgres_migration: list[tuple[str, Any]] | None = None
"""The statements (and parameters) Alembic sent to migrate an empty PostgreSQL schema (`_migrate_postgres`)."""
_sqlite_template: Path | None = None
"""The migrated SQLite file each test's database is copied from (`_migrated_sqlite_file`)."""
_worker_summaries: list[tuple[str, str]] = []
"""On the xdist controller: (title, text) sections the workers sent back for the end of the session."""


def pytest_configure(config: pytest.Config) -> None:
    """Under xdist, point this worker's tests (and the processes they start) at a database of its own."""
    global POSTGRES_URL
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return
    base = make_url(POSTGRES_URL)
    # The session's id in the name: two sessions on one server (two checkouts, a developer beside CI)
    # would otherwise make, and drop with FORCE, the same `test_gw0` under each other's tests.
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID", "")[:8]
    name = f"{base.database or 'postgres'}_{worker}_{run}"
    try:
        _recreate_database(POSTGRES_URL, name)
    except (OperationalError, ModuleNotFoundError):
        return  # no PostgreSQL here: its tests skip (or fail, in CI) against the URL as it was given
    POSTGRES_URL = base.set(database=name).render_as_string(hide_password=False)
    os.environ["SIGNOFF_TEST_POSTGRES_URL"] = POSTGRES_URL
    config.stash[_worker_database] = (base.render_as_string(hide_password=False), name)


def pytest_unconfigure(config: pytest.Config) -> None:
    made = config.stash.get(_worker_database, None)
    if made is not None:
        _drop_database(*made)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """A worker has finished: keep the summary sections it sent (see `worker_summary`)."""
    _worker_summaries.extend(tuple(section) for section in node.workeroutput.get("summaries", []))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for title, body in _worker_summaries:
        terminalreporter.section(title)
        terminalreporter.write(body)


def worker_summary(config: pytest.Config, title: str, body: str) -> bool:
    """On an xdist worker, send a section for the controller to print at the end; False elsewhere
    (a worker's own terminal summary is never shown)."""
    output = getattr(config, "workeroutput", None)
    if output is None:
        return False
    output.setdefault("summaries", []).append((title, body))
    return True


def _recreate_database(server_url: str, name: str) -> None:
    admin = create_engine(server_url, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 3})
    try:
        with admin.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:key)"), {"key": _WORKER_DATABASE_LOCK})
            try:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
                conn.execute(text(f'CREATE DATABASE "{name}"'))
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": _WORKER_DATABASE_LOCK})
    finally:
        admin.dispose()


def _drop_database(server_url: str, name: str) -> None:
    admin = create_engine(server_url, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 3})
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


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


def _migrated_sqlite_file() -> Path:
    """An empty SQLite file migrated to the newest revision, made once per process: each test gets a
    copy of it, the schema its own migration would make, for a millisecond instead of a fifth
    of a second of Alembic."""
    global _sqlite_template
    if _sqlite_template is None:
        folder = Path(tempfile.mkdtemp(prefix="signoff-migrated-"))
        # At exit, not in `pytest_unconfigure`: this module is imported twice (as the conftest plugin
        # and as `tests.conftest`), and the copy whose global holds the template is the second.
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        engine = make_engine(f"sqlite:///{folder / 'signoff.db'}")
        upgrade(engine)
        engine.dispose()
        # The last connection's close checkpoints the write-ahead log into the file and removes it.
        assert not (folder / "signoff.db-wal").exists(), "the migrated template kept a write-ahead log"
        _sqlite_template = folder / "signoff.db"
    return _sqlite_template


def _migrate_postgres(url: str, admin: Engine) -> None:
    """Bring the empty schema `url` names to the newest revision by sending the statements Alembic
    sent to migrate an empty schema in this process, recorded once: the same schema and rows, for a
    twentieth of a second instead of half a second. The first time, it checks that a replay and a
    migration make the same tables, columns, indexes, constraints, sequences, triggers and rows."""
    global _postgres_migration
    if _postgres_migration is None:
        recorded: list[tuple[str, Any]] = []

        def record(_conn, _cursor, statement, parameters, _context, executemany) -> None:
            assert not executemany, statement
            recorded.append((statement, parameters or None))

        with _scratch_schema(admin) as (migrated, replayed):
            engine = make_engine(postgres_schema_url(migrated))
            event.listen(engine, "before_cursor_execute", record)
            upgrade(engine)
            engine.dispose()
            _replay(postgres_schema_url(replayed), recorded)
            assert _fingerprint(admin, replayed) == _fingerprint(admin, migrated), "a replay differs"
        _postgres_migration = recorded
    _replay(url, _postgres_migration)


def _replay(url: str, statements: list[tuple[str, Any]]) -> None:
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            for statement, parameters in statements:
                conn.exec_driver_sql(statement, parameters)
    finally:
        engine.dispose()


@contextlib.contextmanager
def _scratch_schema(admin: Engine) -> Iterator[tuple[str, str]]:
    names = ("t_" + secrets.token_hex(6), "t_" + secrets.token_hex(6))
    with admin.connect() as conn:
        for name in names:
            conn.execute(text(f"CREATE SCHEMA {name}"))
    try:
        yield names
    finally:
        with admin.connect() as conn:
            for name in names:
                conn.execute(text(f"DROP SCHEMA {name} CASCADE"))


_CATALOG = [
    "SELECT table_name, column_name, data_type, column_default, is_nullable, ordinal_position"
    " FROM information_schema.columns WHERE table_schema = :s",
    "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = :s",
    "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint"
    " WHERE connamespace = CAST(:s AS regnamespace)",
    "SELECT sequence_name, data_type, start_value FROM information_schema.sequences WHERE sequence_schema = :s",
    "SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(oid) FROM pg_trigger"
    " WHERE tgrelid IN (SELECT oid FROM pg_class WHERE relnamespace = CAST(:s AS regnamespace))",
    "SELECT proname, pg_get_functiondef(oid) FROM pg_proc WHERE pronamespace = CAST(:s AS regnamespace)",
]


def _fingerprint(admin: Engine, schema: str) -> list[list[str]]:
    """A schema's catalog entries and every table's rows, with its name taken out."""
    with admin.connect() as conn:
        parts = [conn.execute(text(query), {"s": schema}).all() for query in _CATALOG]
        tables = conn.execute(text("SELECT tablename FROM pg_tables WHERE schemaname = :s"), {"s": schema}).scalars()
        parts += [conn.execute(text(f'SELECT * FROM {schema}."{table}"')).all() for table in sorted(tables)]
    return [sorted(str(row).replace(schema, "<schema>") for row in part) for part in parts]


def fresh_database_url(kind: str, tmp_path) -> Iterator[str]:
    """Yield the URL of an empty, migrated database of `kind`, cleaned up afterwards."""
    if kind == "sqlite":
        path = tmp_path / "signoff.db"
        shutil.copyfile(_migrated_sqlite_file(), path)
        yield f"sqlite:///{path}"
        return
    admin_url = postgres_or_skip()
    schema = "t_" + secrets.token_hex(6)
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    url = postgres_schema_url(schema)
    _migrate_postgres(url, admin)
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
