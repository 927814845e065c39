"""Runs whose one call their caller runs: an approval asked for by a program outside Signoff.

Such a run is recorded like any other, with the call in its origin (`CallerCall`, under
`origin["caller"]`). Its model is that call: the first turn proposes it, the next ends the run
saying what came of it. Its only tool is the call's own, `run_by_caller`: the loop decides the call
as it decides any (policy, quorum, edits, grants, expiry, the card, the audit chain) and then hands
it over (`caller_calls`) instead of running it.

The caller then starts it (`CallerDoor.start`: the ledger row written and the approval consumed,
exactly once, under a lease the caller holds for the call's time limit) and reports what came of it
(`CallerDoor.report`: recorded as any call's outcome). A caller that never reports leaves a started
call with no outcome, which recovery puts to a person once the lease lapses, as it does the call of a
worker that died mid-call.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pydantic import Field, JsonValue, ValidationError

from signoff.runtime import caller_calls, starting_calls
from signoff.runtime.agent import Policy
from signoff.runtime.call_starts import settled_without_running
from signoff.runtime.errors import Conflict
from signoff.runtime.events import event
from signoff.runtime.frozen import thawed
from signoff.runtime.ledger_ports import Session
from signoff.runtime.loop import RunTool
from signoff.runtime.records import Existing, Fresh, RunRecord
from signoff.runtime.tool_calls import Failed, Outcome, Ran
from signoff.runtime.values import Value
from signoff.tools.base import TOOL_NAME, Tool

if TYPE_CHECKING:
    from signoff.runtime.worker import Worker

MODEL = "caller"
"""The model a caller's run is recorded with: its call, proposed once."""
DEFAULT_TIMEOUT_S = 900.0
"""How long a caller may take to run a call it started before a person is asked what came of it."""


class CallerCall(Value):
    """The call a program asked Signoff to decide, as the run keeps it."""

    tool: str = Field(pattern=TOOL_NAME.pattern)
    args: dict[str, JsonValue]
    side_effect: bool = True
    description: str = ""
    preview: JsonValue = None
    """What the caller says the call will do, shown to the approvers and bound into the approval."""
    timeout_s: float = Field(default=DEFAULT_TIMEOUT_S, gt=0, le=86_400)
    ttl_s: float | None = Field(default=None, gt=0, le=30 * 86_400)
    """The longest the caller will wait for a decision; the policy's time limit holds when shorter."""

    def as_tool(self) -> Tool:
        shown = self.preview
        return Tool(self.tool, _not_here, side_effect=self.side_effect, description=self.description,
                    timeout_s=self.timeout_s, run_by_caller=True, approval_ttl_s=self.ttl_s,
                    preview=(lambda args, key: shown) if shown is not None else None)

    def policy(self) -> Policy:
        """The run's model: propose the call once, then end saying what came of it."""
        def propose(history: list[dict[str, Any]]) -> dict[str, Any]:
            told = [entry for entry in history if entry.get("role") == "tool"]
            if not told:
                return {"tool": self.tool, "args": thawed(self.args), "call_id": "caller-call"}
            last = told[-1]
            if "error" in last:
                return {"final": f"{self.tool} did not succeed: {last['error']}"}
            return {"final": f"{self.tool} ran; its caller reported the result."}
        return propose


def _not_here(args: dict[str, Any], key: str) -> Any:
    raise RuntimeError("a call its caller runs is never run by Signoff")


def caller_call(run: RunRecord) -> CallerCall | None:
    """The call a caller's run holds (None: a run of Signoff's own agent)."""
    return recorded_call(run.model, run.origin)


def recorded_call(model: str, origin: Mapping[str, Any]) -> CallerCall | None:
    """The call a run recorded with `model` and `origin` holds, if it is a caller's run. One whose
    recorded call cannot be read has none (its tool is then unknown, and the loop refuses the call)."""
    if model != MODEL:
        return None
    try:
        return CallerCall.model_validate(origin.get("caller"))
    except ValidationError:
        return None


def run_tools(run: RunRecord, tools: dict[str, Tool]) -> dict[str, Tool]:
    """The tools `run` calls: a caller's run, its one call's own; any other, the runner's `tools`."""
    return tools_of(run.model, run.origin, tools)


def tools_of(model: str, origin: Mapping[str, Any], tools: dict[str, Tool]) -> dict[str, Tool]:
    """`run_tools` of a run recorded with `model` and `origin` (as a replay or an export reads it)."""
    caller = recorded_call(model, origin)
    return {caller.tool: caller.as_tool()} if caller is not None else tools


def caller_owner(run_id: str) -> str:
    """What every lease a caller holds on `run_id` starts with: a report, on whichever replica it
    lands, knows the lease of the caller running the call by it. Each start attempt adds its own
    token, so a second attempt (a retry, a race) never holds, shortens or lets go of the first's."""
    return f"caller/{run_id}/"


def held_by_caller(run: RunRecord) -> bool:
    """Whether `run`'s lease is a caller's, running its started call (live or lapsed)."""
    return bool(run.lease_owner and run.lease_owner.startswith(caller_owner(run.run_id)))


