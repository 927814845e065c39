"""A database written by Signoff with state version 1 keeps working: migration 0003 rewrites every
stored state to version 2 (and back on downgrade), and the store reads the runs as version 2."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, insert, select

from signoff.runtime.adapters.db import MIGRATIONS, current_revision, head_revision, upgrade
from signoff.runtime.adapters.sql import SqlStore
from signoff.runtime.adapters.tables import run_history, runs
from signoff.runtime.agent import Agent
from signoff.runtime.schema import SCHEMA_VERSION, RunState
from signoff.runtime.state import canonical_json
from signoff.runtime.state_versions import upgrade_v1_to_v2

CORPUS = Path(__file__).resolve().parents[1] / "replay" / "corpus"
RECORDED = [json.loads(p.read_text())["state"] for p in sorted(CORPUS.glob("*.json"))]
COPIES = 130
"""Copies of each recorded run: over a thousand rows, so the migration goes through several batches."""
DAMAGED = {"run-damaged": '{"schema_version": 1, "status": "runn', "run-future": '{"schema_version":9,"status":"done"}'}
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def alembic(engine: Engine, action: Any, revision: str) -> None:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        action(config, revision)


def version_1_database(engine: Engine) -> dict[str, dict[str, Any]]:
    """The schema built by the real migrations up to 0002, holding runs as Signoff wrote them then
    (the recorded corpus, copied under many ids); returns each run's version 1 state by id."""
    alembic(engine, command.downgrade, "base")
    alembic(engine, command.upgrade, "0002")
    states = {f"{state['run_id']}-{n:03}": {**state, "run_id": f"{state['run_id']}-{n:03}"}
              for state in RECORDED for n in range(COPIES)}
    with engine.begin() as conn:
        conn.execute(insert(runs), [row(run_id, canonical_json({k: v for k, v in s.items() if k != "history"}),
                                        s["status"], len(s["history"])) for run_id, s in states.items()]
                     + [row(run_id, damaged, "idle", 0) for run_id, damaged in DAMAGED.items()])
        conn.execute(insert(run_history), [{"run_id": run_id, "seq": i, "entry": canonical_json(entry)}
                                           for run_id, s in states.items() for i, entry in enumerate(s["history"])])
    return states


def row(run_id: str, state: str, status: str, history_len: int) -> dict[str, Any]:
    return {"run_id": run_id, "goal": "recorded", "requester": "U0ASKER", "origin": "{}", "model": "scripted:demo",
            "status": status, "state": state, "history_len": history_len, "version": 1, "event_count": 0,
            "created_at": NOW, "updated_at": NOW}


def stored_states(engine: Engine) -> dict[str, str]:
    with engine.connect() as conn:
        return {r.run_id: r.state for r in conn.execute(select(runs.c.run_id, runs.c.state))}


def test_an_upgrade_rewrites_every_version_1_state_and_the_store_reads_them_as_version_2(engine: Engine) -> None:
    states = version_1_database(engine)
    assert upgrade(engine) == ("0002", head_revision())

    stored = stored_states(engine)
    for run_id, state in states.items():
        header = {k: v for k, v in state.items() if k != "history"}
        assert stored[run_id] == canonical_json(upgrade_v1_to_v2(header)), run_id
    assert {run_id: stored[run_id] for run_id in DAMAGED} == DAMAGED, "what cannot be read is left as it is"

    store = SqlStore(engine)
    for run_id in [next(iter(states)), *list(states)[COPIES::COPIES]]:  # one copy of each recorded run
        run = store.get_run(run_id)
        assert run is not None and run.state["schema_version"] == SCHEMA_VERSION
        assert run.state["history"] == states[run_id]["history"], "history entries are the same in both versions"
        assert RunState.model_validate(run.state).status == states[run_id]["status"]
        resumed = Agent.resume(run.state, lambda history: {"final": "unused"}, [])
        assert json.loads(resumed.checkpoint()) == run.state
    listed = {r.run_id: r for r in store.list_runs(limit=10_000)}
    assert all(listed[run_id].state["schema_version"] == SCHEMA_VERSION for run_id in states)


def test_a_downgrade_writes_version_1_back_without_losing_anything(engine: Engine) -> None:
    states = version_1_database(engine)
    upgrade(engine)
    alembic(engine, command.downgrade, "0002")
    assert current_revision(engine) == "0002"

    stored = stored_states(engine)
    for run_id, state in states.items():
        back = json.loads(stored[run_id])
        assert back["schema_version"] == 1
        header = {k: v for k, v in state.items() if k != "history"}
        assert upgrade_v1_to_v2(back) == upgrade_v1_to_v2(header), "upgrading again gives the same state"
    assert {run_id: stored[run_id] for run_id in DAMAGED} == DAMAGED

    upgrade(engine)  # and up again, as after a rolled-back deploy is redeployed
    store = SqlStore(engine)
    assert all(store.get_run(run_id).state["schema_version"] == SCHEMA_VERSION for run_id in list(states)[:3])
    assert not [run_id for run_id, state in stored_states(engine).items() if '"schema_version":1,' in state]
