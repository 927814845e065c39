"""A database URL as SQLAlchemy names its database: one rule, for the settings and the engine alike."""

from __future__ import annotations


def sqlalchemy_database_url(url: str) -> str:
    """`url` as SQLAlchemy names its database: `postgres://...` (as many hosts hand it out, and
    psql takes it) is `postgresql://...`, which SQLAlchemy alone knows."""
    scheme, separator, rest = url.partition("://")
    return f"postgresql{separator}{rest}" if separator and scheme == "postgres" else url
