"""Property: pausing, checkpointing and resuming in a fresh agent never changes how a run ends.

Hypothesis scripts random decision sequences (tool calls, duplicates, unknown tools, invalid and
malformed replies, usage reports, final answers) and random human answers, then runs each script
twice: once in one agent, once resumed from its JSON checkpoint at every pause.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agent_fakes import ManualClock, Outbox, Recorder, Script, call, final, standard_tools
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from signoff.runtime import Agent, Budget, Tool, ToolFailed

USAGE = st.fixed_dictionaries({
    "input_tokens": st.integers(0, 60),
    "output_tokens": st.integers(0, 30),
    "cost_usd": st.sampled_from([0, 0.001, 0.0125]),
})

SIDE_EFFECTS = st.one_of(
    st.builds(lambda to, subject: call("send_email", to=to, subject=subject),
              st.sampled_from(["ops@example.com", "cfo@example.com"]), st.sampled_from(["Refunds", "Q3"])),
    st.builds(lambda n: call("page", service=n), st.sampled_from(["api", "db"])),
)

OTHER_CALLS = st.one_of(
    st.builds(lambda q: call("search", query=q), st.sampled_from(["refunds", "", "  ", "pricing"])),
    st.just(call("flaky")),
    st.just(call("launch_rockets", count=3)),
    st.just(call("send_email", subject=7)),
)

MALFORMED = st.sampled_from([
    "plain text", None, 42, [], {}, {"tool": "search", "final": "both"}, {"tool": "search", "args": [1]},
    {"tool": 3}, {"error": "unparseable reply"},
])


def with_usage(decision: Any, usage: dict[str, Any] | None) -> Any:
    return {**decision, "usage": usage} if usage is not None and isinstance(decision, dict) else decision


DECISION = st.builds(
    with_usage,
    st.one_of(SIDE_EFFECTS, SIDE_EFFECTS, OTHER_CALLS, MALFORMED, st.builds(final, st.sampled_from(["done", "gave up"]))),
    st.none() | USAGE,
)

ANSWER = st.tuples(st.booleans(), st.sampled_from(["", "not now", "wrong recipient"]))


@dataclass
class World:
    """What a process builds from scratch: a clock, tools and the record of what they did."""

    clock: ManualClock
    outbox: Outbox

    @classmethod
    def fresh(cls) -> World:
        return cls(ManualClock(), Outbox())

    def tools(self) -> list[Tool]:
        clock, outbox = self.clock, self.outbox

        def flaky(args: dict[str, Any], key: str) -> None:
            outbox.runs.append(("flaky", args, key))
            clock.advance(0.25)
            raise ToolFailed("upstream 502")

        def page(args: dict[str, Any], key: str) -> str:
            outbox.runs.append(("page", args, key))
            clock.advance(1.5)
            return f"paged {args['service']}"

        return [*standard_tools(outbox), Tool("flaky", flaky), Tool("page", page, side_effect=True)]


def budget_for(max_steps: int, max_tokens: int | None) -> Budget:
    return Budget(max_steps=max_steps, max_tokens=max_tokens, max_seconds=12.0)


def run_uninterrupted(decisions: list[Any], answers: list[tuple[bool, str]], budget: Budget) -> tuple[Agent, World]:
    world = World.fresh()
    agent = Agent(Script(*decisions), world.tools(), budget=budget, clock=world.clock)
    agent.start("do the thing")
    for approved, note in answers:
        if agent.status != "awaiting_approval":
            break
        agent.decide(approved, note)
    return agent, world


def run_resuming_at_every_pause(decisions: list[Any], answers: list[tuple[bool, str]],
                                budget: Budget) -> tuple[Agent, list[tuple[str, dict[str, Any], str]]]:
    world = World.fresh()
    agent = Agent(Script(*decisions), world.tools(), budget=budget, clock=world.clock)
    agent.start("do the thing")
    executed = list(world.outbox.runs)
    for approved, note in answers:
        if agent.status != "awaiting_approval":
            break
        blob = agent.checkpoint()
        world = World.fresh()  # a new process: new clock, new tools, new policy, only the blob survives
        agent = Agent.resume(blob, Script(*decisions), world.tools(), clock=world.clock)
        assert agent.checkpoint() == blob
        agent.decide(approved, note)
        executed += world.outbox.runs
    return agent, executed


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    decisions=st.lists(DECISION, min_size=3, max_size=12),
    answers=st.lists(ANSWER, min_size=4, max_size=12),
    max_steps=st.integers(2, 14),
    max_tokens=st.none() | st.integers(50, 400),
)
def test_resuming_at_every_pause_ends_exactly_like_an_uninterrupted_run(decisions, answers, max_steps, max_tokens):
    budget = budget_for(max_steps, max_tokens)
    straight, world = run_uninterrupted(decisions, answers, budget)
    resumed, executed = run_resuming_at_every_pause(decisions, answers, budget)
    event(f"ended {straight.status} {(straight.state['stop'] or {}).get('budget', '')}")
    event(f"{len(straight.state['fingerprints'])} side effects settled by a human")
    assert resumed.checkpoint() == straight.checkpoint()
    assert executed == world.outbox.runs


@settings(max_examples=150, deadline=None)
@given(decisions=st.lists(DECISION, min_size=3, max_size=12), answers=st.lists(ANSWER, min_size=4, max_size=12),
       max_steps=st.integers(2, 14))
def test_side_effects_run_once_each_and_only_when_approved(decisions, answers, max_steps):
    recorder = Recorder()
    world = World.fresh()
    agent = Agent(Script(*decisions), world.tools(), budget=budget_for(max_steps, None), clock=world.clock,
                  on_event=recorder.on_event)
    agent.start("do the thing")
    for approved, note in answers:
        if agent.status != "awaiting_approval":
            break
        agent.decide(approved, note)
    executed = [(tool, json.dumps(args, sort_keys=True), key) for tool, args, key in world.outbox.runs
                if tool in ("send_email", "page")]
    approved_keys = [e["key"] for e in recorder.of("approval_decided") if e["approved"]]
    assert [key for _, _, key in executed] == approved_keys
    assert len({(tool, args) for tool, args, _ in executed}) == len(executed)  # never the same effect twice
    assert agent.state["steps"] <= max_steps
    assert agent.state["usage"]["tool_calls"] == len(world.outbox.runs)


@settings(max_examples=100, deadline=None)
@given(decisions=st.lists(DECISION, min_size=3, max_size=10), answers=st.lists(ANSWER, min_size=4, max_size=10))
def test_every_delivered_checkpoint_resumes_to_itself_and_they_add_up(decisions, answers):
    recorder = Recorder()
    world = World.fresh()
    agent = Agent(Script(*decisions), world.tools(), budget=budget_for(10, None), clock=world.clock,
                  **recorder.hooks())
    agent.start("do the thing")
    for approved, note in answers:
        if agent.status != "awaiting_approval":
            break
        agent.decide(approved, note)
    for snapshot in recorder.snapshots:
        state = json.loads(snapshot.blob)
        assert json.loads(Agent.resume(snapshot.blob, Script(), []).checkpoint()) == state
    assert [e for s in recorder.snapshots for e in s.new_history] == agent.state["history"]
    assert [e for s in recorder.snapshots for e in s.events] == recorder.events
