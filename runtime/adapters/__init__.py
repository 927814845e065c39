"""Adapters at the edge of the runtime: SQL storage and the database engine."""
