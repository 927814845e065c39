"""The audit trail: events to `on_event`, redacted arguments, and per-step checkpoints to `on_checkpoint`."""

from __future__ import annotations

import json
from typing import Any

from agent_fakes import ManualClock, Outbox, Recorder, Script, call, final, standard_tools

from signoff.runtime import Agent, ModelUnavailable, Tool

SCENARIO = (call("search", query="refund policy"), call("send_email", to="ops@example.com", subject="Refunds"),
            final("sent"))


def recorded_run(recorder: Recorder, *decisions: Any, tools: list[Tool] | None = None, **options: Any) -> Agent:
    tools = standard_tools(Outbox()) if tools is None else tools
    agent = Agent(Script(*decisions), tools, **recorder.hooks(), **options)
    agent.start("email ops the refund policy")
    return agent


def test_a_run_emits_its_story_in_order():
    recorder = Recorder()
    agent = recorded_run(recorder, *SCENARIO)
    assert recorder.types() == ["run_started", "decision", "tool_executed", "decision", "approval_requested"]
    agent.decide(True, note="fine", by="U_LEAD")
    assert recorder.types()[5:] == ["approval_decided", "tool_executed", "decision", "finished"]
    assert all(e["run_id"] == "run-1" for e in recorder.events)
    assert [e["step"] for e in recorder.events] == [0, 1, 1, 2, 2, 2, 2, 3, 3]


def test_events_carry_what_an_auditor_needs():
    recorder = Recorder()
    agent = recorded_run(recorder, *SCENARIO)
    agent.decide(True, note="fine", by="U_LEAD")
    requested, decided = recorder.of("approval_requested")[0], recorder.of("approval_decided")[0]
    assert requested["key"] == decided["key"] == "run-1:2"
    assert requested["args"] == {"to": "ops@example.com", "subject": "Refunds", "body": ""}
    assert (decided["approved"], decided["by"], decided["note"]) == (True, "U_LEAD", "fine")
    search, send = recorder.of("tool_executed")
    assert (search["tool"], search["side_effect"], send["side_effect"]) == ("search", False, True)
    assert all(isinstance(e["seconds"], float) for e in (search, send))
    assert recorder.of("finished")[0]["answer"] == "sent"
    assert recorder.of("finished")[0]["usage"]["tool_calls"] == 2


def test_failed_tool_event_has_the_error_and_seconds():
    recorder = Recorder()
    recorded_run(recorder, call("search", query=" "), final("no"))
    (failed,) = recorder.of("tool_failed")
    assert failed["error"] == "ValueError: empty query"
    assert failed["seconds"] >= 0


def test_stopping_events_name_their_reason():
    recorder = Recorder()
    agent = recorded_run(recorder, call("send_email", to="a@x", subject="s"))
    agent.cancel("wrong run", by="U_ASKER")
    (cancelled,) = recorder.of("cancelled")
    assert (cancelled["reason"], cancelled["by"]) == ("wrong run", "U_ASKER")

    def down(history: list[dict[str, Any]]) -> Any:
        raise ModelUnavailable("503")

    recorder = Recorder()
    Agent(down, [], **recorder.hooks()).start("go")
    assert recorder.of("failed")[0]["reason"] == "model unavailable"


SECRETS = {"password": "hunter2", "api_key": "sk-live-1", "github_token": "ghp_2",
           "headers": {"Authorization": "Bearer 3", "X-Api-Key": "k-4"}}


def echo_tool(side_effect: bool, **options: Any) -> Tool:
    return Tool("login", lambda args, key: "ok", side_effect=side_effect, **options)


def test_secret_arguments_are_redacted_in_events_but_reach_the_tool():
    received: list[dict[str, Any]] = []
    # `github_token` is no built-in name (names match exactly, not by suffix): the tool declares it.
    tool = Tool("login", lambda args, key: received.append(args) or "ok", side_effect=True,
                redact=("github_token",))
    recorder = Recorder()
    agent = recorded_run(recorder, {"tool": "login", "args": {"user": "ann", **SECRETS}}, final("in"),
                         tools=[tool])
    agent.decide(True)
    trail = json.dumps(recorder.events)
    for secret in ("hunter2", "sk-live-1", "ghp_2", "Bearer 3", "k-4"):
        assert secret not in trail
    assert recorder.of("approval_requested")[0]["args"]["user"] == "ann"
    assert recorder.of("decision")[0]["args"]["headers"]["Authorization"] == "[redacted]"
    assert received == [{"user": "ann", **SECRETS}]


