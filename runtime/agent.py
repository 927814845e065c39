"""The agent: the one driver of the loop. It does what each step of `loop` asks, in order (ask the
model, run a call, commit the step), through `Ports`, and holds the run's state between requests.

The decisions are in the pure `loop` and `requests`; the I/O is in the ports: in-process (the
`executor` runs calls, started through an in-process ledger, and `on_checkpoint` receives each
step) or the runner's (the store's ledger, the store). Either starts a call the one way,
`call_starts.start_call`. Nothing in the loop calls back into either: a step is a value, and the driver acts on it.
The state is a frozen, validated `schema.RunState` (`agent.run_state`); `agent.state` shows it as
read-only JSON.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from signoff.runtime import caller_calls, loop, requests
from signoff.runtime.approval_policy import ApprovalPolicy, default_policy
from signoff.runtime.batches import continue_batch
from signoff.runtime.budget import Budget
from signoff.runtime.call_outcomes import after_call
from signoff.runtime.call_starts import InProcessLedger, start_call
from signoff.runtime.checkpoints import Checkpoint, StateJson, StepRecord
from signoff.runtime.errors import ModelAuthError, ModelUnavailable
from signoff.runtime.frozen import FrozenDict, FrozenList, frozen, thawed
from signoff.runtime.judging import Caller, Context, after_preview
from signoff.runtime.loop import CallModel, ModelFailed, Reply, RunTool, Step
from signoff.runtime.records import GrantRecord
from signoff.runtime.replies import after_reply, budget_stop
from signoff.runtime.schema import BudgetLimits, RunState
from signoff.runtime.state import DEFAULT_REDACT_KEYS, dump_state, parse_state
from signoff.runtime.tool_calls import Executor, Outcome, run_tool, take_preview
from signoff.tools.base import Tool

__all__ = ["Agent", "Checkpoint", "Executor", "InProcess", "NoReply", "Policy", "Ports"]

Policy = Callable[[list[dict[str, Any]]], Any]
"""history -> {"tool": name, "args": {...}} | {"final": text} | `NoReply()`; may add "usage",
"call_id", "text", "note"."""


@dataclass(frozen=True)
class NoReply:
    """What a policy returns when it has no turn to give yet: the driver stops before the model's
    turn, the run still running, as when a port says stop. A replay returns it where the recording
    has a person act next, or ends mid-run."""


class Ports(Protocol):
    """Where the driver's I/O goes."""

    def run(self, action: RunTool) -> Outcome:
        """Run the call once with its key and say what came of it (a tool's failure is an outcome).
        Anything raised is not the tool's: it stops the driver and reaches the caller."""

    def save(self, checkpoint: Checkpoint) -> bool:
        """Commit one step. False: stop driving here (the run changed hands or a request arrived)."""


