"""The agent's ports for a run kept in the store: its calls go through the execution ledger (an
approval consumed and a "started" row written before a side effect runs), its steps into the store
in one transaction each, and people are told of each step once it is saved.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from signoff.runtime import starting_calls
from signoff.runtime.agent import Checkpoint
from signoff.runtime.call_starts import restart_for, start_call
from signoff.runtime.errors import Conflict
from signoff.runtime.events import event as audit_event
from signoff.runtime.loop import RunTool
from signoff.runtime.records import ApprovalRecord, ExecutionStart, Fresh, RunRecord
from signoff.runtime.rules import step_write
from signoff.runtime.state import TERMINAL
from signoff.runtime.tool_calls import Outcome, run_tool

if TYPE_CHECKING:
    from signoff.runtime.ports import Store
    from signoff.runtime.relay import Relay
    from signoff.runtime.runner_config import RunnerConfig
    from signoff.runtime.telling import Teller

log = logging.getLogger("signoff.runner")


class StoreFailed(Exception):
    """The database failed while a call was being started: the call did not run, and the tool must
    not be blamed. The worker stops; recovery continues the run."""


class LeaseLost(Exception):
    """Another worker holds the run now; this one stops without starting or saving anything."""


@dataclass
class Session:
    """What one worker knows about the run it drives."""

    run: RunRecord
    version: int
    owner: str
    """The lease holder: this worker and this pass, so two threads of one worker exclude each other too."""
    clear_command: bool = False
    retry_key: str | None = None
    interrupted: bool = False
    """A person left a request while the run went on: stop, and apply it."""
    released: bool = False
    """The last step let go of the lease in its own write: this pass is over, whatever comes next."""
    status: str = ""
    """The run's status as this worker last saved (or loaded) it."""
    report: Outcome | None = None
    """What came of the call the run handed to its caller, as the caller reported it."""
    told: list[int] = dataclasses.field(default_factory=list)
    """The run's notices this pass has told and its next write drops (`relay.Relay.tell_run`)."""

    def __post_init__(self) -> None:
        self.status = self.status or self.run.status

    def reload(self, run: RunRecord) -> None:
        """Start over from `run` as read again (to apply the request that interrupted the pass)."""
        self.run, self.version, self.status = run, run.version, run.status
        self.clear_command, self.retry_key, self.interrupted = False, None, False


@dataclass(frozen=True)
class PassParts:
    """What a worker's pass goes through: the store, the runner's config, who is told of what it
    commits (and what it owes them: `relay`), and the clock it times calls by (seconds)."""

    store: Store
    config: RunnerConfig
    teller: Teller
    relay: Relay
    clock: Callable[[], float]


class StoredLedger:
    """The store's execution ledger, as the run's worker starts calls through it: fenced on the
    worker's lease, a waiting Retry request used up with the start, the start told to whoever
    watches, and the crash points a fault test can stop the process at."""

    def __init__(self, parts: PassParts, session: Session) -> None:
        self.parts, self.session = parts, session
        self.store, self.config = parts.store, parts.config

    def started(self, key: str) -> bool:
        return any(row.get("key") == key for row in self.store.executions(self.session.run.run_id))

    def begin(self, action: RunTool) -> ExecutionStart:
        started = self._begin(action)
        if isinstance(started, Fresh):
            session, call = self.session, action.call
            if started.version is not None:  # the retry request was used up with the start, in one transaction
                session.version, session.clear_command = started.version, False
            self.parts.teller.observe(session.run, [audit_event(
                "execution_started", run_id=session.run.run_id, key=call.key, tool=call.tool,
                attempt=started.attempt, allowed_by=action.allowed_by, granted_by=action.granted_by)])
            self.config.failpoints.hit("after_ledger_row")
        return started

    def ran(self, key: str) -> None:
        self.config.failpoints.hit("after_tool")

    def _begin(self, action: RunTool) -> ExecutionStart:
        session, call, tool = self.session, action.call, action.tool
        try:
            return starting_calls.begin_execution(
                self.store, session.run.run_id, call.tool, dict(call.args), call.key, owner=session.owner,
                lease=self.config.lease, dispatch_window=self.config.dispatch_window,
                restart=restart_for(tool, session.retry_key == call.key),
                allowed_by=action.allowed_by if tool.side_effect else None, granted_by=action.granted_by,
                preview=call.preview.digest if call.preview is not None else None,
                signer=self.config.signer, policy=self.config.policy.digest)
        except Conflict as exc:
            raise LeaseLost(str(exc)) from exc
        except Exception as exc:  # the database failed, not the tool
            raise StoreFailed(f"{type(exc).__name__}: {exc}") from exc