def test_redact_keys_replace_the_default_list():
    recorder = Recorder()
    recorded_run(recorder, call("login", user="ann", password="hunter2"), tools=[echo_tool(True)],
                 redact_keys={"user"})
    args = recorder.of("approval_requested")[0]["args"]
    assert args == {"user": "[redacted]", "password": "hunter2"}


def test_tool_redact_adds_argument_names_for_that_tool():
    recorder = Recorder()
    recorded_run(recorder, call("login", user="ann", pin="1234", password="x"),
                 tools=[echo_tool(True, redact=("pin",))])
    args = recorder.of("approval_requested")[0]["args"]
    assert args == {"user": "ann", "pin": "[redacted]", "password": "[redacted]"}


def test_checkpoint_history_slices_add_up_to_the_whole_history():
    recorder = Recorder()
    agent = recorded_run(recorder, call("search", query="a"), {"broken": True}, *SCENARIO)
    agent.decide(True)
    joined = [entry for snap in recorder.snapshots for entry in snap.new_history]
    assert joined == agent.state["history"]


def test_every_event_is_delivered_in_exactly_one_checkpoint():
    recorder = Recorder()
    agent = recorded_run(recorder, *SCENARIO)
    agent.decide(False, note="no")
    delivered = [event for snap in recorder.snapshots for event in snap.events]
    assert delivered == recorder.events


def test_each_policy_step_gets_its_own_checkpoint():
    recorder = Recorder()
    recorded_run(recorder, call("search", query="a"), call("search", query="b"), final("ok"))
    steps = [json.loads(s.blob)["steps"] for s in recorder.snapshots]
    assert steps == [0, 1, 2, 3]
    assert [[e["step"] for e in s.new_history] for s in recorder.snapshots[1:]] == [[1, 1], [2, 2], [3]]


def test_the_last_checkpoint_is_the_agents_state():
    recorder = Recorder()
    agent = recorded_run(recorder, *SCENARIO, clock=ManualClock())
    assert json.loads(recorder.snapshots[-1].blob) == json.loads(agent.checkpoint())
    agent.decide(True)
    assert json.loads(recorder.snapshots[-1].blob) == json.loads(agent.checkpoint())


def test_side_effect_execution_is_reported_in_its_checkpoint():
    recorder = Recorder()
    agent = recorded_run(recorder, *SCENARIO)
    assert all(s.execution is None for s in recorder.snapshots)
    agent.decide(True)
    executions = [s.execution for s in recorder.snapshots if s.execution is not None]
    assert len(executions) == 1
    (execution,) = executions
    assert execution["key"] == "run-1:2" and execution["tool"] == "send_email" and execution["ok"] is True
    assert execution["result"] == {"message_id": "msg-run-1:2"}


def test_checkpoints_continue_seamlessly_after_a_resume():
    before = Recorder()
    agent = recorded_run(before, *SCENARIO)
    after = Recorder()
    resumed = Agent.resume(agent.checkpoint(), Script(*SCENARIO), standard_tools(Outbox()), **after.hooks())
    resumed.decide(True)
    joined = [entry for snap in before.snapshots + after.snapshots for entry in snap.new_history]
    assert joined == resumed.state["history"]
    delivered = [event for snap in before.snapshots + after.snapshots for event in snap.events]
    assert delivered == before.events + after.events
    assert [e["type"] for e in after.events] == ["approval_decided", "tool_executed", "decision", "finished"]


def test_secret_keys_are_recognised_in_any_common_spelling():
    from signoff.runtime import redact

    args = {"accessToken": "a", "clientSecret": "b", "passwd": "c", "X-Auth-Token": "d", "API_KEY": "e",
            "apiKey": "f", "author": "Ann", "tokens_used": 5, "secretary": "Bob"}
    assert redact(args) == {**{k: "[redacted]" for k in list(args)[:6]},
                            "author": "Ann", "tokens_used": 5, "secretary": "Bob"}


def test_names_that_merely_end_like_a_secret_are_shown():
    from signoff.runtime import redact

    # Hiding these made approvers sign off blind; a tool whose `run_token` is secret declares it.
    args = {"run_token": "rt-1", "sql_auth": "peer", "userPassword": "c", "github_token": "g"}
    assert redact(args) == args
    assert redact(args, {"run_token"})["run_token"] == "[redacted]"


def test_configured_secret_keys_match_in_any_spelling_too():
    from signoff.runtime import redact

    assert redact({"x_pin": 1, "X-Pin": 2, "xPin": 3, "pin": 4, "my_x_pin": 5}, {"X-Pin"}) == {
        "x_pin": "[redacted]", "X-Pin": "[redacted]", "xPin": "[redacted]", "pin": 4, "my_x_pin": 5}
