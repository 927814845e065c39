"""Signoff as the reviewer of a LangChain agent's tool calls, on LangGraph (the extra `langgraph`).

    reviewer = SignoffReviewer(Signoff(url, api_key), timeout=600)
    agent = create_agent(ChatOpenAI(model="gpt-4o"), tools=[refund],
                         middleware=reviewer.middleware(["refund"]), checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "ticket-4711"}}
    result = reviewer.invoke(agent, {"messages": [{"role": "user", "content": "Refund A-17"}]}, config)

`middleware` is LangChain's own `HumanInTheLoopMiddleware` (per-call mode: one `interrupt` per gated
tool call, carrying the model's call id) followed by `SignoffLedger`. `resume` answers each
interrupt with Signoff's decision, as the `Command(resume={interrupt.id: decision})` the middleware
reads: approve; edit (the approver changed the arguments: the edited call runs); reject with
Signoff's reason, which the model reads; nobody deciding in time is a rejection. The idempotency key
is the graph's `thread_id` and the model's call id. When the tool runs, `SignoffLedger` consumes the
approval (`start`) right before, with the arguments as approved, and reports the outcome; a call
whose approval was started before is not run again.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware, HumanInTheLoopMiddleware
from langchain.agents.middleware.human_in_the_loop import Decision
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command, Interrupt

from signoff.client import Approval, Signoff, SignoffError
from signoff.integrations.calls import call_key, call_reason, edited, not_run, refusal

__all__ = ["FRAMEWORK", "SignoffLedger", "SignoffReviewer"]

FRAMEWORK = "langgraph"
"""The first part of every idempotency key this adapter makes."""
TOOL_APPROVAL = "tool_approval"
"""The `type` of the interrupt value `HumanInTheLoopMiddleware` raises per gated call."""

log = logging.getLogger(__name__)
ToolHandler = Callable[[ToolCallRequest], ToolMessage | Command[Any]]


class SignoffReviewer:
    """Answers a LangGraph agent's tool-call interrupts with Signoff's decisions.

    `timeout` is how long `resume` waits for a person, in seconds; then the call is rejected.
    """

    def __init__(self, signoff: Signoff, *, timeout: float = 600.0) -> None:
        self.signoff = signoff
        self.timeout = timeout

    def middleware(self, tools: Iterable[str]) -> list[AgentMiddleware[Any, Any, Any]]:
        """The agent's middleware gating `tools` on Signoff: LangChain's human-in-the-loop, then the ledger."""
        names = frozenset(tools)
        review = HumanInTheLoopMiddleware[Any, Any, Any](
            {name: {"allowed_decisions": ["approve", "edit", "reject"]} for name in names},
            interrupt_mode="per_call")
        return [review, SignoffLedger(self, names)]

    def decide(self, request: Mapping[str, Any], thread: str) -> Decision:
        """Signoff's decision on one `tool_approval` interrupt value, in the middleware's format."""
        asked = dict(request["args"])
        approval = self.ask(str(request["name"]), asked, thread, str(request["tool_call_id"]))
        approval.wait(self.timeout)
        if not approval.approved:
            return {"type": "reject", "message": refusal(approval, self.timeout)}
        if edited(asked, approval.args):
            return {"type": "edit", "edited_action": {"name": str(request["name"]), "args": approval.args}}
        return {"type": "approve"}

    def resume(self, interrupts: Sequence[Interrupt], config: RunnableConfig) -> Command[Any]:
        """The `Command(resume=...)` answering every tool-approval interrupt of the thread in `config`."""
        thread = _thread(config)
        answers = {i.id: self.decide(i.value, thread) for i in interrupts if _is_tool_approval(i.value)}
        if not answers:
            raise ValueError("none of the interrupts is a tool approval of HumanInTheLoopMiddleware (per_call)")
        return Command(resume=answers)

    def invoke(self, graph: Any, input: Any, config: RunnableConfig) -> Any:
        """`graph.invoke(input, config)`, resumed with Signoff's decisions until no approval is pending.

        Returns the graph's final value."""
        result = graph.invoke(input, config, version="v2")
        while result.interrupts:
            result = graph.invoke(self.resume(result.interrupts, config), config, version="v2")
        return result.value

    def ask(self, tool: str, args: dict[str, Any], thread: str, call_id: str) -> Approval:
        """Signoff's approval of one call: both sides ask with the same content, so get the same one."""
        key = call_key(FRAMEWORK, thread, call_id)
        return self.signoff.request(tool, args, key=key, reason=call_reason(FRAMEWORK, tool, thread))


class SignoffLedger(AgentMiddleware[Any, Any, Any]):
    """Runs each approved call of `tools` exactly once: starts its approval, runs it with the
    approved arguments, reports the outcome. Goes after `HumanInTheLoopMiddleware` (inside it)."""

    def __init__(self, reviewer: SignoffReviewer, tools: frozenset[str]) -> None:
        super().__init__()
        self.reviewer = reviewer
        self.gated = tools

    def wrap_tool_call(self, request: ToolCallRequest, handler: ToolHandler) -> ToolMessage | Command[Any]:
        """Start the call's approval, run the call, and report how it went."""
        call = request.tool_call
        if call["name"] not in self.gated:
            return handler(request)
        call_id = str(call["id"])
        try:
            asked = _model_args(request.state, call_id) or dict(call["args"])
            approval = self.reviewer.ask(call["name"], asked, _thread(request.runtime.config), call_id)
            args = approval.start()
        except SignoffError as exc:  # started before (a replay), not approved, or Signoff unreachable
            return ToolMessage(not_run(exc.approval_status or exc.code), tool_call_id=call_id, name=call["name"],
                               status="error")
        try:
            result = handler(request.override(tool_call={**call, "args": args}))
        except Exception as exc:
            _report(functools.partial(approval.failed, exc), approval)
            raise
        _report(functools.partial(_record, approval, result), approval)
        return result


def _record(approval: Approval, result: ToolMessage | Command[Any]) -> Approval:
    if isinstance(result, ToolMessage) and result.status == "error":
        return approval.failed(str(result.content))
    return approval.succeeded(result.content if isinstance(result, ToolMessage) else repr(result))


def _report(send: Callable[[], object], approval: Approval) -> None:
    # The call has run: a failure to record its outcome must not run it again nor hide its result;
    # Signoff shows a started call without an outcome to a person.
    try:
        send()
    except SignoffError as exc:
        log.warning("could not report the outcome of approval %s: %s", approval.id, exc)


def _model_args(state: Any, call_id: str) -> dict[str, Any] | None:
    """The arguments the model proposed for `call_id` (the middleware keeps them in its message)."""
    messages = state.get("messages", []) if isinstance(state, Mapping) else []
    for message in reversed(messages):
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                if call.get("id") == call_id:
                    return dict(call["args"])
    return None


def _thread(config: RunnableConfig | None) -> str:
    thread = ((config or {}).get("configurable") or {}).get("thread_id")
    if not thread:
        raise ValueError("the graph's config has no configurable.thread_id: Signoff's keys need one")
    return str(thread)


def _is_tool_approval(value: Any) -> bool:
    return isinstance(value, Mapping) and value.get("type") == TOOL_APPROVAL
