"""One tool call through the gateway: asked of Signoff, waited for, started once, forwarded upstream
with the arguments as approved, and reported. Every way a call can end is a tool result (`isError`
for all but the upstream's own answer); nothing raises to the client.

Fails closed: when Signoff cannot be asked, or stops answering before the call started, nothing is
run, reads included. A side effect whose server hung or went away mid-call has an unknown outcome:
it is left started without one, so Signoff asks a person whether it took effect.

An approval holds for the tool as it was when the call was asked: a server that changes the tool's
schema or annotations (its contract, as Signoff's runs compare it) while the call waits voids it,
and the call is not run.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types

from signoff.bot.gateway.catalog import Catalog, GatewayTool
from signoff.client import AsyncApproval, AsyncSignoff, Conflict, SignoffError, decider_words
from signoff.tools.base import contract_change
from signoff.tools.mcp.connection import (
    CallOutcome,
    ConnectionLost,
    ServerConnection,
    ServerRefused,
    ServerUnavailable,
)
from signoff.tools.mcp.results import error_text, shaped

log = logging.getLogger("signoff.gateway")

PROGRESS_EVERY_S = 5.0
"""How often a waiting call tells the client it is still waiting (when it sent a progress token)."""
REPORT_MARGIN_S = 30.0
"""Added to a tool's time limit for the approval's `timeout`: past it, a person is asked what came of
a call whose outcome never arrived (the gateway died, or the upstream hung)."""
MAX_REPORTED_CHARS = 64_000
"""A result reported to Signoff (the audit, the card's thread) is cut here."""
MAX_FORWARDED_CHARS = 400_000
"""What the client gets of a result is cut here (about 100,000 tokens): a server's answer is not
allowed to flood a model's context, nor a client's memory."""

Progress = Callable[[float, str], Awaitable[None]]
"""`(seconds waited, message)`: a progress notification to the client, when it asked for them."""


@dataclass(frozen=True)
class Call:
    """One `tools/call` as the client made it."""

    tool: GatewayTool
    args: dict[str, Any]
    key: str
    """The idempotency key: the client's session and the JSON-RPC request id."""
    reason: str


class Gateway:
    """Forwards calls to the catalog's servers, each as Signoff decides it."""

    def __init__(self, catalog: Catalog, signoff: AsyncSignoff) -> None:
        self.catalog = catalog
        self.signoff = signoff

    async def call(self, call: Call, progress: Progress) -> types.CallToolResult:
        """The call's result: the upstream's answer once Signoff let it run, else why not."""
        try:
            args = _validated(call)
        except ValueError as exc:
            return refusal(f"Not asked and not run: {exc}")
        try:
            approval = await self._waited(await self._ask(call, args), progress)
        except SignoffError as exc:
            return refusal(f"Not run: Signoff could not be asked ({exc.message}); the gateway fails closed.")
        if approval.status != "approved" and not approval.started_here:
            return refusal(not_approved(approval))
        # Approved at once, it was started with the ask (no time for the tool to change meanwhile).
        changed = None if approval.started_here else contract_change(
            call.tool.name, call.tool.tool.contract, self.catalog.tool_now(call.tool.name))
        if changed is not None:
            return refusal(f"Not run: {changed}, so approval {approval.id} no longer holds; it is left to "
                           "expire unused. List the tools again and call it as it is now to ask again.")
        # Once started, the call runs and is reported even if the client goes away meanwhile.
        with anyio.CancelScope(shield=True):
            result = await self._run(call, approval)
        return result

    async def _ask(self, call: Call, args: dict[str, Any]) -> AsyncApproval:
        gate = call.tool.gate
        # The contract is in the reason (shown on the card): the request, and so its idempotency key,
        # is bound to the tool as it was, and a retry after the tool changed is refused as another request.
        reason = f"{call.reason} (tool contract {call.tool.tool.contract})"
        return await self.signoff.request(call.tool.name, args, key=call.key, reason=reason,
                                          description=call.tool.tool.description[:2000],
                                          side_effect=gate.side_effect, timeout=gate.timeout_s + REPORT_MARGIN_S,
                                          start=True)

    async def _waited(self, approval: AsyncApproval, progress: Progress) -> AsyncApproval:
        started = time.monotonic()
        while not approval.decided:
            await progress(time.monotonic() - started,
                           f"waiting for a person to decide in Slack (approval {approval.id})")
            await approval.wait(PROGRESS_EVERY_S)
        return approval

    async def _run(self, call: Call, approval: AsyncApproval) -> types.CallToolResult:
        try:
            args = await approval.start()
        except Conflict as exc:
            return refusal(f"Not run again: an earlier attempt of this request started it "
                           f"(approval {approval.id} is {exc.approval_status}).")
        except SignoffError as exc:
            return refusal(f"Not run: Signoff did not confirm the start ({exc.message}).")
        connection = self.catalog.servers.connection(call.tool.server)
        started = time.monotonic()
        try:
            outcome = await anyio.to_thread.run_sync(_forward, connection, call.tool, args, approval.key or call.key)
        except (TimeoutError, ConnectionLost) as exc:
            return await self._cut(call, approval, f"{exc}", time.monotonic() - started)
        except (ServerUnavailable, ServerRefused) as exc:
            why = f"server {call.tool.server}: {exc}"
            await _report(approval.failed(why))
            return refusal(f"Failed: {why} (approval {approval.id}).")
        if outcome.is_error:
            await _report(approval.failed(error_text(outcome.blocks)))
        else:
            await _report(approval.succeeded(_reported(shaped(outcome.structured, outcome.blocks))))
        return _forwarded(outcome, call.tool)

    async def _cut(self, call: Call, approval: AsyncApproval, why: str, seconds: float) -> types.CallToolResult:
        """A call its server did not answer: a read failed; a side effect's outcome is unknown."""
        words = f"server {call.tool.server} gave no answer after {seconds:.0f} s ({why})"
        if not call.tool.gate.side_effect:
            await _report(approval.failed(words))
            return refusal(f"Failed: {words} (approval {approval.id}).")
        return refusal(f"Outcome unknown: {words}; it may or may not have taken effect. Nothing will run it "
                       f"again; a person is asked in Slack whether it did (approval {approval.id}).")


def _validated(call: Call) -> dict[str, Any]:
    schema = call.tool.tool.args_schema
    assert schema is not None, "an MCP tool always has its server's schema"
    return schema.validate(call.args)


def _forward(connection: ServerConnection | None, tool: GatewayTool, args: dict[str, Any], key: str) -> CallOutcome:
    if connection is None:
        raise ServerUnavailable("it is not running")
    return connection.call(tool.upstream, args, key, tool.gate.timeout_s)


def _forwarded(outcome: CallOutcome, tool: GatewayTool) -> types.CallToolResult:
    """The upstream's answer as it gave it, cut at `MAX_FORWARDED_CHARS` (saying so) when larger.
    A cut answer has no structured content; for a tool that promises some (an output schema), it is
    an error result, as the client would refuse a success without it."""
    blocks, structured, is_error = outcome.blocks, outcome.structured, outcome.is_error
    size = sum(len(json.dumps(block)) for block in blocks) + len(json.dumps(structured, default=str))
    if size > MAX_FORWARDED_CHARS:
        promised = tool.listed.output_schema is not None
        blocks, structured, is_error = _bounded(blocks, MAX_FORWARDED_CHARS), None, is_error or promised
        blocks.append({"type": "text", "text": (
            f"[cut by Signoff: the server answered {size} characters; at most the first {MAX_FORWARDED_CHARS} are "
            "above" + (", and not its structured content, so this is an error result" if promised else "") + "]")})
    return types.CallToolResult.model_validate({"content": blocks, "structuredContent": structured,
                                                "isError": is_error})


def _bounded(blocks: list[dict[str, Any]], budget: int) -> list[dict[str, Any]]:
    """The blocks that fit in `budget` characters, in order; a text block that does not fit is cut,
    any other is left out."""
    kept: list[dict[str, Any]] = []
    for block in blocks:
        size = len(json.dumps(block))
        if size <= budget:
            kept.append(block)
            budget -= size
        elif block.get("type") == "text" and budget > 0:
            kept.append({"type": "text", "text": str(block.get("text", ""))[:budget]})
            budget = 0
    return kept


def not_approved(approval: AsyncApproval) -> str:
    """Why a call was not run, for the model: who decided and why, or what ran before."""
    status = approval.status
    if status in ("started", "succeeded", "failed"):
        return (f"Not run again: this request (the same session and request id) was run already; "
                f"approval {approval.id} is {status}.")
    words = f"Not run: Signoff {status} it"
    if approval.decided_by:
        words += f" ({decider_words(approval.decided_by)})"
    if approval.reason:
        words += f": {approval.reason}"
    return f"{words} (approval {approval.id})."


def refusal(text: str) -> types.CallToolResult:
    """A tool error result: the model reads `text`."""
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


def _reported(result: Any) -> Any:
    text = json.dumps(result, default=str)
    if len(text) <= MAX_REPORTED_CHARS:
        return result
    return {"cut": f"{len(text)} characters; the first {MAX_REPORTED_CHARS} follow", "head": text[:MAX_REPORTED_CHARS]}


async def _report(sending: Awaitable[object]) -> None:
    """An outcome to Signoff. The call has run: when the report does not arrive, the approval stays
    started and a person is asked after its `timeout`, so the error is logged, not raised."""
    try:
        await sending
    except SignoffError as exc:
        log.warning("could not report an outcome to Signoff: %s", exc)
