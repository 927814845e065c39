"""Every audit event's type is one the catalog names and explains, and is built in one place."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from signoff.runtime.events import EVENT_MEANINGS, EVENT_TYPES, ending, event
from signoff.runtime.schema import STATUSES

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "replay" / "corpus"
LIBRARY = ("runtime", "bot", "tools", "signoff")


def test_every_event_a_recorded_run_wrote_is_in_the_catalog() -> None:
    """The replay corpus holds real runs of every kind (approved, denied, expired, reconciled, ...)."""
    written = {entry["type"] for path in sorted(CORPUS.glob("*.json"))
               for entry in json.loads(path.read_text(encoding="utf-8"))["events"]}
    assert written, "the corpus is empty"
    assert written <= EVENT_TYPES, f"not in the catalog: {sorted(written - EVENT_TYPES)}"


def _event_literals(path: Path) -> list[str]:
    """Where `path` writes out an event by hand: a dict display whose "type" is an event type."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Dict):
            continue
        for key, value in zip(node.keys, node.values, strict=True):
            if (isinstance(key, ast.Constant) and key.value == "type" and isinstance(value, ast.Constant)
                    and value.value in EVENT_TYPES):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {value.value}")
    return found


def test_the_library_builds_events_through_the_catalog_only() -> None:
    """A `{"type": "tool_executed", ...}` written by hand could misspell its type, or give one event
    two shapes in two stores; `events.event` (and the typed events, `events.TypedEvent`) take only
    catalogued names."""
    catalog = ROOT / "runtime" / "events.py"
    literals = [found for package in LIBRARY for path in sorted((ROOT / package).rglob("*.py"))
                if path != catalog for found in _event_literals(path)]
    assert literals == []


def test_a_stop_is_recorded_as_its_status_and_only_stopping_statuses_are() -> None:
    assert ending("stalled") == "stalled"
    for status in ("idle", "running", "awaiting_approval", "done"):
        assert status in STATUSES
        with pytest.raises(ValueError, match="does not stop"):
            ending(status)  # type: ignore[arg-type]  # the point: a status no run stops in


def test_every_type_has_a_meaning_and_the_audit_page_shows_the_table() -> None:
    assert all(EVENT_MEANINGS[name].endswith(".") for name in EVENT_TYPES)
    assert "<!-- event types -->" in (ROOT / "docs" / "audit.md").read_text(encoding="utf-8")
    assert event("grant_revoked", grant_id="g-1", by="U1") == {"type": "grant_revoked", "grant_id": "g-1", "by": "U1"}
