"""How a call starts, the one way for a run held in this process and a stored one alike.

A read-only call nobody was asked about just runs. Any other call starts only through a `Ledger`:
before its first start a call held to its preview has the preview taken again (a world changed
since its approvers saw it voids the approval), then the ledger records the start under the call's
key, once, and its answer says whether the call runs now or what came of it instead (`start_call`).
The runner's ledger is the store's (`ledger_ports.StoredLedger`); an agent held in this process
keeps its own (`InProcessLedger`), which answers a key started twice as the store's would: a call
that left no outcome is unknown, one that ran is its result, and neither runs again.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast

from signoff.runtime.call_outcomes import through_ledger
from signoff.runtime.frozen import thawed
from signoff.runtime.loop import RunTool
from signoff.runtime.records import ExecutionStart, Existing, Fresh, NotDispatchable, Restart, Ungranted
from signoff.runtime.schema import Status
from signoff.runtime.tool_calls import (
    Executor,
    Failed,
    NotGranted,
    Outcome,
    PreviewChanged,
    Ran,
    Refused,
    Unknown,
    call_tool,
    take_preview,
)
from signoff.tools.base import Tool

__all__ = ["InProcessLedger", "Ledger", "holds_to_preview", "preview_changed", "restart_for", "start_call"]


class Ledger(Protocol):
    """Where the calls that start through the execution ledger are recorded, once per key."""

    def started(self, key: str) -> bool:
        """Whether the call under `key` started before (with an outcome or without)."""

    def begin(self, action: RunTool) -> ExecutionStart:
        """Record that `action`'s call starts now, or say why it may not, or what came of it before."""

    def ran(self, key: str) -> None:
        """The call begun under `key` returned; its outcome is recorded with the step that follows."""


def start_call(action: RunTool, ledger: Ledger, executor: Executor, clock: Callable[[], float]) -> Outcome:
    """Start `action`'s call, through `ledger` unless it is a read nobody was asked about, and say
    what came of it (a tool's failure is an outcome, never raised)."""
    call, tool = action.call, action.tool
    # A copy: a tool that consumes its arguments must not rewrite the history or the fingerprint.
    if not through_ledger(tool, call):
        return call_tool(tool, thawed(call.args), call.key, executor, clock)
    if holds_to_preview(action) and not ledger.started(call.key):
        changed = preview_changed(action)
        if changed is not None:
            return changed
    settled = settled_without_running(ledger.begin(action), action)
    if settled is not None:
        return settled
    outcome = call_tool(tool, thawed(call.args), call.key, executor, clock)
    ledger.ran(call.key)
    return outcome


def settled_without_running(started: ExecutionStart, action: RunTool) -> Outcome | None:
    """What the ledger's answer makes of the call when it is not to run now; None when it is."""
    tool, key = action.tool, action.call.key
    match started:
        case NotDispatchable(reason=reason, status=status):
            return Refused(reason, cast(Status, status))
        case Ungranted(reason=reason):
            return NotGranted(reason)
        case Existing(status="started"):
            return Unknown(f"{tool.name} ({key}) started earlier and recorded no outcome; "
                           "it may or may not have taken effect")
        case Existing(status="succeeded", result=result):
            return Ran(result, 0.0)
        case Existing(error=error):
            return Failed(f"ToolFailed: {error or 'failed earlier'}", 0.0)
    return None


def restart_for(tool: Tool, requested: bool) -> Restart | None:
    """Why a call that started and left no outcome may start again, if it may: a person asked to
    retry it, or running it twice changes nothing (a read-only call asked about changes nothing)."""
    if requested:
        return "requested"
    return "idempotent" if tool.idempotent or not tool.side_effect else None


def holds_to_preview(action: RunTool) -> bool:
    """Whether an approved call is held to the preview its approvers saw: its tool says
    `preview_must_match` and a person approved it (a call a rule or a grant lets run was never
    shown to anyone, and a retried one is the ledger's to settle, not a preview's)."""
    call, tool = action.call, action.tool
    return (tool.preview_must_match and call.preview is not None and not action.retry
            and action.allowed_by is None and action.granted_by is None)


def preview_changed(action: RunTool) -> PreviewChanged | None:
    """Before the first start of a call `holds_to_preview`: its preview taken again, if the world
    changed since the approvers saw it (the approval is then void), else None."""
    if not holds_to_preview(action):
        return None
    call = action.call
    now = take_preview(action.tool, thawed(call.args), call.key)
    return PreviewChanged(now) if call.preview is not None and now.digest != call.preview.digest else None


@dataclass
class _Entry:
    status: str
    attempts: int = 1
    result: Any = None
    error: str | None = None


class InProcessLedger:
    """The ledger of calls started in this process, for agents held here (share one between agents
    that drive the same run). A person's approval is in the run's own state, so there is none to
    consume: a start is refused only by its key's record. Outcomes are recorded from each step saved
    (`Checkpoint.execution`), as the store records them."""

    def __init__(self) -> None:
        self._calls: dict[str, _Entry] = {}
        self._lock = threading.Lock()

    def started(self, key: str) -> bool:
        with self._lock:
            return key in self._calls

    def begin(self, action: RunTool) -> ExecutionStart:
        key = action.call.key
        with self._lock:
            entry = self._calls.get(key)
            if entry is None:
                self._calls[key] = _Entry("started")
                return Fresh(1)
            if entry.status != "started" or restart_for(action.tool, action.retry) is None:
                return Existing(entry.status, entry.result, entry.error)
            entry.attempts += 1
            return Fresh(entry.attempts)

    def ran(self, key: str) -> None:
        """Nothing to do: the outcome comes with the step that records it (`record`)."""

    def record(self, execution: dict[str, Any]) -> None:
        """Keep the outcome a saved step recorded for its call (`Checkpoint.execution`)."""
        with self._lock:
            entry = self._calls.setdefault(execution["key"], _Entry("started"))
            entry.status = "succeeded" if execution["ok"] else "failed"
            entry.result = copy.deepcopy(execution.get("result")) if execution["ok"] else None
            entry.error = None if execution["ok"] else str(execution.get("error"))
