"""The Alembic migrations build exactly the schema the store's table definitions describe."""

from __future__ import annotations

from sqlalchemy import Engine, inspect

from runtime.adapters.db import current_revision, head_revision
from runtime.adapters.tables import metadata


def test_migrated_database_has_every_table_column_and_index_the_store_uses(engine: Engine) -> None:
    assert current_revision(engine) == head_revision()
    found = inspect(engine)
    for table in metadata.tables.values():
        assert {c["name"] for c in found.get_columns(table.name)} == {c.name for c in table.columns}, table.name
        # PostgreSQL also lists the index behind each unique constraint; those are checked below.
        indexes = {i["name"] for i in found.get_indexes(table.name) if not i.get("duplicates_constraint")}
        assert indexes == {i.name for i in table.indexes}, table.name
        unique = {u["name"] for u in found.get_unique_constraints(table.name)}
        assert {c.name for c in table.constraints if c.__class__.__name__ == "UniqueConstraint"} <= unique, table.name
