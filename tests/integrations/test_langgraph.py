"""The LangGraph adapter through the real `langchain` agent (`create_agent`, LangGraph underneath, its
`HumanInTheLoopMiddleware`), `langchain-openai`'s ChatOpenAI talking to a local server speaking the
Chat Completions wire format, and a real Signoff: the model proposes a refund, the graph interrupts,
Signoff's card is clicked (or not), and the graph resumes with `Command(resume=...)`."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from tests.integrations.conftest import approve, deny, required, times_asked

required("langgraph", "langgraph")
required("langchain.agents.middleware", "langgraph")
required("langchain_openai", "langgraph")

from langchain.agents import create_agent  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402

from scenarios.world import World  # noqa: E402
from signoff.client import Signoff  # noqa: E402
from signoff.integrations.langgraph import SignoffReviewer  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI, completion, tool_call  # noqa: E402

Refunds = list[dict[str, Any]]


def support_agent(reviewer: SignoffReviewer, model: FakeOpenAI, refunds: Refunds) -> Any:
    @tool
    def refund(order: str, amount: int) -> str:
        """Refund `amount` euros on `order`."""
        refunds.append({"order": order, "amount": amount})
        return f"refunded {amount} on {order}"

    chat = ChatOpenAI(model="gpt-4o", base_url=model.url, api_key="sk-test", max_retries=0)  # type: ignore[arg-type]
    return create_agent(chat, tools=[refund], middleware=reviewer.middleware(["refund"]),
                        checkpointer=InMemorySaver())


def config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


def in_background(url: str, api_key: str, model: FakeOpenAI, refunds: Refunds, thread: str,
                  timeout: float = 60) -> Future[Any]:
    """Invoke the agent, resumed by Signoff's decisions, in a thread of its own while the test clicks."""
    def main() -> Any:
        with Signoff(url, api_key) as signoff:
            reviewer = SignoffReviewer(signoff, timeout=timeout)
            question = {"messages": [{"role": "user", "content": "Please refund my order."}]}
            return reviewer.invoke(support_agent(reviewer, model, refunds), question, config(thread))

    pool = ThreadPoolExecutor(1)
    future = pool.submit(main)
    pool.shutdown(wait=False)
    return future


def tool_output(model: FakeOpenAI, call_id: str) -> str:
    """What the model was told the call returned."""
    return next(str(m["content"]) for body in model.bodies for m in body["messages"]
                if m.get("role") == "tool" and m.get("tool_call_id") == call_id)


def test_an_approved_call_runs_once_and_its_outcome_is_in_the_ledger(world: World, url: str, api_key: str,
                                                                      model: FakeOpenAI) -> None:
    model.script(completion(calls=[tool_call("refund", {"order": "B-1", "amount": 40}, "call_b1")]),
                 completion("Refunded B-1."))
    refunds: Refunds = []
    running = in_background(url, api_key, model, refunds, "t-approve")
    api_id = approve(world, "langgraph:t-approve:call_b1")
    final = running.result(timeout=120)

    assert final["messages"][-1].content == "Refunded B-1."
    assert refunds == [{"order": "B-1", "amount": 40}]
    assert tool_output(model, "call_b1") == "refunded 40 on B-1"
    [row] = world.db.store.executions(api_id)
    assert (row["status"], row["result"]) == ("succeeded", "refunded 40 on B-1")
    assert times_asked(world, "langgraph:t-approve:call_b1") == (1, 1)


def test_a_denied_call_does_not_run_and_the_model_reads_the_reason(world: World, url: str, api_key: str,
                                                                   model: FakeOpenAI) -> None:
    model.script(completion(calls=[tool_call("refund", {"order": "B-2", "amount": 900}, "call_b2")]),
                 completion("I could not refund B-2."))
    refunds: Refunds = []
    running = in_background(url, api_key, model, refunds, "t-deny")
    api_id = deny(world, "langgraph:t-deny:call_b2", "over the refund limit; send it to billing")
    final = running.result(timeout=120)

    assert final["messages"][-1].content == "I could not refund B-2."
    assert refunds == []
    told = tool_output(model, "call_b2")
    assert "denied" in told and "over the refund limit; send it to billing" in told
    assert world.db.store.executions(api_id) == []


def test_nobody_deciding_in_time_is_a_rejection(url: str, api_key: str, model: FakeOpenAI) -> None:
    model.script(completion(calls=[tool_call("refund", {"order": "B-3", "amount": 70}, "call_b3")]),
                 completion("Nobody approved the refund of B-3."))
    refunds: Refunds = []
    final = in_background(url, api_key, model, refunds, "t-timeout", timeout=1).result(timeout=120)

    assert refunds == []
    assert "nobody decided within 1 s" in tool_output(model, "call_b3")
    assert final["messages"][-1].content == "Nobody approved the refund of B-3."


def test_answering_the_same_interrupt_again_asks_once_and_the_call_runs_once(world: World, url: str,
                                                                             api_key: str,
                                                                             model: FakeOpenAI) -> None:
    model.script(completion(calls=[tool_call("refund", {"order": "B-4", "amount": 55}, "call_b4")]),
                 completion("Refunded B-4."))
    refunds: Refunds = []
    question = {"messages": [{"role": "user", "content": "Please refund B-4."}]}

    def twice() -> Any:
        with Signoff(url, api_key) as signoff:
            reviewer = SignoffReviewer(signoff, timeout=60)
            agent = support_agent(reviewer, model, refunds)
            paused = agent.invoke(question, config("t-replay"), version="v2")
            first = reviewer.resume(paused.interrupts, config("t-replay"))
            again = reviewer.resume(paused.interrupts, config("t-replay"))  # a resumer retrying after a crash
            assert again.resume == first.resume
            return agent.invoke(again, config("t-replay"), version="v2").value

    pool = ThreadPoolExecutor(1)
    running = pool.submit(twice)
    pool.shutdown(wait=False)
    api_id = approve(world, "langgraph:t-replay:call_b4")
    final = running.result(timeout=120)

    assert final["messages"][-1].content == "Refunded B-4."
    assert refunds == [{"order": "B-4", "amount": 55}]
    assert times_asked(world, "langgraph:t-replay:call_b4") == (1, 1)
    assert len(world.db.store.executions(api_id)) == 1