class InProcess:
    """Ports for a run held in this process: `executor` runs calls, `on_checkpoint` sees each step,
    and `ledger` records the calls started (agents that share it never start one key's call twice)."""

    def __init__(self, executor: Executor, on_checkpoint: Callable[[Checkpoint], None] | None,
                 clock: Callable[[], float], ledger: InProcessLedger | None = None) -> None:
        self.executor, self.on_checkpoint, self.clock = executor, on_checkpoint, clock
        self.ledger = ledger if ledger is not None else InProcessLedger()

    def run(self, action: RunTool) -> Outcome:
        return start_call(action, self.ledger, self.executor, self.clock)

    def save(self, checkpoint: Checkpoint) -> bool:
        if checkpoint.execution is not None:
            self.ledger.record(checkpoint.execution)
        if self.on_checkpoint is not None:
            self.on_checkpoint(checkpoint)
        return True


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
        ports: Ports | None = None,
        redact_keys: Iterable[str] = DEFAULT_REDACT_KEYS,
        clock: Callable[[], float] = time.monotonic,
        stall_after: int | None = 3,
        approval_policy: ApprovalPolicy | None = None,
        caller: Caller | None = None,
        grants: Iterable[GrantRecord] = (),
        unfit_granters: Mapping[str, str] | None = None,
    ) -> None:
        if stall_after is not None and stall_after < 1:
            raise ValueError("stall_after must be a positive number of turns, or None")
        self.policy = policy
        self.tools = _tool_map(tools)
        self.clock = clock
        self.on_event = on_event
        if ports is not None and (executor is not run_tool or on_checkpoint is not None):
            raise ValueError("give ports, or executor and on_checkpoint, not both: ports run the calls and take the steps")
        self.ports: Ports = ports or InProcess(executor, on_checkpoint, clock)
        self.context = Context(self.tools, frozenset(redact_keys), stall_after,
                               approval_policy=approval_policy or default_policy(), caller=caller or Caller(),
                               grants=tuple(grants), unfit_granters=dict(unfit_granters or {}))
        """`stall_after`: turns in a row that repeat an earlier call and get its result again before
        the run stops as `stalled` (None: never). `approval_policy` says which calls run, which ask
        a person and which are refused (by default: every side effect asks, every read runs);
        `caller` is who the run is for, as its rules see it; `grants` those in force for it."""
        self._restore(RunState.fresh(run_id, (budget or Budget(max_steps=max_steps)).to_json()), [])

    def _restore(self, run: RunState, history_json: list[FrozenDict]) -> None:
        self._run, self._json = run, StateJson(history_json)
        self._view: FrozenDict | None = None
        self._step, self._mark = StepRecord(), len(run.history)

    @classmethod
    def resume(cls, blob: str | dict[str, Any], policy: Policy, tools: Iterable[Tool] | dict[str, Tool],
               max_steps: int | None = None, **options: Any) -> Agent:
        """Rebuild an agent from `checkpoint()` (of this version or an older one, which is upgraded);
        it continues exactly where the original stopped.

        `max_steps` (or a `budget=` of other limits) replaces the stored limits, e.g. to extend a
        run; without it the stored budget and usage carry on.
        """
        checked: RunState | None = options.pop("checked", None)
        # `checked`: `blob` was checked as this typed state already (the store read it so), and is
        # not copied, since the agent keeps frozen copies of its entries and never changes it.
        run, state = (checked, blob) if checked is not None and isinstance(blob, dict) else parse_state(blob)
        budget = options.pop("budget", None)
        agent = cls(policy, tools, run_id=run.run_id, **options)
        limits = budget.to_json() if budget is not None else {}
        if max_steps is not None:
            limits["max_steps"] = max_steps
        if limits:
            run = run.model_copy(update={"budget": BudgetLimits.model_validate({**run.budget.to_json(), **limits})})
        history = state["history"]  # validated: the entries' JSON
        # A run a worker kept (`kept_runs`) comes with the history its last agent made, frozen entry
        # by entry already: going over it again would cost a resume more the longer the run.
        agent._restore(run, history if type(history) is FrozenList else [frozen(entry) for entry in history])
        return agent

    # -- what it holds -------------------------------------------------------------------

    @property
    def run_state(self) -> RunState:
        """The typed state: a frozen value, replaced (never changed) by each transition."""
        return self._run

    @property
    def state(self) -> dict[str, Any]:
        """The state as JSON, read-only (writing raises `TypeError`): `state["pending"]["key"]`."""
        if self._view is None:
            self._view = self._json.view(self._run)
        return self._view

    @property
    def status(self) -> str:
        return self._run.status

    def checkpoint(self) -> str:
        """The whole run state as canonical JSON."""
        return dump_state(self.state)

    # -- a person's requests, each followed by the run as far as it goes -----------------

    def start(self, goal: str) -> str:
        """Record the goal and run until the run finishes, pauses or runs out of budget."""
        return self._drive(requests.start(self._run, goal))

    def run(self) -> str:
        """Continue a running run; any other status is returned unchanged."""
        return self._drive(loop.Draft(self._run).go_on(), committed=True)

    def decide(self, approved: bool, note: str = "", by: str | None = None, approvals: int = 1,
               key: str | None = None, broke_glass: bool = False) -> str:
        """Approve or deny the pending call, then continue the run.

        Approving runs exactly the pending call, once, with its key (`approvals`: how many distinct
        people approved it, for a policy that now asks more). Denying tells the model
        `denied by human: <note>`. Raises `InvalidTransition` when nothing is pending. `key`: one
        of the calls of a turn that made several, decided in any order. `broke_glass`: one person
        approved it alone, as its rule's break-glass allows.
        """
        return self._drive(requests.decide(self._run, self.context, approved, note, by, approvals, key, broke_glass))

    def reconsider(self, reason: str, key: str | None = None) -> str:
        """The pending call's tool changed since it was proposed: ask afresh, withdraw or run it
        (see `requests.reconsider`)."""
        return self._drive(requests.reconsider(self._run, self.context, reason, key))

    def edit(self, args: Any, by: str | None = None, key: str | None = None) -> str:
        """A person changed the pending call's arguments: ask afresh about the edited call (or run
        or refuse it as the policy says), then continue (see `requests.edit`)."""
        return self._drive(requests.edit(self._run, self.context, args, by, key))

    def edit_refused(self, reason: str, key: str | None = None) -> str:
        """An edit was refused once it reached the run: ask again about the call it closed, then
        continue (see `requests.edit_refused`)."""
        return self._drive(requests.edit_refused(self._run, self.context, reason, key))

    def extend(self, **limits: float) -> str:
        """Raise budget limits (e.g. `max_steps=12`) and continue a run that ran out."""
        return self._drive(requests.extend(self._run, **limits))

    def retry(self) -> str:
        """Continue a run that failed (e.g. model unavailable) from where it stopped."""
        return self._drive(requests.retry(self._run))

    def reconcile(self, action: str, result: Any = None, note: str = "", by: str | None = None) -> str:
        """Settle a call whose outcome is unknown: `done` (with the real result), `retry` or `abort`."""
        return self._drive(requests.reconcile(self._run, self.context, action, result, note, by))

    def cancel(self, reason: str = "", by: str | None = None) -> str:
        """End the run as `cancelled`; a pending call is dropped unexecuted."""
        return self._drive(requests.cancel(self._run, reason, by))

    def request_again(self, by: str | None = None) -> str:
        """Ask again about the call of a run that expired with nobody deciding it, then continue
        (see `requests.request_again`)."""
        return self._drive(requests.request_again(self._run, self.context, by))

    def caller_reported(self, outcome: Outcome) -> str:
        """What came of the call this run handed to its caller (run, failed, or refused as it
        started), then continue (see `caller_calls.reported`)."""
        return self._drive(caller_calls.reported(self._run, self.context, outcome))

    def caller_lost(self, reason: str) -> str:
        """The caller started the handed call and reported no outcome in time: a person is asked."""
        return self._drive(caller_calls.lost(self._run, reason))

    def expire(self, reason: str = "approval expired", key: str | None = None) -> str:
        """Nobody decided the pending call (or `key`) in time; nothing was executed (see `requests.expire`)."""
        return self._drive(requests.expire(self._run, reason, key))

    # -- the driver ----------------------------------------------------------------------

    def _drive(self, step: Step, *, committed: bool = False) -> str:
        """Act on `step` and on every step after it until the run pauses, ends or a port says stop.

        Each step whose next action is not a `RunTool` is committed, and so is one that runs a side
        effect a rule allowed (`RunTool.commits_first`; `committed`: `step` changed nothing, so it
        is not). Running time is charged at each commit; waiting is never charged.
        """
        mark = self.clock()
        while True:
            self._take(step)
            # A preview is a read taken on the way to asking a person: committed with the ask.
            if not committed and (not isinstance(step.then, RunTool | loop.RunPreview) or (
                    isinstance(step.then, RunTool) and step.then.commits_first)):
                now = self.clock()
                self._run, mark = loop.charge_time(self._run, now - mark), now
                if not self._commit(last=not isinstance(step.then, _GOES_ON)):
                    return self.status
            committed = False
            match step.then:
                case CallModel():
                    turn = budget_stop(self._run) or self._model_turn()
                    if turn is None:  # the policy has no turn to give yet
                        return self.status
                    step = turn
                case RunTool() as action if action.tool.run_by_caller:
                    step = caller_calls.hand_over(self._run, action)
                case RunTool() as action:
                    step = after_call(self._run, self.context, action, self.ports.run(action))
                case loop.ContinueBatch():
                    step = continue_batch(self._run, self.context)
                case loop.RunPreview() as preview:
                    step = after_preview(self._run, self.context, preview,
                                         take_preview(preview.tool, thawed(preview.call.args), preview.call.key))
                case _:
                    return self.status

    def _take(self, step: Step) -> None:
        """Make `step`'s state the run's, and keep its events (and ledger outcome) for the commit."""
        self._run, self._view = step.state, None
        self._json.append(step.state.history[len(self._json.history):])
        events = step.as_events()
        self._step.events.extend(events)
        self._step.effects.extend(step.effects)
        if step.execution is not None:
            self._step.execution = step.execution
        if self.on_event is not None:
            for event in events:
                self.on_event(event)

    def _commit(self, *, last: bool) -> bool:
        step, self._step = self._step, StepRecord()
        start, self._mark = self._mark, len(self._run.history)
        return self.ports.save(Checkpoint(self.state, start, step.events, step.execution, self._mark,
                                          tuple(step.effects), last))

    def _model_turn(self) -> Step | None:
        """The step the policy's reply makes; None when it has none to give (`NoReply`)."""
        reply = self._ask()
        if isinstance(reply, Reply) and isinstance(reply.raw, NoReply):
            return None
        return after_reply(self._run, self.context, reply)

    def _ask(self) -> Reply | ModelFailed:
        """The policy's reply to the history so far; its failure is a value, so the run stops visibly."""
        try:
            return Reply(self.policy(self._history_for_policy()))
        except ModelAuthError as exc:
            return ModelFailed("model rejected credentials", str(exc))
        except ModelUnavailable as exc:
            return ModelFailed("model unavailable", str(exc))
        except Exception as exc:  # a policy bug must not take the run down with it
            return ModelFailed("policy error", f"{type(exc).__name__}: {exc}")

    def _history_for_policy(self) -> list[dict[str, Any]]:
        """The history for the policy: its entries read-only (a policy that tries to change one
        fails as a policy error), in a list of its own, so nothing the policy does can touch the run.

        The entries are shared, not copied: copying them before every call would make a run's cost
        grow with the square of its length.
        """
        return list(self._json.history)


_GOES_ON = (CallModel, RunTool, loop.ContinueBatch, loop.RunPreview)
"""The actions `_drive` takes after a commit; after any other, it stops."""


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
