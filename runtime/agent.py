"""The agent loop: a policy proposes, this code validates, gates and executes.

Pure: no Slack, no SQL, no HTTP. I/O reaches the loop only through what the caller passes in:
the policy, the tools, an `executor` (how a call is dispatched), `on_event` (the audit sink)
and `on_checkpoint` (where each step's state goes). The whole state is `agent.state`, plain JSON.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from signoff.runtime.budget import Budget, exhausted_limit, usage_report
from signoff.runtime.decisions import charge_usage, jsonable, malformed, shortened
from signoff.runtime.errors import (
    DispatchRefused,
    InvalidTransition,
    ModelAuthError,
    ModelUnavailable,
    OutcomeUnknown,
)
from signoff.runtime.state import (
    DEFAULT_REDACT_KEYS,
    TERMINAL,
    call_fingerprint,
    canonical_json,
    dump_state,
    idempotency_key,
    json_copy,
    load_state,
    new_state,
    redact,
    secret_names,
)
from signoff.runtime.tool_calls import ToolTimeout, run_tool
from signoff.tools.base import Tool

Policy = Callable[[list[dict[str, Any]]], Any]
"""history -> {"tool": name, "args": {...}} | {"final": text}; may add "usage", "call_id", "text", "note"."""

Executor = Callable[[Tool, dict[str, Any], str], Any]
"""(tool, validated args, idempotency key) -> result; raises what the tool raises, or a DispatchError."""

@dataclass(frozen=True)
class Checkpoint:
    """What one step changed, handed to `on_checkpoint` before the next policy call."""

    state: dict[str, Any]
    """The live state (read it, do not keep it): everything but history is small."""
    history_start: int
    """Index in `state["history"]` of the first entry this step appended."""
    events: list[dict[str, Any]]
    execution: dict[str, Any] | None = None
    """The outcome of a side-effecting call made in this step: key, tool, ok, result or error, seconds."""

    @property
    def new_history(self) -> list[dict[str, Any]]:
        history: list[dict[str, Any]] = self.state["history"]
        return history[self.history_start :]


@dataclass
class _Step:
    events: list[dict[str, Any]] = field(default_factory=list)
    execution: dict[str, Any] | None = None


class Agent:
    """Runs a policy against tools under a budget, pausing for a human before every side effect."""

    def __init__(
        self,
        policy: Policy,
        tools: Iterable[Tool] | dict[str, Tool],
        max_steps: int = 8,
        run_id: str = "run-1",
        *,
        budget: Budget | None = None,
        executor: Executor = run_tool,
        on_event: Callable[[dict[str, Any]], None] | None = None,
        on_checkpoint: Callable[[Checkpoint], None] | None = None,
        redact_keys: Iterable[str] = DEFAULT_REDACT_KEYS,
        clock: Callable[[], float] = time.monotonic,
        stall_after: int | None = 3,
    ) -> None:
        self.policy = policy
        self.tools = _tool_map(tools)
        self.executor = executor
        self.on_event = on_event
        self.on_checkpoint = on_checkpoint
        self.redact_keys = frozenset(redact_keys)
        self.clock = clock
        if stall_after is not None and stall_after < 1:
            raise ValueError("stall_after must be a positive number of turns, or None")
        self.stall_after = stall_after
        """Turns in a row that repeat an earlier call and get its result again before the run stops
        as `stalled` (None: never)."""
        budget = budget or Budget(max_steps=max_steps)
        self.state: dict[str, Any] = new_state(run_id, budget.to_json())
        self._step = _Step()
        self._mark = 0
        self._clock_mark: float | None = None
        self._policy_copies: list[dict[str, Any]] = []
        self._outcomes_seen: set[str] | None = None
        self._catalogue: str | None = None

    # -- construction from a checkpoint ---------------------------------------------------

    @classmethod
    def resume(
        cls,
        blob: str | dict[str, Any],
        policy: Policy,
        tools: Iterable[Tool] | dict[str, Tool],
        max_steps: int | None = None,
        **options: Any,
    ) -> Agent:
        """Rebuild an agent from `checkpoint()`; it continues exactly where the original stopped.

        `max_steps` (or a `budget=` of other limits) replaces the stored limits, e.g. to extend a
        run; without it the stored budget and usage carry on.
        """
        state = load_state(blob)
        budget = options.pop("budget", None)
        agent = cls(policy, tools, run_id=state["run_id"], **options)
        agent.state = state
        agent._mark = len(state["history"])
        limits = budget.to_json() if budget is not None else {}
        if max_steps is not None:
            limits["max_steps"] = max_steps
        if limits:
            state["budget"].update(limits)
        return agent

    def checkpoint(self) -> str:
        """The whole run state as canonical JSON."""
        return dump_state(self.state)

    # -- public transitions --------------------------------------------------------------

    @property
    def status(self) -> str:
        return str(self.state["status"])

    def start(self, goal: str) -> str:
        """Record the goal and run until the run finishes, pauses or runs out of budget."""
        if self.status != "idle":
            raise InvalidTransition(f"run {self.state['run_id']} already started ({self.status})")
        if not isinstance(goal, str) or not goal.strip():
            raise ValueError("the goal must be a non-empty string")
        self.state["goal"] = goal
        self.state["history"].append({"role": "user", "content": goal})
        self.state["status"] = "running"
        self._emit("run_started", goal=goal, budget=dict(self.state["budget"]))
        self._commit()
        return self.run()

    def run(self) -> str:
        """Continue a running run; any other status is returned unchanged."""
        self._clock_mark = self.clock()
        try:
            while self.status == "running":
                self._advance()
        finally:
            self._charge_time()
            self._clock_mark = None
        return self.status

    def _charge_time(self) -> None:
        """Add the wall time spent running since the last charge; waiting for a human is never charged."""
        if self._clock_mark is not None:
            now = self.clock()
            self.state["usage"]["seconds"] = round(self.state["usage"]["seconds"] + now - self._clock_mark, 6)
            self._clock_mark = now

    def decide(self, approved: bool, note: str = "", by: str | None = None) -> str:
        """Approve or deny the pending call, then continue the run.

        Approving runs exactly the pending call, once, with its key. Denying tells the model
        `denied by human: <note>`. Raises `InvalidTransition` when nothing is pending.
        """
        pending = self.state["pending"]
        if self.status != "awaiting_approval" or pending is None:
            raise InvalidTransition(f"run {self.state['run_id']} has no pending approval ({self.status})")
        self._emit("approval_decided", key=pending["key"], tool=pending["tool"], approved=approved, by=by, note=note)
        self.state["status"] = "running"
        self._clock_mark = self.clock()  # running the approved call is running time; the wait was not
        if approved:
            self._dispatch(pending)
        else:
            reason = note.strip() or "no reason given"
            self.state["fingerprints"][call_fingerprint(pending["tool"], pending["args"])] = {
                "outcome": "denied", "key": pending["key"],
            }
            self._observe(pending, error=f"denied by human: {reason}", kind="denied")
            self.state["pending"] = None
        if self.status == "running":
            self._commit()
        return self.run()

    def reconsider(self, reason: str) -> str:
        """The pending call's tool changed since it was proposed (a deploy in between), so the
        approval given for it no longer holds: validate the call again under the tool as it is now.

        Still valid, it is asked about afresh (a new approval, same key); no longer valid, the
        model is told why and goes on; become read-only, it runs. `reason` says what changed.
        """
        pending = self.state["pending"]
        if self.status != "awaiting_approval" or pending is None:
            raise InvalidTransition(f"run {self.state['run_id']} has no pending approval ({self.status})")
        tool = self.tools.get(pending["tool"])
        self._emit("call_reconsidered", key=pending["key"], tool=pending["tool"], reason=reason,
                   was=pending.get("contract"), now=tool.contract if tool else None)
        if tool is None:
            return self._withdraw(pending, f"{reason}; tool {pending['tool']} is no longer registered",
                                  "unknown_tool")
        try:
            args = tool.validate(pending["args"])
        except ValueError as exc:
            return self._withdraw(pending, f"{reason}, and the call no longer fits it: {exc}", "invalid_args")
        if not tool.side_effect:
            self.state["status"] = "running"
            self._clock_mark = self.clock()
            self._dispatch({**pending, "args": args})
            self.state["pending"] = None
        else:
            self.state["pending"] = {**pending, "args": args, "contract": tool.contract}
            self._emit("approval_requested", key=pending["key"], tool=tool.name,
                       args=self._redacted(tool.name, args), supersedes=True, reason=reason)
        self._commit()
        return self.run()

    def _withdraw(self, pending: dict[str, Any], reason: str, kind: str) -> str:
        """Drop the pending call unexecuted and tell the model why; the run goes on."""
        self._observe(pending, error=f"not executed: {reason}", kind=kind)
        self.state["pending"] = None
        self.state["status"] = "running"
        self._commit()
        return self.run()

    def extend(self, **limits: float) -> str:
        """Raise budget limits (e.g. `max_steps=12`) and continue a run that ran out."""
        unknown = set(limits) - set(Budget.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown budget limits: {', '.join(sorted(unknown))}")
        Budget(**{**self.state["budget"], **limits})  # validates the new values
        if self.status not in ("budget_exhausted", "stalled", "running", "awaiting_approval"):
            raise InvalidTransition(f"run {self.state['run_id']} cannot be extended ({self.status})")
        self.state["budget"].update(limits)
        self._emit("budget_extended", limits=limits)
        if self.status in ("budget_exhausted", "stalled"):
            # A person looked at the loop and let it go on: its repeats so far are forgiven.
            self.state["status"] = "running"
            self.state["stop"] = None
            self.state["repeats"] = 0
        self._commit()
        return self.run()

    def retry(self) -> str:
        """Continue a run that failed (e.g. model unavailable) from where it stopped."""
        if self.status != "failed":
            raise InvalidTransition(f"run {self.state['run_id']} has not failed ({self.status})")
        self._emit("retried", previous=self.state["stop"])
        self.state["status"] = "running"
        self.state["stop"] = None
        self._commit()
        return self.run()

    def reconcile(self, action: str, result: Any = None, note: str = "", by: str | None = None) -> str:
        """Settle a call whose outcome is unknown: `done` (with the real result), `retry` or `abort`."""
        pending = self.state["pending"]
        if self.status != "needs_reconciliation" or pending is None:
            raise InvalidTransition(f"run {self.state['run_id']} is not waiting for reconciliation")
        if action not in ("done", "retry", "abort"):
            raise ValueError("action must be 'done', 'retry' or 'abort'")
        self._emit("reconciled", key=pending["key"], tool=pending["tool"], action=action, by=by, note=note)
        if action == "abort":
            return self.cancel(f"aborted during reconciliation: {note or 'no reason given'}", by=by)
        self.state["status"] = "running"
        self.state["stop"] = None
        self._clock_mark = self.clock()
        if action == "retry":
            self._dispatch(pending, retry=True)
        else:
            result = jsonable(result)
            self._record_execution(pending, ok=True, value=result, seconds=0.0, reconciled=True)
            self._observe(pending, result=result)
            self.state["pending"] = None
        if self.status == "running":
            self._commit()
        return self.run()

    def cancel(self, reason: str = "", by: str | None = None) -> str:
        """End the run as `cancelled`; a pending call is dropped unexecuted."""
        if self.status in TERMINAL:
            raise InvalidTransition(f"run {self.state['run_id']} already ended ({self.status})")
        self._stop("cancelled", reason=reason or "cancelled", by=by)
        return self.status

    def expire(self, reason: str = "approval expired") -> str:
        """End a run whose pending approval expired; nothing was executed."""
        if self.status != "awaiting_approval":
            raise InvalidTransition(f"run {self.state['run_id']} is not awaiting approval ({self.status})")
        self._stop("expired", reason=reason)
        return self.status

    # -- the loop ------------------------------------------------------------------------

    def _advance(self) -> None:
        """One policy call and what follows from it, ending in a checkpoint."""
        limit = exhausted_limit(self.state)
        if limit is not None:
            self._stop("budget_exhausted", reason=f"{limit} reached", budget=limit, limits=usage_report(self.state))
            return
        try:
            raw = self.policy(self._history_for_policy())
        except ModelAuthError as exc:
            self._stop("failed", reason="model rejected credentials", detail=str(exc))
            return
        except ModelUnavailable as exc:
            self._stop("failed", reason="model unavailable", detail=str(exc))
            return
        except Exception as exc:  # a policy bug must not take the run down with it
            self._stop("failed", reason="policy error", detail=f"{type(exc).__name__}: {exc}")
            return
        self.state["steps"] += 1
        step = self.state["steps"]
        decision, turn = self._account(raw)
        problem = malformed(decision)
        if problem:
            self.state["history"].append({"role": "assistant", "step": step, "malformed": shortened(raw), **turn})
            self.state["history"].append({"role": "runtime", "step": step, "error": problem})
            self._emit("decision", kind="malformed", error=problem)
        elif "final" in decision:
            self._finish(decision, turn)
        else:
            self._propose(decision, turn)
            self._count_repeat()
        if self.status in ("running", "awaiting_approval", "done"):
            self._commit()

    def _history_for_policy(self) -> list[dict[str, Any]]:
        """A copy of the history for the policy, so nothing it does can touch the run.

        Entries are copied once, when first shown, and kept: copying the whole history before
        every call would make a run's cost grow with the square of its length.
        """
        history, copies = self.state["history"], self._policy_copies
        copies.extend(json_copy(entry) for entry in history[len(copies):])
        return list(copies)

    def _account(self, raw: Any) -> tuple[Any, dict[str, Any]]:
        """Take usage and model metadata off a decision and add them to the run's usage.

        Returns the decision and what the turn's history entry records about where it came from:
        the usage the reply reported (so a replay charges the same) and the versions behind it.
        """
        reported = raw.get("usage") if isinstance(raw, dict) else None
        decision, model = charge_usage(raw, self.state["usage"])
        if model is not None:
            self.state["model"] = model
        turn: dict[str, Any] = {"versions": self._versions(model)}
        self._note_version_change(turn["versions"])
        if isinstance(reported, dict):
            turn["usage"] = jsonable({k: reported[k] for k in ("input_tokens", "output_tokens", "cost_usd")
                                      if k in reported})
        return decision, turn

    def _versions(self, model: dict[str, Any] | None) -> dict[str, Any]:
        """The model spec, system prompt and tool contracts behind this turn."""
        if self._catalogue is None:
            contracts = {name: tool.contract for name, tool in sorted(self.tools.items())}
            self._catalogue = hashlib.sha256(canonical_json(contracts).encode()).hexdigest()[:16]
            self.state.setdefault("contracts", {}).setdefault(self._catalogue, contracts)
        prompt = (model or {}).get("system_prompt_sha256")
        return {"model": (model or {}).get("name"), "prompt": prompt[:16] if isinstance(prompt, str) else None,
                "tools": self._catalogue}

    def _note_version_change(self, versions: dict[str, Any]) -> None:
        """Record when this turn's model or system prompt differs from the last turn's (a deploy or a
        configuration change while the run went on); the run goes on."""
        now = {k: versions.get(k) for k in ("model", "prompt")}
        last = self.state.get("last_versions")
        self.state["last_versions"] = now
        if last is not None and last != now:
            self._emit("versions_changed", was=last, now=now)

    def _count_repeat(self) -> None:
        """Count a turn that called a tool as it was called before and got the same result again,
        and stop the run as `stalled` after `stall_after` of them in a row: a loop, not progress."""
        if self.stall_after is None or self.status != "running":
            return
        history = self.state["history"]
        if len(history) < 2 or history[-1].get("role") != "tool" or history[-2].get("role") != "assistant":
            return
        if self._outcomes_seen is None:  # a resumed run: what it saw so far, from its history
            self._outcomes_seen = {_outcome_key(call, seen) for call, seen in zip(history, history[1:], strict=False)
                                   if call.get("role") == "assistant" and seen.get("role") == "tool"
                                   and call.get("call_id") == seen.get("call_id") and seen is not history[-1]}
        outcome = _outcome_key(history[-2], history[-1])
        repeated = outcome in self._outcomes_seen
        self._outcomes_seen.add(outcome)
        self.state["repeats"] = self.state.get("repeats", 0) + 1 if repeated else 0
        if self.state["repeats"] >= self.stall_after:
            self._stop("stalled", reason=f"the last {self.state['repeats']} turns repeated earlier calls and "
                       "got the same results", repeats=self.state["repeats"])

    def _finish(self, decision: dict[str, Any], turn: dict[str, Any]) -> None:
        answer = jsonable(decision["final"])
        answer = answer if isinstance(answer, str) else json.dumps(answer)
        self.state["history"].append({"role": "assistant", "step": self.state["steps"], "final": answer, **turn})
        self.state["answer"] = answer
        self.state["status"] = "done"
        self._emit("decision", kind="final")
        self._emit("finished", answer=answer, usage=dict(self.state["usage"]))

    def _propose(self, decision: dict[str, Any], turn: dict[str, Any]) -> None:
        step = self.state["steps"]
        # JSON-only from here on: a checkpoint must be able to hold whatever the policy proposed.
        name, args = decision["tool"], jsonable(decision.get("args", {}))
        call = {
            "role": "assistant", "step": step, "tool": name, "args": args,
            "call_id": str(decision.get("call_id") or f"call-{step}"),
        }
        call.update({k: decision[k] for k in ("text", "note") if isinstance(decision.get(k), str)})
        call.update(turn)
        self.state["history"].append(call)
        self._emit("decision", kind="tool", tool=name, args=self._redacted(name, args))
        tool = self.tools.get(name)
        if tool is None:
            self._observe(call, error=f"unknown tool {name}", kind="unknown_tool")
            return
        try:
            args = tool.validate(args)
        except ValueError as exc:
            self._observe(call, error=str(exc), kind="invalid_args")
            return
        pending = {"tool": name, "args": args, "key": idempotency_key(self.state["run_id"], step),
                   "step": step, "call_id": call["call_id"], "contract": tool.contract}
        if not tool.side_effect:
            self._dispatch(pending)
            return
        earlier = self.state["fingerprints"].get(call_fingerprint(name, args))
        if earlier is not None:
            self._observe(call, kind="duplicate", error=(
                f"refused: an identical {name} call was already {earlier['outcome']} (key {earlier['key']}); "
                "it is not proposed again"))
            return
        self.state["pending"] = pending
        self.state["status"] = "awaiting_approval"
        self._emit("approval_requested", key=pending["key"], tool=name, args=self._redacted(name, args))

    def _dispatch(self, call: dict[str, Any], retry: bool = False) -> None:
        """Run one call through the executor and record what came of it."""
        tool = self.tools.get(call["tool"])
        if tool is None:
            self._refuse(call, "failed", f"tool {call['tool']} is no longer registered; nothing was executed")
            return
        started = self.clock()
        try:
            # A copy: a tool that consumes its arguments must not rewrite the history or the fingerprint.
            value = self.executor(tool, json_copy(call["args"]), call["key"])
        except DispatchRefused as exc:
            self._refuse(call, exc.status, f"not executed: {exc.reason}")
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

    def _record_execution(self, call: dict[str, Any], ok: bool, value: Any, seconds: float, **extra: Any) -> None:
        tool = self.tools.get(call["tool"])
        self.state["usage"]["tool_calls"] += 1
        side_effect = bool(tool and tool.side_effect)
        self._emit("tool_executed" if ok else "tool_failed", tool=call["tool"], key=call["key"],
                   seconds=round(seconds, 6), side_effect=side_effect, **extra,
                   **({"error": value} if not ok else {}))
        if side_effect:
            self.state["fingerprints"][call_fingerprint(call["tool"], call["args"])] = {
                "outcome": "executed" if ok else "attempted", "key": call["key"],
            }
            self.state["pending"] = None
            self._step.execution = {"key": call["key"], "tool": call["tool"], "ok": ok,
                                    "result" if ok else "error": value, "seconds": round(seconds, 6)}

    def _refuse(self, call: dict[str, Any], status: str, reason: str) -> None:
        """Stop without running `call`: it is settled (nothing stays pending) and the model is told why."""
        self._observe(call, error=reason, kind="refused")
        if self.state["pending"] is call:
            self.state["pending"] = None
        self._stop(status, reason=reason)

    def _needs_reconciliation(self, call: dict[str, Any], reason: str) -> None:
        self.state["pending"] = {k: call[k] for k in ("tool", "args", "key", "step", "call_id", "contract")
                                 if k in call}
        self._stop("needs_reconciliation", reason=reason, key=call["key"], tool=call["tool"])

    def _observe(self, call: dict[str, Any], *, result: Any = None, error: str | None = None,
                 kind: str | None = None) -> None:
        entry = {"role": "tool", "step": call["step"], "tool": call["tool"], "call_id": call["call_id"]}
        if error is None:
            entry["result"] = result
        else:
            entry["error"] = error
            entry["error_kind"] = kind
        self.state["history"].append(entry)

    def _stop(self, status: str, reason: str, **detail: Any) -> None:
        self.state["status"] = status
        self.state["stop"] = {"reason": reason, "step": self.state["steps"], **detail}
        if status in TERMINAL:
            self.state["pending"] = None
        self._emit(_STOP_EVENTS[status], **{"usage": dict(self.state["usage"]), **self.state["stop"]})
        self._commit()

    # -- events and checkpoints ----------------------------------------------------------

    def _emit(self, event_type: str, **payload: Any) -> None:
        event = {"type": event_type, "run_id": self.state["run_id"], "step": self.state["steps"], **payload}
        self._step.events.append(event)
        if self.on_event is not None:
            self.on_event(event)

    def _commit(self) -> None:
        self._charge_time()
        step, self._step = self._step, _Step()
        start, self._mark = self._mark, len(self.state["history"])
        if self.on_checkpoint is not None:
            self.on_checkpoint(Checkpoint(self.state, start, step.events, step.execution))

    def _redacted(self, tool_name: str, args: Any) -> Any:
        return redact(args, secret_names(self.tools.get(tool_name), configured=self.redact_keys))


_STOP_EVENTS = {
    "budget_exhausted": "budget_exhausted",
    "stalled": "stalled",
    "failed": "failed",
    "cancelled": "cancelled",
    "expired": "expired",
    "needs_reconciliation": "needs_reconciliation",
}


def _outcome_key(call: dict[str, Any], seen: dict[str, Any]) -> str:
    """A call and what came of it: the same tool, arguments and result (or error) give the same key."""
    outcome = {"result": seen["result"]} if "result" in seen else {"error": seen.get("error")}
    return hashlib.sha256(canonical_json([call.get("tool"), call.get("args"), outcome]).encode()).hexdigest()[:24]


def _tool_map(tools: Iterable[Tool] | dict[str, Tool]) -> dict[str, Tool]:
    items = list(tools.values()) if isinstance(tools, dict) else list(tools)
    mapping: dict[str, Tool] = {}
    for tool in items:
        if not isinstance(tool, Tool):
            raise TypeError(f"expected a Tool, got {type(tool).__name__}")
        if tool.name in mapping:
            raise ValueError(f"duplicate tool name {tool.name!r}")
        mapping[tool.name] = tool
    return mapping
