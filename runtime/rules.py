"""The store's rules, decided here and handed to every adapter as data. Pure.

When an approval opens or closes, which statuses a person's request needs and what taking it does
at once, when an approved call may still start: an adapter (SQL, in memory) applies these values
in one transaction and decides none of them itself, so every adapter behaves the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from signoff.runtime.agent import Checkpoint
from signoff.runtime.approval import ApprovalRequest, Reopening
from signoff.runtime.effects import AskAbout, AskMoreOf, CallChanged, Overruled
from signoff.runtime.events import event as audit_event
from signoff.runtime.frozen import thawed
from signoff.runtime.notices import ENDINGS, OfRun, PostCards, TellEnd, TellResult
from signoff.runtime.records import CommandRefusal
from signoff.runtime.schema import REOPENABLE
from signoff.runtime.state import STATUSES, TERMINAL, call_digest

NOT_ENDED: frozenset[str] = frozenset(STATUSES) - TERMINAL
"""A run in any of these has not ended: a worker may claim it (it is active, or stopped and waiting
for a person's request), and a person may cancel it."""
RESYNC_WINDOW = timedelta(days=2)
"""How long a message owed to people is tried before it is given up (`relay.Relay`)."""
COMMANDS_LOOKED_AT = 50
"""How many of a run's latest requests a stale button is matched against (a run sees a handful)."""


# -- a step's effects on approvals and on a waiting request ----------------------------------


@dataclass(frozen=True)
class StepWrite:
    """What saving a step does besides writing it, in the same transaction."""

    approvals: tuple[ApprovalRequest, ...] = ()
    """The approvals to open: the step paused on a call, or on every call of a turn that asks a person."""
    superseded: tuple[str, ...] = ()
    """Keys whose open approvals no longer hold (their tool changed): closed as `superseded`."""
    close_open_approvals: bool = False
    """The run ended: every open approval of the run is closed as `cancelled`."""
    refuse_waiting_command: str | None = None
    """Why a request left for the run while the step ran can no longer apply; it is dropped and
    audited with this reason (left in place, the ended run would look like work to every worker)."""
    overruled: tuple[str, ...] = ()
    """Keys whose approved calls the policy now denies: their open approvals are closed as `cancelled`."""
    reopen: Reopening | None = None
    """The approval the policy now asks more approvals of."""
    notices: tuple[OfRun, ...] = ()
    """What the step owes people (`notices.RunNotice`), kept in the outbox with it."""


def step_write(checkpoint: Checkpoint, approval_ttl: timedelta, *, tell: bool = False) -> StepWrite:
    """What the store must do, beyond writing it, when it saves `checkpoint`. `approval_ttl` is for
    a call proposed before Signoff had policies (its pending call says nothing of a ttl); `tell`:
    people are told of runs, so the step owes them its results, its cards and its ending."""
    state = checkpoint.state
    status = state["status"]
    effects = checkpoint.effects
    waiting = status == "awaiting_approval"
    asked = [effect.key for effect in effects if isinstance(effect, AskAbout)] if waiting else []
    reopened = [effect.key for effect in effects if isinstance(effect, AskMoreOf)] if waiting else []
    ended = status in TERMINAL
    return StepWrite(
        approvals=tuple(_request(state, call_of(state, key), approval_ttl) for key in dict.fromkeys(asked)),
        superseded=tuple(effect.key for effect in effects if isinstance(effect, CallChanged)),
        close_open_approvals=ended,
        refuse_waiting_command=f"the run already ended ({status})" if ended else None,
        overruled=tuple(effect.key for effect in effects if isinstance(effect, Overruled)),
        reopen=_reopening(call_of(state, reopened[-1])) if reopened else None,
        notices=step_notices(checkpoint, tuple(dict.fromkeys(asked))) if tell else (),
    )


def step_notices(checkpoint: Checkpoint, asked: tuple[str, ...]) -> tuple[OfRun, ...]:
    """What a step owes people, in the order they are told: each call's result, the cards of the
    calls it asks about, and how the run ended, if it did."""
    status = checkpoint.state["status"]
    owed: list[OfRun] = [TellResult(entry=thawed(entry)) for entry in checkpoint.new_history
                             if entry["role"] == "tool"]
    if asked:
        owed.append(PostCards(keys=asked))
    if status in ENDINGS:
        owed.append(TellEnd(status=status))
    return tuple(owed)


def call_of(state: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """The call with `key` the run waits on (as JSON): its pending call, or one of its turn's batch."""
    pending = state.get("pending")
    if pending and pending.get("key") == key:
        return pending  # type: ignore[no-any-return]
    for call in (state.get("batch") or {}).get("calls", []):
        if call.get("key") == key and call.get("pending"):
            return call["pending"]  # type: ignore[no-any-return]
    raise KeyError(f"the step asks about {key}, which the run does not wait on")


def _request(state: Mapping[str, Any], pending: Mapping[str, Any], ttl: timedelta) -> ApprovalRequest:
    asked = pending.get("asked")
    return ApprovalRequest(step=pending["step"], tool=pending["tool"], args=pending["args"], key=pending["key"],
                           digest=call_digest(pending["tool"], pending["args"], pending["key"],
                                              (pending.get("preview") or {}).get("digest")),
                           ttl=timedelta(seconds=asked["ttl_seconds"]) if asked else ttl,
                           contract=pending.get("contract"), quorum=asked["quorum"] if asked else 1,
                           asked=thawed(asked) if asked else None, asked_with=asked_with(state, pending))


def asked_with(state: Mapping[str, Any], pending: Mapping[str, Any]) -> dict[str, Any]:
    """What the run shows of `pending` as it asks about it, kept with the approval for every later
    drawing of its card: the preview it is bound to, and the budget figures as they are now."""
    preview = pending.get("preview")
    return {"preview": thawed(preview) if preview else None, "budget": thawed(state["budget"]),
            "usage": thawed(state["usage"]), "steps": state["steps"]}


def _reopening(pending: Mapping[str, Any]) -> Reopening:
    asked = pending["asked"]
    return Reopening(key=pending["key"], quorum=asked["quorum"], asked=thawed(asked))


# -- people's requests of a run --------------------------------------------------------------


@dataclass(frozen=True)
class CommandRule:
    """Which statuses a person's request needs the run in, and what taking it does at once."""

    accepts: frozenset[str]
    closes_pending_approval: bool = False
    """Taking the request closes the run's pending approval as `cancelled` in the same transaction,
    so a late click sees "cancelled", not a live button."""
    supersedes_its_approval: bool = False
    """The request names an approval (`approval_id`, `digest`) that must still be pending: taking it
    closes that approval as `superseded` in the same transaction, and is refused if it is not
    pending any more (someone decided it first)."""


CANCEL = CommandRule(NOT_ENDED, closes_pending_approval=True)
EXTEND_BUDGET = CommandRule(frozenset({"budget_exhausted"}))
EXTEND_STALLED = CommandRule(frozenset({"stalled"}))
RETRY = CommandRule(frozenset({"failed"}))
RECONCILE = CommandRule(frozenset({"needs_reconciliation"}))
EDIT = CommandRule(frozenset({"awaiting_approval"}), supersedes_its_approval=True)
REQUEST_AGAIN = CommandRule(REOPENABLE)


def claimable(status: str, command: Any) -> bool:
    """Whether a worker may take the run: it has not ended, or it ended as a person may open again
    and a request to do so waits for it (no other ended run is ever moved again)."""
    return status in NOT_ENDED or (status in REOPENABLE and command is not None)


def command_refusal(status: str | None, waiting: Any, version: int | None,
                    shown_version: int | None) -> CommandRefusal:
    """Why a request was not taken, from the run as the store found it (`status` None: no such run)."""
    if status is None:
        return CommandRefusal("no such run")
    if isinstance(waiting, dict):
        return CommandRefusal(f"another request ({waiting.get('op')}) is already waiting for this run",
                              waiting=waiting)
    if shown_version is not None and version != shown_version:
        return CommandRefusal(f"this message is out of date: the run is now {status}", stale=True)
    return CommandRefusal(f"the run is {status}")


def is_retry_request(command: Any) -> bool:
    """A person asked to run again a call whose outcome is unknown (Retry on a reconciliation)."""
    return isinstance(command, dict) and command.get("op") == "reconcile" and command.get("action") == "retry"


def execution_started(key: str, tool: str, **why: str | int) -> dict[str, Any]:
    """The event of a call's first start, saying what let it: the approval it used up
    (`approval_id`), the grant (`granted_by`, `grant_use`) or the policy rule (`allowed_by`)."""
    return audit_event("execution_started", key=key, tool=tool, **why)
