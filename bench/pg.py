"""A dedicated PostgreSQL schema per benchmark, so results never mix with tests or each other."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError

DEFAULT_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def postgres_url() -> str:
    """The server to benchmark on: `SIGNOFF_BENCH_POSTGRES_URL`, else the test server's URL."""
    return (os.environ.get("SIGNOFF_BENCH_POSTGRES_URL") or os.environ.get("SIGNOFF_TEST_POSTGRES_URL")
            or DEFAULT_URL)


def reachable(url: str) -> bool:
    try:
        engine = create_engine(url, connect_args={"connect_timeout": 3})
        with engine.connect() as conn:
            conn.execute(text("select 1"))
        engine.dispose()
        return True
    except (OperationalError, ModuleNotFoundError):
        return False


def server_version(url: str) -> str:
    engine = create_engine(url)
    with engine.connect() as conn:
        version = conn.execute(text("show server_version")).scalar_one()
    engine.dispose()
    return str(version)


def with_schema(url: str, schema: str) -> str:
    joiner = "&" if "?" in url else "?"
    return f"{url}{joiner}options=-csearch_path%3D{schema}"


@contextmanager
def dedicated_schema(url: str, prefix: str) -> Iterator[str]:
    """Yield a URL whose connections use a fresh schema; the schema is dropped afterwards."""
    schema = f"{prefix}_{secrets.token_hex(4)}"
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    try:
        yield with_schema(url, schema)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()
