"""Engines and migrations: connecting to SQLite or PostgreSQL and keeping the schema current."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, OperationalError
from sqlalchemy.pool import QueuePool

from signoff.database_url import sqlalchemy_database_url
from signoff.extras import install_extra
from signoff.runtime.errors import ConfigError

DEFAULT_DATABASE_URL = "sqlite:///signoff.db"
WRITE_OPTION = "signoff_write"
"""Execution option marking a connection whose transaction will write (see `SqlStore`)."""
MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"


def masked(url: str) -> str:
    """The URL with any password hidden, for messages and logs."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparseable database URL>"


def url_problem(url: str) -> str | None:
    """Why `url` cannot be a Signoff database (not a URL, an unsupported database), or None.

    The URL itself is never quoted: it may hold a password."""
    try:
        backend = make_url(sqlalchemy_database_url(url)).get_backend_name()
    except ArgumentError:
        return "not a database URL (expected sqlite:///path.db or postgresql+psycopg://user@host/db)"
    if backend not in ("sqlite", "postgresql"):
        return f"unsupported database {backend!r}; use sqlite:///path.db or postgresql+psycopg://user@host/db"
    return None


def make_engine(url: str = DEFAULT_DATABASE_URL, **options: Any) -> Engine:
    """An engine with Signoff's durability settings; raises `ConfigError` on a bad URL."""
    url = sqlalchemy_database_url(url)
    problem = url_problem(url)
    if problem is not None:
        raise ConfigError(f"SIGNOFF_DATABASE_URL: {problem}")
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(url, **options)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    try:
        return create_engine(parsed, pool_pre_ping=True, pool_size=10, max_overflow=10, **options)
    except ModuleNotFoundError:
        raise ConfigError(f"PostgreSQL needs psycopg: {install_extra('postgres')}") from None


def _sqlite_engine(url: str, **options: Any) -> Engine:
    # Pooled: opening the file and setting the pragmas costs more than a commit, and closing the last
    # connection of a WAL database checkpoints it (more fsyncs). Threads share the pool.
    engine = create_engine(url, poolclass=QueuePool, pool_size=8, max_overflow=16,
                           connect_args={"check_same_thread": False}, **options)
    event.listen(engine, "connect", _configure_sqlite_connection)
    _write_in_turns(engine)
    return engine


