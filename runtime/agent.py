"""The agent loop: a policy proposes, this code validates, gates and executes.

Pure: no Slack, no SQL, no HTTP. I/O reaches the loop only through what the caller passes in:
the policy, the tools, an `executor` (how a call is dispatched), `on_event` (the audit sink)
and `on_checkpoint` (where each step's state goes). The state is a frozen, validated
`schema.RunState` (`agent.run_state`) that every transition replaces with a new value;
`agent.state` shows it as read-only JSON.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import Any

from signoff.runtime.budget import Budget, exhausted_limit, usage_report
from signoff.runtime.checkpoints import Checkpoint
from signoff.runtime.decisions import jsonable, malformed, shortened
from signoff.runtime.dispatch import Dispatcher, Executor
from signoff.runtime.errors import InvalidTransition, ModelAuthError, ModelUnavailable
from signoff.runtime.frozen import frozen, thawed
from signoff.runtime.schema import (
    TERMINAL,
    BudgetLimits,
    ErrorKind,
    FinalAnswer,
    Goal,
    MalformedReply,
    PendingCall,
    RunState,
    RuntimeFeedback,
    ToolCall,
)
from signoff.runtime.stalls import Repeats
from signoff.runtime.state import (
    DEFAULT_REDACT_KEYS,
    call_fingerprint,
    dump_state,
    idempotency_key,
    parse_state,
)
from signoff.runtime.tool_calls import run_tool
from signoff.runtime.turns import Catalogue, Provenance, read_turn
from signoff.tools.base import Tool

__all__ = ["Agent", "Checkpoint", "Executor", "Policy"]

Policy = Callable[[list[dict[str, Any]]], Any]
"""history -> {"tool": name, "args": {...}} | {"final": text}; may add "usage", "call_id", "text", "note"."""


class Agent(Dispatcher):
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
        budget = budget or Budget(max_steps=max_steps)
        super().__init__(RunState.fresh(run_id, budget.to_json()), [], clock=clock, on_event=on_event,
                         on_checkpoint=on_checkpoint)
        self.policy = policy
        self.tools = _tool_map(tools)
        self.executor = executor
        self.redact_keys = frozenset(redact_keys)
        if stall_after is not None and stall_after < 1:
            raise ValueError("stall_after must be a positive number of turns, or None")
        self.stall_after = stall_after
        """Turns in a row that repeat an earlier call and get its result again before the run stops
        as `stalled` (None: never)."""
        self._policy_copies: list[dict[str, Any]] = []
        self._repeats = Repeats()
        self._catalogue: Catalogue | None = None

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
        """Rebuild an agent from `checkpoint()` (of this version or an older one, which is upgraded);
        it continues exactly where the original stopped.

        `max_steps` (or a `budget=` of other limits) replaces the stored limits, e.g. to extend a
        run; without it the stored budget and usage carry on.
        """
        run, state = parse_state(blob)
        budget = options.pop("budget", None)
        agent = cls(policy, tools, run_id=run.run_id, **options)
        limits = budget.to_json() if budget is not None else {}
        if max_steps is not None:
            limits["max_steps"] = max_steps
        if limits:
            run = run.model_copy(update={"budget": BudgetLimits.model_validate({**run.budget.to_json(), **limits})})
        agent._restore(run, [frozen(entry) for entry in state["history"]])  # validated: the entries' JSON
        return agent

    def checkpoint(self) -> str:
        """The whole run state as canonical JSON."""
        return dump_state(self.state)

    # -- public transitions --------------------------------------------------------------

    def start(self, goal: str) -> str:
        """Record the goal and run until the run finishes, pauses or runs out of budget."""
        if self.status != "idle":
            raise InvalidTransition(f"run {self._run.run_id} already started ({self.status})")
        if not isinstance(goal, str) or not goal.strip():
            raise ValueError("the goal must be a non-empty string")
        self._append(Goal(role="user", content=goal))
        self._evolve(goal=goal, status="running")
        self._emit("run_started", goal=goal, budget=self._run.budget.to_json())
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

    def decide(self, approved: bool, note: str = "", by: str | None = None) -> str:
        """Approve or deny the pending call, then continue the run.

        Approving runs exactly the pending call, once, with its key. Denying tells the model
        `denied by human: <note>`. Raises `InvalidTransition` when nothing is pending.
        """
        pending = self._run.pending
        if self.status != "awaiting_approval" or pending is None:
            raise InvalidTransition(f"run {self._run.run_id} has no pending approval ({self.status})")
        self._emit("approval_decided", key=pending.key, tool=pending.tool, approved=approved, by=by, note=note)
        self._evolve(status="running")
        self._clock_mark = self.clock()  # running the approved call is running time; the wait was not
        if approved:
            self._dispatch(pending)
        else:
            self._settle(pending, "denied")
            self._observe(pending, error=f"denied by human: {note.strip() or 'no reason given'}", kind="denied")
            self._evolve(pending=None)
        if self.status == "running":
            self._commit()
        return self.run()

    def reconsider(self, reason: str) -> str:
        """The pending call's tool changed since it was proposed (a deploy in between), so the
        approval given for it no longer holds: validate the call again under the tool as it is now.

        Still valid, it is asked about afresh (a new approval, same key); no longer valid, the
        model is told why and goes on; become read-only, it runs. `reason` says what changed.
        """
        pending = self._run.pending
        if self.status != "awaiting_approval" or pending is None:
            raise InvalidTransition(f"run {self._run.run_id} has no pending approval ({self.status})")
        tool = self.tools.get(pending.tool)
        self._emit("call_reconsidered", key=pending.key, tool=pending.tool, reason=reason,
                   was=pending.contract, now=tool.contract if tool else None)
        if tool is None:
            return self._withdraw(pending, f"{reason}; tool {pending.tool} is no longer registered", "unknown_tool")
        try:
            args = tool.validate(pending.args)
        except ValueError as exc:
            return self._withdraw(pending, f"{reason}, and the call no longer fits it: {exc}", "invalid_args")
        if not tool.side_effect:
            self._evolve(status="running")
            self._clock_mark = self.clock()
            self._dispatch(_revised(pending, args=args))
            self._evolve(pending=None)
        else:
            self._evolve(pending=_revised(pending, args=args, contract=tool.contract))
            self._emit("approval_requested", key=pending.key, tool=tool.name,
                       args=self._redacted(tool.name, args), supersedes=True, reason=reason)
        self._commit()
        return self.run()

    def _withdraw(self, pending: PendingCall, reason: str, kind: ErrorKind) -> str:
        """Drop the pending call unexecuted and tell the model why; the run goes on."""
        self._observe(pending, error=f"not executed: {reason}", kind=kind)
        self._evolve(pending=None, status="running")
        self._commit()
        return self.run()

    def extend(self, **limits: float) -> str:
        """Raise budget limits (e.g. `max_steps=12`) and continue a run that ran out."""
        unknown = set(limits) - set(Budget.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown budget limits: {', '.join(sorted(unknown))}")
        raised = {**self._run.budget.to_json(), **limits}
        Budget(**raised)  # validates the new values
        if self.status not in ("budget_exhausted", "stalled", "running", "awaiting_approval"):
            raise InvalidTransition(f"run {self._run.run_id} cannot be extended ({self.status})")
        self._evolve(budget=BudgetLimits.model_validate(raised))
        self._emit("budget_extended", limits=limits)
        if self.status in ("budget_exhausted", "stalled"):
            # A person looked at the loop and let it go on: its repeats so far are forgiven.
            self._evolve(status="running", stop=None, repeats=0)
        self._commit()
        return self.run()

    def retry(self) -> str:
        """Continue a run that failed (e.g. model unavailable) from where it stopped."""
        if self.status != "failed":
            raise InvalidTransition(f"run {self._run.run_id} has not failed ({self.status})")
        stop = self._run.stop
        self._emit("retried", previous=stop.to_json() if stop is not None else None)
        self._evolve(status="running", stop=None)
        self._commit()
        return self.run()

    def reconcile(self, action: str, result: Any = None, note: str = "", by: str | None = None) -> str:
        """Settle a call whose outcome is unknown: `done` (with the real result), `retry` or `abort`."""
        pending = self._run.pending
        if self.status != "needs_reconciliation" or pending is None:
            raise InvalidTransition(f"run {self._run.run_id} is not waiting for reconciliation")
        if action not in ("done", "retry", "abort"):
            raise ValueError("action must be 'done', 'retry' or 'abort'")
        self._emit("reconciled", key=pending.key, tool=pending.tool, action=action, by=by, note=note)
        if action == "abort":
            return self.cancel(f"aborted during reconciliation: {note or 'no reason given'}", by=by)
        self._evolve(status="running", stop=None)
        self._clock_mark = self.clock()
        if action == "retry":
            self._dispatch(pending, retry=True)
        else:
            result = jsonable(result)
            self._record_execution(pending, ok=True, value=result, seconds=0.0, reconciled=True)
            self._observe(pending, result=result)
            self._evolve(pending=None)
        if self.status == "running":
            self._commit()
        return self.run()

    def cancel(self, reason: str = "", by: str | None = None) -> str:
        """End the run as `cancelled`; a pending call is dropped unexecuted."""
        if self.status in TERMINAL:
            raise InvalidTransition(f"run {self._run.run_id} already ended ({self.status})")
        self._stop("cancelled", reason=reason or "cancelled", by=by)
        return self.status

    def expire(self, reason: str = "approval expired") -> str:
        """End a run whose pending approval expired; nothing was executed."""
        if self.status != "awaiting_approval":
            raise InvalidTransition(f"run {self._run.run_id} is not awaiting approval ({self.status})")
        self._stop("expired", reason=reason)
        return self.status

    # -- the loop ------------------------------------------------------------------------

    def _advance(self) -> None:
        """One policy call and what follows from it, ending in a checkpoint."""
        limit = exhausted_limit(self._run)
        if limit is not None:
            self._stop("budget_exhausted", reason=f"{limit} reached", budget=limit, limits=usage_report(self._run))
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
        if self._catalogue is None:
            self._catalogue = Catalogue.of(self.tools)
        turn = read_turn(raw, self._run, self._catalogue)
        step = self._run.steps + 1
        self._evolve(steps=step, **turn.changes)
        if turn.versions_changed is not None:
            was, now = turn.versions_changed
            self._emit("versions_changed", was=was, now=now)
        problem = malformed(turn.decision)
        if problem:
            self._append(MalformedReply(role="assistant", step=step, malformed=shortened(raw), **turn.provenance),
                         RuntimeFeedback(role="runtime", step=step, error=problem))
            self._emit("decision", kind="malformed", error=problem)
        elif "final" in turn.decision:
            self._finish(turn.decision, turn.provenance)
        else:
            self._propose(turn.decision, turn.provenance)
            self._count_repeat()
        if self.status in ("running", "awaiting_approval", "done"):
            self._commit()

    def _history_for_policy(self) -> list[dict[str, Any]]:
        """A copy of the history for the policy, so nothing it does can touch the run.

        Entries are copied once, when first shown, and kept: copying the whole history before
        every call would make a run's cost grow with the square of its length.
        """
        history, copies = self._json.history, self._policy_copies
        copies.extend(thawed(entry) for entry in history[len(copies):])
        return list(copies)

    def _count_repeat(self) -> None:
        """Count a turn that called a tool as it was called before and got the same result again,
        and stop the run as `stalled` after `stall_after` of them in a row: a loop, not progress."""
        if self.stall_after is None or self.status != "running":
            return
        repeats = self._repeats.after_turn(self._run.history, self._run.repeats)
        if repeats is None:
            return
        self._evolve(repeats=repeats)
        if repeats >= self.stall_after:
            self._stop("stalled", reason=f"the last {repeats} turns repeated earlier calls and got the same results",
                       repeats=repeats)

    def _finish(self, decision: dict[str, Any], provenance: Provenance) -> None:
        answer = jsonable(decision["final"])
        answer = answer if isinstance(answer, str) else json.dumps(answer)
        self._append(FinalAnswer(role="assistant", step=self._run.steps, final=answer, **provenance))
        self._evolve(answer=answer, status="done")
        self._emit("decision", kind="final")
        self._emit("finished", answer=answer, usage=self._run.usage.to_json())

    def _propose(self, decision: dict[str, Any], provenance: Provenance) -> None:
        step = self._run.steps
        # JSON-only from here on: a checkpoint must be able to hold whatever the policy proposed.
        name, args = decision["tool"], jsonable(decision.get("args", {}))
        said = {k: decision[k] for k in ("text", "note") if isinstance(decision.get(k), str)}
        call = ToolCall(role="assistant", step=step, tool=name, args=args,
                        call_id=str(decision.get("call_id") or f"call-{step}"), **said, **provenance)
        self._append(call)
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
        pending = PendingCall(tool=name, args=args, key=idempotency_key(self._run.run_id, step), step=step,
                              call_id=call.call_id, contract=tool.contract)
        if not tool.side_effect:
            self._dispatch(pending)
            return
        earlier = self._run.fingerprints.get(call_fingerprint(name, args))
        if earlier is not None:
            self._observe(call, kind="duplicate", error=(
                f"refused: an identical {name} call was already {earlier.outcome} (key {earlier.key}); "
                "it is not proposed again"))
            return
        self._evolve(pending=pending, status="awaiting_approval")
        self._emit("approval_requested", key=pending.key, tool=name, args=self._redacted(name, args))

def _revised(pending: PendingCall, **changes: Any) -> PendingCall:
    """`pending` with `changes`, validated again."""
    return PendingCall.model_validate({**pending.to_json(), **changes})


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
