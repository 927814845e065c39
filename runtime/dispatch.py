"""Running one call: through the executor, and what its outcome does to the run (the result or
error the model sees, the usage, the side effect's fingerprint and ledger outcome). Pure."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from signoff.runtime.decisions import jsonable
from signoff.runtime.errors import DispatchRefused, OutcomeUnknown
from signoff.runtime.frozen import thawed
from signoff.runtime.keeper import StateKeeper
from signoff.runtime.schema import (
    ErrorKind,
    Fingerprint,
    PendingCall,
    Status,
    ToolCall,
    ToolError,
    ToolResult,
)
from signoff.runtime.state import call_fingerprint, redact, secret_names
from signoff.runtime.tool_calls import ToolTimeout
from signoff.tools.base import Tool

Executor = Callable[[Tool, dict[str, Any], str], Any]
"""(tool, validated args, idempotency key) -> result; raises what the tool raises, or a DispatchError."""


class Dispatcher(StateKeeper):
    """Dispatches validated calls to `tools` through `executor` and records their outcomes."""

    tools: dict[str, Tool]
    executor: Executor
    redact_keys: frozenset[str]

    def _dispatch(self, call: PendingCall, retry: bool = False) -> None:
        """Run one call through the executor and record what came of it."""
        tool = self.tools.get(call.tool)
        if tool is None:
            self._refuse(call, "failed", f"tool {call.tool} is no longer registered; nothing was executed")
            return
        started = self.clock()
        try:
            # A copy: a tool that consumes its arguments must not rewrite the history or the fingerprint.
            value = self.executor(tool, thawed(call.args), call.key)
        except DispatchRefused as exc:
            self._refuse(call, cast(Status, exc.status), f"not executed: {exc.reason}")
            return
        except OutcomeUnknown as exc:
            self._needs_reconciliation(call, str(exc))
            return
        except ToolTimeout as exc:
            if tool.side_effect:
                self._needs_reconciliation(call, f"timed out: {exc}; it may or may not have taken effect")
                return
            # It was called, so it counts towards max_tool_calls like any other failure.
            self._record_execution(call, ok=False, value=f"timeout: {exc}", seconds=self.clock() - started)
            self._observe(call, error=f"timeout: {exc}", kind="timeout")
            return
        except Exception as exc:  # the tool's failure is the model's to handle, not ours
            self._record_execution(call, ok=False, value=f"{type(exc).__name__}: {exc}",
                                   seconds=self.clock() - started)
            self._observe(call, error=f"{type(exc).__name__}: {exc}", kind="exception")
            return
        value = jsonable(value)
        self._record_execution(call, ok=True, value=value, seconds=self.clock() - started, retried=retry)
        self._observe(call, result=value)

    def _record_execution(self, call: PendingCall, ok: bool, value: Any, seconds: float, **extra: Any) -> None:
        tool = self.tools.get(call.tool)
        usage = self._run.usage
        self._evolve(usage=usage.model_copy(update={"tool_calls": usage.tool_calls + 1}))
        side_effect = bool(tool and tool.side_effect)
        self._emit("tool_executed" if ok else "tool_failed", tool=call.tool, key=call.key,
                   seconds=round(seconds, 6), side_effect=side_effect, **extra,
                   **({"error": value} if not ok else {}))
        if side_effect:
            self._settle(call, "executed" if ok else "attempted")
            self._evolve(pending=None)
            self._step.execution = {"key": call.key, "tool": call.tool, "ok": ok,
                                    "result" if ok else "error": value, "seconds": round(seconds, 6)}

    def _settle(self, call: PendingCall, outcome: str) -> None:
        """Remember what became of a side-effecting call, so that an identical one is refused."""
        settled = Fingerprint.model_validate({"outcome": outcome, "key": call.key})
        self._evolve(fingerprints={**self._run.fingerprints, call_fingerprint(call.tool, call.args): settled})

    def _refuse(self, call: PendingCall, status: Status, reason: str) -> None:
        """Stop without running `call`: it is settled (nothing stays pending) and the model is told why."""
        self._observe(call, error=reason, kind="refused")
        if self._run.pending is call:
            self._evolve(pending=None)
        self._stop(status, reason=reason)

    def _needs_reconciliation(self, call: PendingCall, reason: str) -> None:
        self._evolve(pending=call)
        self._stop("needs_reconciliation", reason=reason, key=call.key, tool=call.tool)

    def _observe(self, call: ToolCall | PendingCall, *, result: Any = None, error: str | None = None,
                 kind: ErrorKind | None = None) -> None:
        if error is None:
            self._append(ToolResult(role="tool", step=call.step, tool=call.tool, call_id=call.call_id, result=result))
        else:
            self._append(ToolError(role="tool", step=call.step, tool=call.tool, call_id=call.call_id, error=error,
                                   error_kind=kind))

    def _redacted(self, tool_name: str, args: Any) -> Any:
        return redact(args, secret_names(self.tools.get(tool_name), configured=self.redact_keys))