@dataclass(frozen=True)
class Started:
    """The caller may run the call now, once: these arguments (as approved, maybe edited), this key."""

    tool: str
    args: dict[str, Any]
    key: str
    deadline_s: float


@dataclass(frozen=True)
class NotStarted:
    """Why the call did not start: the run's status now, and what to tell the caller."""

    status: str
    reason: str


BUSY_WAIT_S = 3.0
"""How long a start or a report waits for a worker that holds the run for a moment (a decision's pass)."""


class CallerDoor:
    """What a caller does to its run's call: start it, and report what came of it."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.store = worker.store

    def start(self, run_id: str) -> Started | NotStarted:
        """Write the call's ledger row (consuming its approval, or checking its rule or grant), so
        it starts exactly once; the caller then holds the run for the call's time limit."""
        owner = caller_owner(run_id) + secrets.token_hex(4)
        run = self._claim(run_id, owner)
        if run is None:
            return self._not_started(run_id)
        handed = False
        try:
            agent = self.worker.agent_for(Session(run, run.version, owner))
            if agent.status != "awaiting_caller":
                return self._not_started(run_id)
            action = caller_calls.handed_call(agent.run_state, agent.context)
            call, tool = action.call, action.tool
            begun = starting_calls.begin_execution(
                self.store, run_id, call.tool, thawed(call.args), call.key, owner=owner,
                lease=timedelta(seconds=tool.timeout_s or DEFAULT_TIMEOUT_S),
                dispatch_window=self.worker.config.dispatch_window,
                allowed_by=_allowed_by(action), granted_by=action.granted_by,
                preview=call.preview.digest if call.preview is not None else None,
                signer=self.worker.config.signer, policy=agent.context.approval_policy.digest)
            handed = isinstance(begun, Fresh)
        except Conflict:
            return self._not_started(run_id)
        finally:
            if not handed:  # the caller holds the run only while it runs the call
                self.store.release(run_id, owner)
        if isinstance(begun, Fresh):
            self.worker.teller.observe(run, [event(
                "execution_started", run_id=run_id, key=call.key, tool=call.tool, attempt=begun.attempt,
                allowed_by=action.allowed_by, granted_by=action.granted_by, by="caller")])
            return Started(call.tool, thawed(call.args), call.key, tool.timeout_s or DEFAULT_TIMEOUT_S)
        # A refusal is the ledger's answer as any run reads it; a start made before is not one here.
        refused = None if isinstance(begun, Existing) else settled_without_running(begun, action)
        if refused is not None:  # the call may not start after all: the run goes on from that
            self.worker.execute(run_id, report=refused)
        return self._not_started(run_id)

    def report(self, run_id: str, ok: bool, result: Any = None, error: str = "",
               seconds: float = 0.0) -> str | None:
        """Record what came of the started call and let the run end; the run's status after, or
        None when there was no started call of this run's to report on."""
        run = self.store.get_run(run_id, history=False)
        if run is not None and run.lease_owner is not None and held_by_caller(run) and \
                self.store.renew(run_id, run.lease_owner, self.worker.config.lease):
            self.worker.took(run_id, run.lease_owner)
        outcome: Outcome = Ran(result, seconds) if ok else Failed(error or "the caller reported a failure", seconds)
        deadline = time.monotonic() + BUSY_WAIT_S
        while True:
            status = self.worker.execute(run_id, report=outcome)
            if status is not None or time.monotonic() > deadline:
                return status
            time.sleep(0.05)

    def _claim(self, run_id: str, owner: str) -> RunRecord | None:
        """The run, leased to `owner`, only if nobody holds it; None if it is not there, or stays held
        by another (a worker for a moment, or a caller running its call: started already)."""
        deadline = time.monotonic() + BUSY_WAIT_S
        while True:
            if self.store.hold(run_id, owner, self.worker.config.lease):
                return self.store.get_run(run_id)
            current = self.store.get_run(run_id, history=False)
            if current is None or current.status != "awaiting_caller" or held_by_caller(current) \
                    or time.monotonic() > deadline:
                return None
            time.sleep(0.05)

    def _not_started(self, run_id: str) -> NotStarted:
        run = self.store.get_run(run_id, history=False)
        status = run.status if run is not None else "missing"
        return NotStarted(status, f"the run is {status}")


UNASKED_READ = "read-only"
"""What lets a read nobody was asked about start (the ledger records what let a call start unasked)."""


def _allowed_by(action: RunTool) -> str | None:
    """What lets the handed call start without an approval to consume: the rule that allowed it;
    for a read nobody was asked about, that it is one. (A call someone was asked about consumes the
    approval, read or not.) Every call its caller runs starts through the ledger, reads too: it is
    the one record that it started once, and of how it went."""
    if action.call.asked is not None and action.allowed_by is None:
        return None
    return action.allowed_by if action.tool.side_effect else (action.allowed_by or UNASKED_READ)
