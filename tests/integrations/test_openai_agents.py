"""The OpenAI Agents SDK adapter through the real `openai-agents` package, its OpenAI client talking to
a local server speaking the Chat Completions wire format, and a real Signoff: the model proposes a
refund, the run stops on the tool's `needs_approval`, Signoff's card is clicked (or not), and the run
resumes through the SDK's own `RunState`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from tests.integrations.conftest import approve, deny, required, times_asked

required("agents", "openai-agents")

from agents import Agent, OpenAIChatCompletionsModel, RunConfig, Runner, RunResult, RunState  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402

from scenarios.world import World  # noqa: E402
from signoff.client import AsyncSignoff  # noqa: E402
from signoff.integrations.openai_agents import SignoffApprovals  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI, completion, tool_call  # noqa: E402

Refunds = list[dict[str, Any]]


def support_agent(approvals: SignoffApprovals, client: AsyncOpenAI, refunds: Refunds) -> Agent[Any]:
    @approvals.tool
    def refund(order: str, amount: int) -> str:
        """Refund `amount` euros on `order`."""
        refunds.append({"order": order, "amount": amount})
        return f"refunded {amount} on {order}"

    return Agent(name="support", instructions="Refund orders when asked.", tools=[refund],
                 model=OpenAIChatCompletionsModel(model="gpt-4o", openai_client=client))


Scene = Callable[[SignoffApprovals, Agent[Any]], Coroutine[Any, Any, Any]]


def in_background(url: str, api_key: str, model: FakeOpenAI, refunds: Refunds, scene: Scene,
                  timeout: float = 60) -> Future[Any]:
    """Run `scene` (an agent run waiting on Signoff) in a thread of its own, while the test clicks."""
    async def main() -> Any:
        async with AsyncSignoff(url, api_key) as signoff, AsyncOpenAI(base_url=model.url, api_key="sk-test") as client:
            approvals = SignoffApprovals(signoff, timeout=timeout)
            return await scene(approvals, support_agent(approvals, client, refunds))

    pool = ThreadPoolExecutor(1)
    future = pool.submit(asyncio.run, main())
    pool.shutdown(wait=False)
    return future


def run_in(thread: str) -> Scene:
    async def scene(approvals: SignoffApprovals, agent: Agent[Any]) -> RunResult:
        return await approvals.run(agent, "Please refund my order.", thread=thread,
                                   run_config=RunConfig(tracing_disabled=True))
    return scene


def tool_output(model: FakeOpenAI, call_id: str) -> str:
    """What the model was told the call returned, in the request after it."""
    return next(str(m["content"]) for body in model.bodies for m in body["messages"]
                if m.get("role") == "tool" and m.get("tool_call_id") == call_id)


def test_an_approved_call_runs_once_and_its_outcome_is_in_the_ledger(world: World, url: str, api_key: str,
                                                                      model: FakeOpenAI) -> None:
    model.script(completion(calls=[tool_call("refund", {"order": "A-1", "amount": 40}, "call_a1")]),
                 completion("Refunded A-1."))
    refunds: Refunds = []
    running = in_background(url, api_key, model, refunds, run_in("t-approve"))
    api_id = approve(world, "openai-agents:t-approve:call_a1")
    result = running.result(timeout=120)

    assert result.final_output == "Refunded A-1."
    assert refunds == [{"order": "A-1", "amount": 40}]
    assert tool_output(model, "call_a1") == "refunded 40 on A-1"
    [row] = world.db.store.executions(api_id)
    assert (row["status"], row["result"]) == ("succeeded", "refunded 40 on A-1")
    assert times_asked(world, "openai-agents:t-approve:call_a1") == (1, 1)


def test_a_denied_call_does_not_run_and_the_model_reads_the_reason(world: World, url: str, api_key: str,
                                                                   model: FakeOpenAI) -> None:
    model.script(completion(calls=[tool_call("refund", {"order": "A-2", "amount": 900}, "call_a2")]),
                 completion("I could not refund A-2."))
    refunds: Refunds = []
    running = in_background(url, api_key, model, refunds, run_in("t-deny"))
    api_id = deny(world, "openai-agents:t-deny:call_a2", "over the refund limit; send it to billing")
    result = running.result(timeout=120)

    assert result.final_output == "I could not refund A-2."
    assert refunds == []
    told = tool_output(model, "call_a2")
    assert "denied" in told and "over the refund limit; send it to billing" in told
    assert world.db.store.executions(api_id) == []


def test_nobody_deciding_in_time_is_a_rejection(url: str, api_key: str, model: FakeOpenAI) -> None:
    model.script(completion(calls=[tool_call("refund", {"order": "A-3", "amount": 70}, "call_a3")]),
                 completion("Nobody approved the refund of A-3."))
    refunds: Refunds = []
    result = in_background(url, api_key, model, refunds, run_in("t-timeout"), timeout=1).result(timeout=120)

    assert refunds == []
    assert "nobody decided within 1 s" in tool_output(model, "call_a3")
    assert result.final_output == "Nobody approved the refund of A-3."


def test_resuming_the_same_interruption_again_asks_once_and_runs_once(world: World, url: str, api_key: str,
                                                                       model: FakeOpenAI) -> None:
    model.script(completion(calls=[tool_call("refund", {"order": "A-4", "amount": 55}, "call_a4")]),
                 completion("Refunded A-4."), completion("A-4 was refunded before."))
    config = RunConfig(group_id="t-replay", tracing_disabled=True)

    async def twice(approvals: SignoffApprovals, agent: Agent[Any]) -> tuple[RunResult, RunResult]:
        paused = await Runner.run(agent, "Please refund A-4.", run_config=config)
        saved = paused.to_state().to_string()  # as a run kept in a database would be
        state = paused.to_state()
        await approvals.resolve(state, "t-replay")
        first = await Runner.run(agent, state, run_config=config)
        again = await RunState.from_string(agent, saved)
        await approvals.resolve(again, "t-replay")
        return first, await Runner.run(agent, again, run_config=config)

    refunds: Refunds = []
    running = in_background(url, api_key, model, refunds, twice)
    api_id = approve(world, "openai-agents:t-replay:call_a4")
    first, replayed = running.result(timeout=120)

    assert (first.final_output, replayed.final_output) == ("Refunded A-4.", "A-4 was refunded before.")
    assert refunds == [{"order": "A-4", "amount": 55}]
    assert times_asked(world, "openai-agents:t-replay:call_a4") == (1, 1)
    assert len(world.db.store.executions(api_id)) == 1
    told = [str(m["content"]) for m in model.bodies[2]["messages"] if m.get("role") == "tool"]
    assert told and "has run already (succeeded)" in told[-1]
