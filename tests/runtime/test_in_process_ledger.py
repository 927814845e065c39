"""An agent held in this process starts its calls through a ledger, as a stored run does: a call
started under a key is never started again under it (agents sharing the ports see one ledger), a
call that left no outcome stops for a person, one that ran gives its recorded result, and a retry
a person asked for, or an idempotent tool, still starts again."""

from __future__ import annotations

from typing import Any

import pytest
from agent_fakes import EmailArgs, ManualClock, Outbox, Recorder, Script, call, last_observation

from signoff.runtime import Agent, Tool, run_tool
from signoff.runtime.agent import InProcess
from signoff.runtime.call_starts import InProcessLedger


class Crash(BaseException):
    """The process dies mid-call: nothing after the tool's start is recorded."""


class Mailer:
    """A non-idempotent email tool that can be made to die mid-call (once) or to fail."""

    def __init__(self, *, idempotent: bool = False) -> None:
        self.outbox = Outbox()
        self.crash_next = False
        self.fail_next = False
        self.idempotent = idempotent

    def send(self, args: dict[str, Any], key: str) -> dict[str, Any]:
        self.outbox.runs.append(("send_email", args, key))
        if self.crash_next:
            self.crash_next = False
            raise Crash
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("mail server said no")
        return {"message_id": f"msg-{key}", "sent": len(self.outbox.runs)}

    def tools(self) -> list[Tool]:
        return [Tool("send_email", self.send, side_effect=True, args_model=EmailArgs, idempotent=self.idempotent,
                     description="Send an email.")]


POLICY = (call("send_email", to="ana@example.com", subject="refund"),)


def paused(mailer: Mailer, ports: InProcess) -> Agent:
    agent = Agent(Script(*POLICY), mailer.tools(), ports=ports)
    assert agent.start("email Ana") == "awaiting_approval"
    return agent


def shared_ports(recorder: Recorder, **options: Any) -> InProcess:
    return InProcess(run_tool, recorder.on_checkpoint, ManualClock(), **options)


def resumed_from_last_checkpoint(mailer: Mailer, ports: InProcess, recorder: Recorder) -> Agent:
    """A second agent on the same ports, from the step last saved (as after a crash)."""
    return Agent.resume(recorder.snapshots[-1].blob, Script(*POLICY), mailer.tools(), ports=ports)


def test_a_call_that_died_mid_call_is_not_run_again_by_an_agent_resumed_on_the_same_ports() -> None:
    mailer, recorder = Mailer(), Recorder()
    ports = shared_ports(recorder)
    first = paused(mailer, ports)
    key = first.state["pending"]["key"]
    mailer.crash_next = True
    with pytest.raises(Crash):
        first.decide(True, by="U_LEAD")
    second = resumed_from_last_checkpoint(mailer, ports, recorder)
    assert second.status == "awaiting_approval"
    assert second.decide(True, by="U_LEAD") == "needs_reconciliation"
    assert [k for _, _, k in mailer.outbox.runs] == [key]  # started once, never again
    assert second.state["stop"]["reason"] == (f"send_email ({key}) started earlier and recorded no outcome; "
                                               "it may or may not have taken effect")
    assert second.state["pending"]["key"] == key  # kept, for a person to settle


def test_a_person_asking_to_retry_the_unknown_call_starts_it_again_once() -> None:
    mailer, recorder = Mailer(), Recorder()
    ports = shared_ports(recorder)
    first = paused(mailer, ports)
    mailer.crash_next = True
    with pytest.raises(Crash):
        first.decide(True, by="U_LEAD")
    second = resumed_from_last_checkpoint(mailer, ports, recorder)
    key = second.state["pending"]["key"]
    assert second.decide(True, by="U_LEAD") == "needs_reconciliation"
    assert second.reconcile("retry", by="U_LEAD") == "done"
    assert [k for _, _, k in mailer.outbox.runs] == [key, key]  # the crashed start, and the one retry
    assert [e["result"] for e in second.state["history"] if e["role"] == "tool"] == [
        {"message_id": f"msg-{key}", "sent": 2}]


def test_an_idempotent_tool_that_died_mid_call_starts_again_under_its_key() -> None:
    mailer, recorder = Mailer(idempotent=True), Recorder()
    ports = shared_ports(recorder)
    first = paused(mailer, ports)
    key = first.state["pending"]["key"]
    mailer.crash_next = True
    with pytest.raises(Crash):
        first.decide(True, by="U_LEAD")
    second = resumed_from_last_checkpoint(mailer, ports, recorder)
    assert second.decide(True, by="U_LEAD") == "done"
    assert [k for _, _, k in mailer.outbox.runs] == [key, key]


def test_a_call_that_ran_gives_its_recorded_result_to_an_agent_resumed_before_it_ran() -> None:
    mailer, recorder = Mailer(), Recorder()
    ports = shared_ports(recorder)
    first = paused(mailer, ports)
    key = first.state["pending"]["key"]
    before = recorder.snapshots[-1].blob  # awaiting approval, nothing run
    assert first.decide(True, by="U_LEAD") == "done"
    second = Agent.resume(before, Script(*POLICY), mailer.tools(), ports=ports)
    assert second.decide(True, by="U_LEAD") == "done"
    assert len(mailer.outbox.runs) == 1  # the ledger's result, not a second email
    told = [e["result"] for e in second.state["history"] if e["role"] == "tool"]
    assert told == [{"message_id": f"msg-{key}", "sent": 1}]  # the model is told what the one email did


def test_a_call_that_failed_gives_its_recorded_failure_and_is_not_run_again() -> None:
    mailer, recorder = Mailer(), Recorder()
    ports = shared_ports(recorder)
    first = paused(mailer, ports)
    before = recorder.snapshots[-1].blob
    mailer.fail_next = True
    first.decide(True, by="U_LEAD")
    assert last_observation(first.state)["error"] == "RuntimeError: mail server said no"
    second = Agent.resume(before, Script(*POLICY), mailer.tools(), ports=ports)
    second.decide(True, by="U_LEAD")
    assert len(mailer.outbox.runs) == 1
    [failed] = [e for e in second.state["history"] if e["role"] == "tool"]
    assert failed["error"] == "ToolFailed: RuntimeError: mail server said no"


def test_agents_built_apart_share_a_ledger_given_to_both() -> None:
    mailer, ledger = Mailer(), InProcessLedger()
    recorder = Recorder()
    first = paused(mailer, shared_ports(recorder, ledger=ledger))
    before = recorder.snapshots[-1].blob
    assert first.decide(True, by="U_LEAD") == "done"
    second = Agent.resume(before, Script(*POLICY), mailer.tools(), ports=shared_ports(Recorder(), ledger=ledger))
    assert second.decide(True, by="U_LEAD") == "done"
    assert len(mailer.outbox.runs) == 1


def test_the_seed_executor_still_runs_every_call_once() -> None:
    mailer, seen = Mailer(), []

    def executor(tool: Tool, args: dict[str, Any], key: str) -> Any:
        seen.append(key)
        return run_tool(tool, args, key)

    agent = Agent(Script(*POLICY), mailer.tools(), executor=executor)
    assert agent.start("email Ana") == "awaiting_approval"
    assert agent.decide(True, by="U_LEAD") == "done"
    assert seen == ["run-1:1"] and [k for _, _, k in mailer.outbox.runs] == ["run-1:1"]