class LedgerPorts:
    """The agent's ports for a run kept in the store: calls through the ledger, steps into the store."""

    def __init__(self, parts: PassParts, session: Session) -> None:
        self.parts, self.session = parts, session
        self.store, self.config = parts.store, parts.config
        self.ledger = StoredLedger(parts, session)

    def run(self, action: RunTool) -> Outcome:
        """Read-only calls just run; a side effect starts only through the ledger, once."""
        return start_call(action, self.ledger, run_tool, self.parts.clock)

    def save(self, checkpoint: Checkpoint) -> bool:
        """Commit the step, then tell people about it; False once a request waits for the run."""
        self.config.failpoints.hit("after_decision")
        session, run = self.session, self.session.run
        write = step_write(checkpoint, self.config.approval_ttl, tell=self.parts.teller.tells)
        try:
            saved = self.store.save_step(run.run_id, owner=session.owner, version=session.version,
                                         checkpoint=checkpoint, write=write,
                                         lease=self.config.lease, clear_command=session.clear_command,
                                         release=self._lets_go_with(checkpoint), told=tuple(session.told))
        except Conflict:
            if checkpoint.execution is not None:
                self.store.complete_execution(checkpoint.execution)
            raise
        session.version, session.clear_command = saved.version, False
        session.told.clear()
        session.status, session.released = checkpoint.state["status"], saved.released
        self.config.failpoints.hit("after_checkpoint")
        teller = self.parts.teller
        snapshot = dataclasses.replace(run, status=checkpoint.state["status"], state=checkpoint.state,
                                       version=saved.version, checked=None)
        teller.observe(snapshot, _with_approval_ids(checkpoint.events, saved.approvals))
        if write.notices:  # its results, its cards, its ending: told now, under the lease this pass holds
            told = self.parts.relay.tell_run(run.run_id, snapshot, session.told, saved.owed)
            if told is not None and told.origin != run.origin:  # announced: later steps thread under it
                session.run = dataclasses.replace(session.run, origin=told.origin)
        if saved.cancelled:  # closed, or pending again under a larger quorum: the redraws owed
            self.parts.relay.send_owed(run.run_id)
        if saved.command is not None and checkpoint.state["status"] not in TERMINAL:
            session.interrupted = True
            return False
        return True

    def _lets_go_with(self, checkpoint: Checkpoint) -> bool:
        """Whether the step's own write lets go of the run: it is the last of this pass (the run
        pauses or ends), and nothing is left to do while holding it. A run with people to tell
        keeps it until they are told what the step owes them (a card posted, an ending told): its
        lease is what keeps a recovering replica from telling them too (`relay.Relay.tell_run`); a
        turn of several calls keeps it to go on from the calls decided while it was busy."""
        return (checkpoint.last and not self.parts.teller.tells
                and not (checkpoint.state["status"] == "awaiting_approval" and checkpoint.state.get("batch")))


def _with_approval_ids(events: list[dict[str, Any]], opened: tuple[ApprovalRecord, ...]) -> list[dict[str, Any]]:
    """The step's events with the id of each approval the same commit opened on their requests,
    which the loop cannot know (the store makes them) and a reader of the request needs."""
    if not opened:
        return events
    ids = {approval.key: approval.approval_id for approval in opened}
    return [{**event, "approval_id": ids[event["key"]]}
            if event["type"] == "approval_requested" and event.get("key") in ids else event
            for event in events]
