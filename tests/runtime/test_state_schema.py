"""Typed run state: version 2 is validated whole, version 1 is upgraded when read, the seed API is
unchanged, and every state the agent reaches writes canonical JSON that reads back equal."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from agent_fakes import ManualClock, Outbox, Recorder, Script, call, final, standard_tools
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_checkpoint_properties import ANSWER, DECISION, World, budget_for

from signoff.runtime import ACTIVE, STATUSES, TERMINAL, WAITING_ON_HUMAN, Agent, IncompatibleState
from signoff.runtime.history import ToolCall, ToolResult
from signoff.runtime.pending_calls import PendingCall
from signoff.runtime.schema import SCHEMA_VERSION, STOPPED, WAITING_ON_CALLER, RunState
from signoff.runtime.state import call_digest, canonical_json, dump_state, load_state, parse_state
from signoff.runtime.state_versions import downgrade_v2_to_v1, upgrade

CORPUS = Path(__file__).resolve().parents[1] / "replay" / "corpus"
V1_STATES = {p.stem: json.loads(p.read_text())["state"] for p in sorted(CORPUS.glob("*.json"))}


def paused() -> Agent:
    agent = Agent(Script(call("search", query="refunds"), call("send_email", to="ops@x", subject="s")),
                  standard_tools(Outbox()), clock=ManualClock())
    assert agent.start("go") == "awaiting_approval"
    return agent


# -- the seed API, unchanged ------------------------------------------------------------------------


def test_the_seed_api_pauses_checkpoints_resumes_and_decides_as_before():
    outbox = Outbox()
    policy = Script(call("search", query="refunds"), call("send_email", to="ops@x", subject="s"), final("sent"))
    agent = Agent(policy, standard_tools(outbox), 8, "run-1")
    assert agent.start("email ops") == "awaiting_approval"
    assert agent.state["pending"]["key"] == "run-1:2"
    assert agent.state["steps"] == 2
    blob = agent.checkpoint()
    assert isinstance(blob, str) and json.loads(blob)["schema_version"] == 2

    resumed = Agent.resume(blob, policy, standard_tools(outbox))
    assert resumed.decide(True, "looks right") == "done"
    assert resumed.state["answer"] == "sent"
    assert outbox.of("send_email") == [("send_email", {"to": "ops@x", "subject": "s", "body": ""}, "run-1:2")]
    exhausted = Agent(Script(then=call("search", query="a")), standard_tools(Outbox()), 2, "run-2")
    assert exhausted.start("loop") == "budget_exhausted"


def test_the_state_is_read_only_json_and_its_copies_are_plain():
    agent = paused()
    with pytest.raises(TypeError, match="read-only"):
        agent.state["status"] = "done"
    with pytest.raises(TypeError, match="read-only"):
        agent.state["pending"]["args"]["to"] = "mallory@example.com"
    with pytest.raises(TypeError, match="read-only"):
        agent.state["history"].append({"role": "user", "content": "more"})
    mine = copy.deepcopy(agent.state)
    mine["pending"]["args"]["to"] = "mallory@example.com"
    assert agent.state["pending"]["args"]["to"] == "ops@x", "a copy is the caller's own"
    assert agent.run_state.pending is not None and agent.run_state.pending.key == "run-1:2"


def test_the_pending_call_is_bound_to_its_digest():
    pending = paused().run_state.pending
    assert pending is not None
    assert pending.digest == call_digest("send_email", {"to": "ops@x", "subject": "s", "body": ""}, "run-1:2")


def test_the_status_groups_are_one_closed_partition_of_the_statuses():
    groups = (ACTIVE, WAITING_ON_HUMAN, WAITING_ON_CALLER, TERMINAL)
    assert set(STATUSES) == set().union(*groups)
    assert sum(len(group) for group in groups) == len(STATUSES), "no status is in two groups"
    assert {"done", "cancelled", "expired"} == TERMINAL and {"idle", "running"} == ACTIVE
    assert {"awaiting_caller"} == WAITING_ON_CALLER, "a call its caller runs is nobody's to be told of as stopped"
    assert WAITING_ON_HUMAN - {"awaiting_approval"} == STOPPED


# -- version 1, upgraded when read ------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(V1_STATES))
def test_a_version_1_state_upgrades_to_version_2_and_round_trips(name: str):
    v1 = V1_STATES[name]
    run, v2 = parse_state(canonical_json(v1))
    assert v2["schema_version"] == SCHEMA_VERSION == run.schema_version
    assert v2["history"] == v1["history"], "history entries are the same in both versions"
    assert {k: v for k, v in v2.items() if k in v1 and k != "schema_version"} == \
        {k: v for k, v in v1.items() if k != "schema_version"}, "what version 1 had, version 2 keeps"
    assert {"fingerprints", "contracts", "repeats", "last_versions"} <= v2.keys()
    assert load_state(dump_state(v2)) == v2
    assert RunState.model_validate_json(dump_state(v2)) == run
    resumed = Agent.resume(canonical_json(v1), Script(), [])
    assert json.loads(resumed.checkpoint()) == v2


def test_a_version_1_state_missing_what_it_had_not_used_yet_is_filled_in_as_absent_meant():
    v1 = {k: v for k, v in V1_STATES["reconciled-done"].items() if k not in ("fingerprints", "repeats", "contracts")}
    v1["usage"] = {k: v for k, v in v1["usage"].items() if k != "seconds"}
    v1["budget"] = {"max_steps": 8}
    v1["pending"] = {"tool": "send", "args": {}, "key": f"{v1['run_id']}:1", "step": 1, "call_id": "c1"}
    v2 = load_state(v1)
    assert (v2["fingerprints"], v2["contracts"], v2["repeats"], v2["last_versions"]) == ({}, {}, 0, None)
    assert v2["usage"]["seconds"] == 0.0 and v2["budget"]["max_tool_calls"] is None
    assert v2["pending"]["contract"] is None
    assert "history" in v1 and "fingerprints" not in v1, "the caller's state is left alone"


def test_a_downgrade_to_version_1_loses_nothing():
    v2 = json.loads(paused().checkpoint())
    assert upgrade(downgrade_v2_to_v1(v2)) == v2


@pytest.mark.parametrize("version", [99, 3, 0, "2", True, None])
def test_an_unknown_version_is_refused(version: Any):
    state = json.loads(paused().checkpoint())
    state["schema_version"] = version
    with pytest.raises(IncompatibleState, match=f"schema version {version!r}; this Signoff reads version 2"):
        Agent.resume(json.dumps(state), Script(), [])
    assert upgrade(state, lenient=True) is state, "a listing shows it as it is"


# -- invalid shapes, refused with a clear error -----------------------------------------------------


def mangled(change: Any) -> str:
    state = json.loads(paused().checkpoint())
    change(state)
    return json.dumps(state)


@pytest.mark.parametrize(("change", "message"), [
    (lambda s: s["history"].append({"role": "wizard", "step": 3}), r"history\[4\]: not a history entry"),
    (lambda s: s["history"].append({"role": "tool", "step": 3, "tool": "search", "call_id": "c"}),
     r"history\[4\]: not a history entry"),
    (lambda s: s["history"][1].update(secret="x"), r"history\[1\]\.tool_call\.secret: Extra inputs"),
    (lambda s: s["pending"].pop("key"), r"pending\.key: Field required"),
    (lambda s: s.update(status="napping"), "unknown status 'napping'; known: idle, running"),
    (lambda s: s.update(steps=True), "steps: Input should be a valid integer"),
    (lambda s: s["usage"].update(tool_calls=-1), "usage.tool_calls: Input should be greater than or equal to 0"),
    (lambda s: s["budget"].update(max_steps=0), "budget.max_steps"),
    (lambda s: s.update(surprise=1), "surprise: Extra inputs are not permitted"),
    (lambda s: s.pop("repeats"), "run state is missing repeats"),
    (lambda s: s["fingerprints"].update(abc={"outcome": "maybe", "key": "k"}), r"fingerprints\.abc\.outcome"),
], ids=["unknown-role", "tool-entry-without-outcome", "extra-entry-key", "pending-without-key", "unknown-status",
        "bool-steps", "negative-usage", "zero-budget", "extra-key", "missing-key", "unknown-outcome"])
def test_an_invalid_shape_is_refused_with_where_and_why(change: Any, message: str):
    with pytest.raises(IncompatibleState, match=message):
        Agent.resume(mangled(change), Script(), [])


def test_a_refusal_never_echoes_the_values_it_refuses():
    blob = mangled(lambda s: s["pending"].update(args={"password": "hunter2"}, key=7))
    with pytest.raises(IncompatibleState) as refused:
        load_state(blob)
    assert "hunter2" not in str(refused.value) and "pending.key" in str(refused.value)


def test_history_entries_are_a_tagged_union_of_their_kinds():
    run = paused().run_state
    assert [type(e).__name__ for e in run.history] == ["Goal", "ToolCall", "ToolResult", "ToolCall"]
    call_entry, result = run.history[1], run.history[2]
    assert isinstance(call_entry, ToolCall) and isinstance(result, ToolResult)
    assert call_entry.call_id == result.call_id and isinstance(run.pending, PendingCall)


# -- any state the agent reaches ---------------------------------------------------------------------


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(decisions=st.lists(DECISION, min_size=3, max_size=12), answers=st.lists(ANSWER, min_size=4, max_size=12),
       max_steps=st.integers(2, 14), cancel_at=st.none() | st.integers(0, 3))
def test_every_state_the_agent_reaches_is_canonical_json_that_reads_back_equal(decisions, answers, max_steps,
                                                                               cancel_at):
    recorder, world = Recorder(), World.fresh()
    agent = Agent(Script(*decisions), world.tools(), budget=budget_for(max_steps, None), clock=world.clock,
                  **recorder.hooks())
    agent.start("do the thing")
    for n, (approved, note) in enumerate(answers):
        if agent.status in TERMINAL:
            break
        if n == cancel_at or agent.status != "awaiting_approval":
            agent.cancel("enough")
            break
        agent.decide(approved, note)
    blobs = [s.blob for s in recorder.snapshots] + [agent.checkpoint()]
    for blob in blobs:
        run, state = parse_state(blob)
        assert dump_state(state) == canonical_json(json.loads(blob))
        assert RunState.model_validate(run.to_json()) == run
        assert json.loads(dump_state(run.to_json())) == state
    assert parse_state(agent.checkpoint())[0] == agent.run_state
    assert upgrade(downgrade_v2_to_v1(json.loads(agent.checkpoint()))) == json.loads(agent.checkpoint())
