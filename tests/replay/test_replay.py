"""Recorded runs replayed through today's code: the corpus must replay identically, and a change of
behaviour is caught at the step where it diverges."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from signoff.runtime.replay import replay
from signoff.tools.base import Tool
from signoff.tools.registry import load_toolsets

CORPUS = Path(__file__).resolve().parent / "corpus"
RECORDINGS = sorted(CORPUS.glob("*.json"))


def recording(name: str) -> dict[str, Any]:
    return json.loads((CORPUS / f"{name}.json").read_text())


def tools_of(recorded: dict[str, Any], tmp_path: Path) -> dict[str, Tool]:
    """The recording's toolset as today's code defines it, with every function replaced by one that
    fails the test: a replay must never run a tool."""
    def never(args: dict[str, Any], key: str) -> Any:
        raise AssertionError(f"a replay ran a tool ({key})")
    loaded = load_toolsets(recorded["toolset"], outbox=tmp_path)
    return {name: dataclasses.replace(tool, fn=never) for name, tool in loaded.items()}


def test_the_corpus_is_not_empty() -> None:
    assert len(RECORDINGS) >= 8
    statuses = {json.loads(p.read_text())["status"] for p in RECORDINGS}
    assert {"done", "cancelled"} <= statuses


@pytest.mark.parametrize("path", RECORDINGS, ids=[p.stem for p in RECORDINGS])
def test_every_recorded_run_replays_identically(path: Path, tmp_path: Path) -> None:
    recorded = json.loads(path.read_text())
    result = replay(recorded["state"], recorded["events"], tools_of(recorded, tmp_path))
    assert result.divergence is None, result.divergence
    assert result.status == recorded["status"]
    assert result.compared > 3


def test_a_tool_that_became_read_only_diverges_where_it_would_have_asked(tmp_path: Path) -> None:
    recorded = recording("demo-approved")
    tools = tools_of(recorded, tmp_path)
    tools["send_email"] = dataclasses.replace(tools["send_email"], side_effect=False)
    result = replay(recorded["state"], recorded["events"], tools)
    assert result.divergence is not None
    assert result.divergence.expected["type"] == "approval_requested"
    assert result.divergence.expected["tool"] == "send_email"
    assert result.divergence.got["type"] != "approval_requested"
    assert result.divergence.step == 3


def test_a_stricter_argument_model_diverges_at_the_call_it_now_refuses(tmp_path: Path) -> None:
    class ShortNote(BaseModel):
        to: str
        text: str
        urgent: bool  # now required: the recorded call lacks it

    recorded = recording("model-outage-retried")
    tools = tools_of(recorded, tmp_path)
    tools["send_note"] = dataclasses.replace(tools["send_note"], args_model=ShortNote)
    result = replay(recorded["state"], recorded["events"], tools)
    assert result.divergence is not None
    assert (result.divergence.expected or {}).get("type") == "approval_requested"
    assert result.status != recorded["status"] or result.divergence.got is not None


def test_a_budget_that_now_runs_out_sooner_diverges_at_the_budget(tmp_path: Path) -> None:
    recorded = recording("budget-extended")
    events = [dict(e) for e in recorded["events"]]
    start = next(e for e in events if e["type"] == "run_started")
    start["budget"] = {**start["budget"], "max_tokens": 100}  # as if the run had been started with less
    result = replay(recorded["state"], events, tools_of(recorded, tmp_path))
    assert result.divergence is not None
    assert result.divergence.got["type"] == "budget_exhausted"
    assert result.divergence.got["budget"] == "max_tokens"


def test_a_loop_that_is_no_longer_stopped_diverges_at_the_stall(tmp_path: Path) -> None:
    recorded = recording("stalled-then-closed")
    result = replay(recorded["state"], recorded["events"], tools_of(recorded, tmp_path), stall_after=None)
    assert result.divergence is not None and result.divergence.expected["type"] == "stalled"


def test_a_run_recorded_mid_way_replays_up_to_where_the_recording_ends(tmp_path: Path) -> None:
    """A run still going when it was read (a worker between two turns): its replay stops there."""
    recorded = recording("budget-extended")
    state = json.loads(json.dumps(recorded["state"]))
    cut = next(i for i, e in enumerate(state["history"]) if e.get("role") == "assistant" and e.get("step") == 4)
    state["history"] = state["history"][:cut]
    last = max(i for i, e in enumerate(recorded["events"]) if e.get("type") == "tool_executed" and e.get("step") == 3)
    result = replay(state, recorded["events"][: last + 1], tools_of(recorded, tmp_path))
    assert result.divergence is None, result.divergence
    assert result.status == "running"