def _configure_sqlite_connection(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.isolation_level = None  # we issue BEGIN ourselves, in `_write_in_turns`
    cursor = dbapi_conn.cursor()
    cursor.execute(f"PRAGMA busy_timeout = {int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
    cursor.execute("PRAGMA journal_mode = WAL")
    cursor.execute("PRAGMA synchronous = FULL")
    cursor.execute("PRAGMA foreign_keys = ON")
    cursor.close()


def _write_in_turns(engine: Engine) -> None:
    # The writers of this process take turns here before SQLite's lock. Waiting in SQLite's busy
    # handler, a writer sleeps in steps of up to 100 ms and retries, so under load the lock sits
    # free while every waiter sleeps; a queue hands it on the moment it is let go. Other processes
    # on the same file still wait in the busy handler, as before.
    turn = threading.Lock()

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        # A write transaction takes the lock up front (IMMEDIATE), so read-then-write waits its turn
        # instead of failing with SQLITE_BUSY when another process committed in between. Reads stay
        # deferred: in WAL mode they never wait for a writer.
        if not conn.get_execution_options().get(WRITE_OPTION):
            conn.exec_driver_sql("BEGIN")
            return
        # The pool's record of the connection, which outlives its invalidation (unlike `info`).
        record_info = conn.connection.record_info
        _take_turn(turn, record_info)
        try:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        except BaseException:
            _give_turn(turn, record_info)
            raise

    @event.listens_for(engine, "checkin")
    def _returned(_dbapi_conn: Any, record: Any) -> None:
        # Handed on once the connection is back: after its COMMIT (and fsync) or rollback finished.
        if record is not None:
            _give_turn(turn, record.record_info)


def _take_turn(turn: threading.Lock, info: dict[str, Any]) -> None:
    if not info.get(_HOLDS_TURN) and turn.acquire(timeout=SQLITE_BUSY_TIMEOUT_S):
        info[_HOLDS_TURN] = True


def _give_turn(turn: threading.Lock, info: dict[str, Any]) -> None:
    if info.pop(_HOLDS_TURN, False):
        turn.release()


SQLITE_BUSY_TIMEOUT_S = 30.0
_HOLDS_TURN = "signoff.holds_write_turn"


def _alembic_config(engine: Engine) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def upgrade(engine: Engine) -> tuple[str | None, str]:
    """Bring the schema to the newest revision; returns (before, after)."""
    config = _alembic_config(engine)
    with engine.begin() as conn:
        before = MigrationContext.configure(conn).get_current_revision()
        config.attributes["connection"] = conn
        command.upgrade(config, "head")
    return before, head_revision()


def head_revision() -> str:
    head = ScriptDirectory(str(MIGRATIONS)).get_current_head()
    assert head is not None
    return head


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def ensure_schema(engine: Engine, *, auto_upgrade: bool = False) -> None:
    """Check the database is reachable and current; upgrade it only when told to.

    Raises `ConfigError` with the command that fixes an out-of-date schema, or naming the
    (password-masked) URL when the database cannot be reached. A SQLite file that does not exist is
    created only by an upgrade: a check or a read leaves nothing behind.
    """
    url = masked(engine.url.render_as_string(hide_password=False))
    path = sqlite_file(url)
    if path is not None and not path.exists() and not auto_upgrade:
        # Connecting would create an empty file, and a read would leave it behind.
        missing = (f"{path} does not exist; `signoff db upgrade` creates it" if path.parent.is_dir()
                   else f"directory {path.parent.absolute()} does not exist")
        raise ConfigError(f"cannot reach the database at {url}: {missing}")
    try:
        current = current_revision(engine)
    except OperationalError as exc:
        raise database_error(url, exc) from None
    if current == head_revision():
        return
    if auto_upgrade:
        upgrade(engine)
        return
    state = "has no Signoff tables" if current is None else f"is at schema {current}, not {head_revision()}"
    raise ConfigError(f"the database at {url} {state}; run `signoff db upgrade`")


def is_default_sqlite(url: str) -> bool:
    """The zero-configuration database, which may be created and upgraded on first use."""
    return url == DEFAULT_DATABASE_URL


def sqlite_file(url: str) -> Path | None:
    """The file a SQLite URL names; None for any other database, an in-memory one or a `file:` URI."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return None
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or database in ("", ":memory:") or database.startswith("file:"):
        return None
    return Path(database)


def is_new_sqlite(url: str) -> bool:
    """A SQLite file that does not exist yet: creating and migrating it on first use changes nobody's data."""
    path = sqlite_file(url)
    return path is not None and not path.exists()


def sqlite_unusable(path: Path) -> str | None:
    """What keeps SQLite from opening the database at `path` at all, in words; None if nothing does."""
    directory = path.parent.absolute()
    if not directory.is_dir():
        return f"directory {directory} does not exist"
    if path.exists() and not path.is_file():
        return f"{path} is not a file"
    return None


def sqlite_unwritable(path: Path) -> str | None:
    """What keeps SQLite from writing the database at `path`, in words; None if nothing does.

    Reads need it too: opening a database sets up its write-ahead log."""
    directory = path.parent.absolute()
    if path.exists() and not os.access(path, os.R_OK | os.W_OK):
        return f"file {path} is not writable"
    # WAL mode keeps two files beside the database, created by whoever opens it first.
    beside = [path.with_name(path.name + suffix) for suffix in ("-wal", "-shm")]
    if not os.access(directory, os.W_OK | os.X_OK) and not all(os.access(f, os.R_OK | os.W_OK) for f in beside):
        return (f"directory {directory} is not writable (SQLite keeps {beside[0].name} and {beside[1].name} "
                "beside the database)")
    return None


def check_writable(url: str) -> None:
    """Raise `ConfigError` if the SQLite file `url` names (or its directory) cannot be written.

    SQLite opens a read-only file for reading without a word and fails at the first write, in the
    middle of a run; a command that writes asks first."""
    path = sqlite_file(url)
    unwritable = sqlite_unwritable(path) if path is not None and path.parent.is_dir() else None
    if unwritable is not None:
        raise ConfigError(f"the database at {masked(url)} is not writable: {unwritable}")


def database_error(url: str, exc: OperationalError) -> ConfigError:
    """One line for a database that would not open: for a SQLite file, what the file system says is
    wrong with it (SQLite says "unable to open database file" or "attempt to write a readonly
    database" for all of it); otherwise the driver's first line. `url` is masked already."""
    path = sqlite_file(url)
    if path is not None:
        unusable = sqlite_unusable(path)
        if unusable is not None:
            return ConfigError(f"cannot reach the database at {url}: {unusable}")
        unwritable = sqlite_unwritable(path)
        if unwritable is not None:
            return ConfigError(f"the database at {url} is not writable: {unwritable}")
    text = str(exc.orig if exc.orig is not None else exc).strip().splitlines()
    return ConfigError(f"cannot reach the database at {url}: {text[0] if text else type(exc).__name__}")
