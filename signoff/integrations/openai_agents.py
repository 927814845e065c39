"""Signoff as the approver of an OpenAI Agents SDK run's tool calls (the extra `openai-agents`).

    approvals = SignoffApprovals(AsyncSignoff(url, api_key), timeout=600)

    @approvals.tool
    def refund(order: str, amount: int) -> str: ...

    agent = Agent(name="support", instructions="...", tools=[refund])
    result = await approvals.run(agent, "Refund order A-17", thread="ticket-4711")

A gated tool has `needs_approval=True`, so the SDK stops the run with `result.interruptions`.
`resolve` asks Signoff about each (the idempotency key is the thread and the model's call id),
waits for the decision and records it on the run's own `RunState`: `state.approve(item)`, or
`state.reject(item, rejection_message=...)` with Signoff's reason, which is what the model reads.
Nobody deciding in time is a rejection. The run resumes with `Runner.run(agent, state)`; when the
SDK invokes an approved call, the tool consumes the approval (`start`) right before it runs, with
the arguments as approved (an approver's edit is what runs), and reports how it went.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, overload

from agents import Agent, FunctionTool, RunConfig, Runner, RunResult, RunState, function_tool
from agents.tool_context import ToolContext

from signoff.client import AsyncApproval, AsyncSignoff, SignoffError
from signoff.integrations.calls import call_key, call_reason, edited, not_run, refusal

__all__ = ["FRAMEWORK", "SignoffApprovals"]

FRAMEWORK = "openai-agents"
"""The first part of every idempotency key this adapter makes."""

ToolFunction = Callable[..., Any]
log = logging.getLogger(__name__)


class SignoffApprovals:
    """Gate an agent's tools on Signoff and answer the run's interruptions with Signoff's decisions.

    `timeout` is how long `resolve` waits for a person, in seconds; then the call is rejected (fail
    closed). The thread of a run is its `RunConfig.group_id` (`run` sets it): with the model's call
    id it makes the idempotency key, so resolving the same interruption again asks nothing new.
    """

    def __init__(self, signoff: AsyncSignoff, *, timeout: float = 600.0) -> None:
        self.signoff = signoff
        self.timeout = timeout

    @overload
    def tool(self, func: ToolFunction, /, **options: Any) -> FunctionTool: ...

    @overload
    def tool(self, func: None = None, /, **options: Any) -> Callable[[ToolFunction], FunctionTool]: ...

    def tool(self, func: ToolFunction | None = None, /,
             **options: Any) -> FunctionTool | Callable[[ToolFunction], FunctionTool]:
        """`function_tool`, gated on Signoff: `@approvals.tool` or `@approvals.tool(name_override=...)`.

        Other `function_tool` options pass through, but not `needs_approval` (always true) nor
        `failure_error_function` (a failure is reported to Signoff, then told to the model).
        """
        for reserved in ("needs_approval", "failure_error_function"):
            if reserved in options:
                raise TypeError(f"{reserved} is set by Signoff for a gated tool")

        def gate(fn: ToolFunction) -> FunctionTool:
            inner = function_tool(fn, needs_approval=True, failure_error_function=None, **options)
            return dataclasses.replace(inner, on_invoke_tool=self._invoker(inner))

        return gate(func) if func is not None else gate

    async def resolve(self, state: RunState[Any, Any], thread: str) -> None:
        """Answer each of the run's pending interruptions with Signoff's decision, on `state`."""
        for item in state.get_interruptions():
            approval = await self._ask(str(item.tool_name), _arguments(item.arguments), thread, item.call_id)
            await approval.wait(self.timeout)
            if approval.approved:
                state.approve(item)
            else:
                state.reject(item, rejection_message=refusal(approval, self.timeout))

    async def run(self, agent: Agent[Any], input: str | list[Any], *, thread: str,
                  run_config: RunConfig | None = None, **runner: Any) -> RunResult:
        """`Runner.run(agent, input)`, with every interruption resolved by Signoff until the run ends.

        `thread` is the conversation's id (it becomes `RunConfig.group_id`); other keyword
        arguments (`context`, `max_turns`, ...) go to each `Runner.run`.
        """
        config = dataclasses.replace(run_config or RunConfig(), group_id=thread)
        result = await Runner.run(agent, input, run_config=config, **runner)
        while result.interruptions:
            state = result.to_state()
            await self.resolve(state, thread)
            result = await Runner.run(agent, state, run_config=config, **runner)
        return result

    async def _ask(self, tool: str, args: dict[str, Any], thread: str | None, call_id: str | None) -> AsyncApproval:
        """Signoff's approval of one call; the same content on both sides, so the same approval."""
        key = call_key(FRAMEWORK, thread or "", call_id or "")
        return await self.signoff.request(tool, args, key=key, reason=call_reason(FRAMEWORK, tool, thread or ""))

    def _invoker(self, inner: FunctionTool) -> Callable[[ToolContext[Any], str], Any]:
        async def invoke(ctx: ToolContext[Any], input: str) -> Any:
            thread = ctx.run_config.group_id if ctx.run_config is not None else None
            try:
                approval = await self._ask(ctx.tool_name, _arguments(ctx.tool_arguments), thread, ctx.tool_call_id)
                args = await approval.start()
            except ValueError as exc:  # no thread: the run did not come through `run`
                return f"Signoff: not run: {exc}"
            except SignoffError as exc:  # started before, not approved, or Signoff unreachable
                return not_run(exc.approval_status or exc.code)
            return await _run_and_report(inner, ctx, approval, args)

        return invoke


async def _run_and_report(inner: FunctionTool, ctx: ToolContext[Any], approval: AsyncApproval,
                          args: dict[str, Any]) -> Any:
    """Run the started call with the approved arguments and report its outcome to Signoff."""
    try:
        result = await inner.on_invoke_tool(ctx, json.dumps(args))
    except Exception as exc:  # the tool's own failure: recorded, then told to the model as the SDK would
        await _report(approval.failed(exc), approval)
        return f"The tool failed: {type(exc).__name__}: {exc}"
    await _report(approval.succeeded(result), approval)
    if edited(_arguments(ctx.tool_arguments), args):
        return f"(An approver edited the arguments; it ran with {json.dumps(args)}.) {result}"
    return result


async def _report(sending: Awaitable[AsyncApproval], approval: AsyncApproval) -> None:
    # The call has run: a failure to record its outcome must not turn into a second run or hide the
    # result; Signoff shows a started call without an outcome to a person.
    try:
        await sending
    except SignoffError as exc:
        log.warning("could not report the outcome of approval %s: %s", approval.id, exc)


def _arguments(raw: str | None) -> dict[str, Any]:
    """The model's arguments as an object (an empty one when it sent none)."""
    parsed = json.loads(raw) if raw else {}
    if not isinstance(parsed, dict):
        raise ValueError(f"tool arguments must be a JSON object, not {raw!r}")
    return parsed
