"""Calling a tool with a time limit, on threads kept for the next call, and what came of a call
as a value (`Outcome`) for the loop to record."""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from signoff.runtime.decisions import jsonable
from signoff.runtime.digests import preview_digest
from signoff.runtime.errors import DispatchRefused, OutcomeUnknown
from signoff.runtime.pending_calls import Preview
from signoff.runtime.schema import Status
from signoff.tools.base import Tool, ToolOutcomeUnknown


class ToolTimeout(Exception):
    """A tool call ran past its `timeout_s`."""


@dataclass(frozen=True)
class Ran:
    """The call returned `value` (as JSON)."""

    value: Any
    seconds: float


@dataclass(frozen=True)
class Failed:
    """The tool raised: `error` is what the model is told."""

    error: str
    seconds: float


@dataclass(frozen=True)
class TimedOut:
    """The call ran past its time limit; it may still finish in the background."""

    message: str
    seconds: float


@dataclass(frozen=True)
class Unknown:
    """The call may or may not have taken effect (it started earlier and left no outcome)."""

    reason: str


@dataclass(frozen=True)
class NotGranted:
    """The grant the call was to run under no longer covers it (revoked, expired): a person is asked."""

    reason: str


@dataclass(frozen=True)
class Refused:
    """The call was not started (no approval in force, a lost lease's window): the run stops as `status`."""

    reason: str
    status: Status


@dataclass(frozen=True)
class PreviewChanged:
    """Just before the call was to start its preview said something else than what was approved:
    nothing ran, and a person is asked afresh, shown `preview` (the world as it is now)."""

    preview: Preview


Outcome = Ran | Failed | TimedOut | Unknown | Refused | NotGranted | PreviewChanged

Executor = Callable[[Tool, dict[str, Any], str], Any]
"""(tool, validated args, idempotency key) -> result; raises what the tool raises, `DispatchRefused`
(not started) or `OutcomeUnknown` (started before, no outcome recorded)."""


def call_tool(tool: Tool, args: dict[str, Any], key: str, executor: Executor,
              clock: Callable[[], float]) -> Outcome:
    """Run one call through `executor` and say what came of it; a tool's failure is a value, never raised."""
    started = clock()
    try:
        value = executor(tool, args, key)
    except DispatchRefused as exc:
        return Refused(exc.reason, cast(Status, exc.status))
    except OutcomeUnknown as exc:
        return Unknown(str(exc))
    except ToolTimeout as exc:
        return TimedOut(str(exc), clock() - started)
    except ToolOutcomeUnknown as exc:  # e.g. the server it called died mid-call
        if tool.side_effect:
            return Unknown(f"{tool.name} ({key}): {exc}")
        return Failed(f"{type(exc).__name__}: {exc}", clock() - started)
    except Exception as exc:  # the tool's failure is the model's to handle, not ours
        return Failed(f"{type(exc).__name__}: {exc}", clock() - started)
    return Ran(jsonable(value), clock() - started)


def run_tool(tool: Tool, args: dict[str, Any], key: str) -> Any:
    """Call `tool.fn(args, key)`, abandoning it after `tool.timeout_s` seconds.

    A thread cannot be killed, so a timed-out call may still finish in the background: that is
    why a side-effecting call that timed out has an unknown outcome and is never retried blindly.
    """
    if tool.timeout_s is None:
        return tool.fn(args, key)
    call = _Call(tool, args, key)
    _TOOL_THREADS.start(call)
    if not call.finished.wait(tool.timeout_s):
        raise ToolTimeout(f"{tool.name} did not finish within {tool.timeout_s:g}s")
    if call.error is not None:
        raise call.error
    return call.result


MAX_PREVIEW_CHARS = 20_000
"""A preview longer than this (as JSON) is cut, with a marker: it is kept in the run state and
shown in full in Slack's "view full" modal, and its digest is of what is kept."""


def take_preview(tool: Tool, args: dict[str, Any], key: str) -> Preview:
    """What `tool.preview(args, key)` says the call would do, within `tool.preview_timeout_s`; a
    preview that raises or runs late is a `Preview` with its `error`, never raised."""
    assert tool.preview is not None
    call = _Call(tool, args, key, tool.preview)
    _TOOL_THREADS.start(call)
    if not call.finished.wait(tool.preview_timeout_s):
        return Preview(error=f"the preview did not finish within {tool.preview_timeout_s:g}s")
    if call.error is not None:
        return Preview(error=f"{type(call.error).__name__}: {call.error}"[:500])
    shown = jsonable(call.result)
    text = shown if isinstance(shown, str) else json.dumps(shown, ensure_ascii=False, sort_keys=True)
    if len(text) > MAX_PREVIEW_CHARS:
        shown = text[:MAX_PREVIEW_CHARS] + f"…[cut: {len(text):,} characters, {MAX_PREVIEW_CHARS:,} kept]"
    return Preview(shown=shown, digest=preview_digest(shown))


class _Call:
    """One tool call handed to a tool thread; `finished` is set once it returned or raised."""

    def __init__(self, tool: Tool, args: dict[str, Any], key: str,
                 fn: Callable[[dict[str, Any], str], Any] | None = None) -> None:
        self.tool, self.args, self.key = tool, args, key
        self.fn = fn or tool.fn
        self.finished = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.fn(self.args, self.key)
        except BaseException as exc:  # handed to the caller's thread by run_tool
            self.error = exc
        finally:
            self.finished.set()


class _ToolThreads:
    """Threads for tool calls, kept for the next call once idle: starting a thread per call costs
    more than a short tool. A call never waits for a thread (a busy or hung one is never shared),
    so a timeout always measures the tool itself.
    """

    def __init__(self, keep_idle: int = 16) -> None:
        self.keep_idle = keep_idle
        self._idle: list[queue.SimpleQueue[_Call]] = []
        self._lock = threading.Lock()

    def start(self, call: _Call) -> None:
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is None:
            inbox = queue.SimpleQueue()
            threading.Thread(target=self._serve, args=(inbox,), name="tool-call", daemon=True).start()
        inbox.put(call)

    def _serve(self, inbox: queue.SimpleQueue[_Call]) -> None:
        while True:
            call = inbox.get()
            threading.current_thread().name = f"tool-{call.tool.name}"
            call.run()
            del call  # keep no reference to the last call's arguments or result while idle
            with self._lock:
                if len(self._idle) >= self.keep_idle:
                    return
                self._idle.append(inbox)


_TOOL_THREADS = _ToolThreads()
