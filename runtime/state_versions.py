"""Reading state written by an older Signoff: each stored version upgraded, one step at a time. Pure.

Version 1 (Signoff before typed state) left out what a run had not used yet (`fingerprints`,
`contracts`, `repeats`, `last_versions`, a pending call's `contract`) and validated only a few
keys. Version 2 has every key, always, and is validated whole (`schema.RunState`). Its history
entries are version 1's, unchanged, so an upgrade touches only the rest of the state (the `runs.state`
column) and works on a state with or without its `history`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from signoff.runtime.errors import IncompatibleState
from signoff.runtime.schema import SCHEMA_VERSION, BudgetLimits, Usage

JsonState = dict[str, Any]


def upgrade_v1_to_v2(state: JsonState) -> JsonState:
    """Version 1 -> 2: the keys version 1 could leave out, filled in with what their absence meant.

    Keys version 1 required are not invented: a state without them stays invalid and is refused
    when it is validated.
    """
    upgraded: JsonState = {
        "goal": None, "answer": None, "stop": None, "model": None, "fingerprints": {}, "contracts": {},
        "repeats": 0, "last_versions": None, **state, "schema_version": 2,
    }
    if isinstance(state.get("budget"), dict):
        upgraded["budget"] = {**dict.fromkeys(BudgetLimits.model_fields), **state["budget"]}
    if isinstance(state.get("usage"), dict):
        zero = {k: 0.0 if Usage.model_fields[k].annotation is float else 0 for k in Usage.model_fields}
        upgraded["usage"] = {**zero, **state["usage"]}
    if isinstance(state.get("pending"), dict):
        upgraded["pending"] = {"contract": None, **state["pending"]}
    return upgraded


def downgrade_v2_to_v1(state: JsonState) -> JsonState:
    """Version 2 -> 1, for a database migrated back: version 1 reads every key version 2 writes,
    with the same meaning, so only the number changes."""
    return {**state, "schema_version": 1}


UPGRADES: dict[int, Callable[[JsonState], JsonState]] = {1: upgrade_v1_to_v2}
"""By the version they read; each returns the next version."""


def upgrade(state: JsonState, *, lenient: bool = False) -> JsonState:
    """`state` (a JSON object, with or without its history) at the current version; the argument is
    left alone. An unknown version raises `IncompatibleState`, unless `lenient` (a listing, which
    shows what it can) says to hand it back as it is. The result is not validated yet."""
    version = state.get("schema_version")
    while version != SCHEMA_VERSION:
        step = UPGRADES.get(version) if type(version) is int else None  # not True, which equals 1
        if step is None:
            if lenient:
                return state
            raise IncompatibleState(f"run state has schema version {version!r}; this Signoff reads version "
                                    f"{SCHEMA_VERSION} and upgrades version {', '.join(map(str, sorted(UPGRADES)))}")
        state = step(state)
        version = state["schema_version"]
    return state
