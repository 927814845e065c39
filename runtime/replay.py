"""Replay: re-drive a recorded run through the current loop and compare what it does, step by step.

Pure: no model is called, no tool runs and nothing is written. The recorded run supplies the
model's replies (its history's assistant entries, with the usage each reported), the tools'
results (its history's tool entries) and what people did (the decisions, extensions, retries,
reconciliations and cancellations in its audit events). The loop of today's code turns those
into its own audit events, and they are compared with the recorded ones: the same calls proposed
with the same arguments and keys, the same gate decisions, the same budget outcome, the same
ending. The first difference is reported; a refactor that changed nothing reports none.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from signoff.runtime.agent import Agent, NoReply
from signoff.runtime.approval_policy import ApprovalPolicy
from signoff.runtime.budget import Budget
from signoff.runtime.digests import batch_place
from signoff.runtime.errors import (
    DispatchRefused,
    InvalidTransition,
    ModelAuthError,
    ModelUnavailable,
    OutcomeUnknown,
)
from signoff.runtime.judging import Caller
from signoff.runtime.state import load_state
from signoff.runtime.tool_calls import Failed, Ran, Refused, ToolTimeout
from signoff.tools.base import Tool

AGENT_EVENTS = frozenset({
    "run_started", "decision", "approval_requested", "approval_decided", "tool_executed", "tool_failed",
    "finished", "budget_extended", "retried", "reconciled", "budget_exhausted", "stalled", "failed", "cancelled",
    "expired", "needs_reconciliation", "call_reconsidered", "versions_changed", "call_allowed_by_rule",
    "call_denied_by_rule", "approval_reopened", "approval_timed_out", "call_edited", "requested_again",
    "call_handed_to_caller",
})
"""The events the loop itself emits; the store's own (claims, ledger rows, commands) are not replayed."""
_UNCOMPARED = frozenset({"seq", "at", "run_id", "seconds"})
"""What differs from one execution to the next whatever the code: wall time and storage bookkeeping."""
_POLICY_FIELDS = frozenset({"rule", "quorum", "policy", "errors", "approvals"})
"""What the approval policy adds to an event; a recording made before Signoff had policies lacks
them, and is compared without them (under the built-in policy, which asks what it asked)."""
_OUTSIDE = frozenset({"approval_decided", "budget_extended", "retried", "reconciled", "cancelled", "expired",
                      "call_reconsidered", "approval_timed_out", "call_edited", "requested_again"})
"""What came from outside the loop: what people did, and a deploy changing a pending call's tool."""
_MODEL_STOPS = {"model unavailable": ModelUnavailable, "model rejected credentials": ModelAuthError}


@dataclass(frozen=True)
class Divergence:
    """Where the replay first did something else than the recording."""

    index: int
    """Position in the run's loop events."""
    step: int | None
    expected: dict[str, Any] | None
    """The recorded event (None: the replay did more than the recording)."""
    got: dict[str, Any] | None
    """The replayed event (None: the replay stopped short)."""


@dataclass(frozen=True)
class Replayed:
    """The outcome of one replay."""

    run_id: str
    status: str
    """Where the replayed run ended."""
    compared: int
    """Loop events compared."""
    divergence: Divergence | None

    @property
    def identical(self) -> bool:
        return self.divergence is None


def loop_events(events: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The loop's own events of a run's audit log, without what differs between executions."""
    return [_comparable(e) for e in events if e.get("type") in AGENT_EVENTS]


def replay(state: Mapping[str, Any] | str, events: Iterable[Mapping[str, Any]], tools: dict[str, Tool] | Iterable[Tool],
           *, stall_after: int | None = 3, approval_policy: ApprovalPolicy | None = None,
           caller: Caller | None = None) -> Replayed:
    """Re-drive the run recorded as `state` (with its history) and audit `events` through today's
    loop and `tools`' contracts, under `approval_policy` (by default the built-in one) as it
    applied to `caller`; see the module docstring."""
    recorded_state = load_state(dict(state) if isinstance(state, Mapping) else state)
    expected = loop_events(events)
    recording = _Recording(recorded_state, expected)
    produced: list[dict[str, Any]] = []
    start = next((e for e in expected if e["type"] == "run_started"), None)
    budget = Budget(**{k: v for k, v in (start or {}).get("budget", recorded_state["budget"]).items()
                       if k in Budget.__dataclass_fields__})
    agent = Agent(recording.policy(produced), tools, run_id=recorded_state["run_id"], budget=budget,
                  executor=recording.executor(produced),
                  on_event=lambda e: produced.append(_aligned(e, expected, produced)),
                  stall_after=stall_after, approval_policy=approval_policy, caller=caller)
    try:
        _drive(agent, recorded_state, expected, produced)
    except InvalidTransition as exc:  # the replayed run is somewhere a recorded action cannot apply
        produced.append({"type": "replay_refused", "reason": str(exc)})
    return Replayed(recorded_state["run_id"], agent.status, len(expected), _first_difference(expected, produced))


def _drive(agent: Agent, state: dict[str, Any], expected: list[dict[str, Any]], produced: list[dict[str, Any]]) -> None:
    agent.start(state["goal"])
    while len(produced) < len(expected) and produced == expected[: len(produced)]:
        event = expected[len(produced)]
        if agent.status == "awaiting_caller" and _caller_did(agent, state, event):
            continue
        if event["type"] not in _OUTSIDE:
            return  # the recording goes on where the replay cannot follow: the comparison says where
        _act(agent, state, event)


def _caller_did(agent: Agent, state: dict[str, Any], event: dict[str, Any]) -> bool:
    """Report what the caller said of the call the run handed it, as recorded; False: the recording
    has the caller do nothing here."""
    match event["type"]:
        case "tool_executed":
            agent.caller_reported(Ran(_recorded_result(state, event.get("key")), 0.0))
        case "tool_failed":
            agent.caller_reported(Failed(str(event.get("error") or ""), 0.0))
        case "needs_reconciliation":
            agent.caller_lost(str(event.get("reason") or ""))
        case "expired" | "failed" as status:  # it could not start: its approval, or its lease, lapsed
            agent.caller_reported(Refused(str(event.get("reason") or "").removeprefix("not executed: "), status))
        case _:
            return False
    return True


def _act(agent: Agent, state: dict[str, Any], event: dict[str, Any]) -> None:
    """Do what the person (or the deploy) did in the recording."""
    match event["type"]:
        case "approval_decided":
            agent.decide(event["approved"], event.get("note") or "", by=event.get("by"),
                         approvals=int(event.get("approvals") or 1), key=event.get("key"),
                         broke_glass=event.get("break_glass") is True)
        case "budget_extended":
            agent.extend(**event.get("limits", {}))
        case "retried":
            agent.retry()
        case "reconciled":
            agent.reconcile(event["action"], _recorded_result(state, event.get("key")), event.get("note") or "",
                            by=event.get("by"))
        case "cancelled":
            agent.cancel(event.get("reason") or "", by=event.get("by"))
        case "expired":
            agent.expire(event.get("reason") or "approval expired")
        case "approval_timed_out":
            agent.expire(event.get("reason") or "approval expired", key=event.get("key"))
        case "call_reconsidered":
            agent.reconsider(event.get("reason") or "the tool changed", key=event.get("key"))
        case "requested_again":
            agent.request_again(by=event.get("by"))
        case "call_edited":  # the arguments as audited: a secret among them replays as its placeholder
            agent.edit(event.get("now") or {}, by=event.get("by"), key=event.get("key"))


class _Recording:
    """The recorded run as the replayed loop's policy and executor."""

    def __init__(self, state: dict[str, Any], expected: list[dict[str, Any]]) -> None:
        by_step: dict[Any, list[dict[str, Any]]] = {}
        for entry in state["history"]:
            if entry.get("role") == "assistant":
                by_step.setdefault(entry.get("step"), []).append(entry)
        self.turns = list(by_step.values())
        """Each model turn's entries: one, or one per call of a turn that made several."""
        self.results = {(e.get("step"), e.get("call_id")): e for e in state["history"] if e.get("role") == "tool"}
        self.expected = expected
        self.next_turn = 0

    def policy(self, produced: list[dict[str, Any]]) -> Any:
        def answer(history: list[dict[str, Any]]) -> Any:
            upcoming = self.expected[len(produced)] if len(produced) < len(self.expected) else None
            if upcoming is not None and upcoming["type"] in _OUTSIDE:
                return NoReply()  # a person acts before the next model turn: the loop stops to let them
            if upcoming is not None and upcoming["type"] == "failed" and upcoming.get("reason") in _MODEL_STOPS:
                raise _MODEL_STOPS[upcoming["reason"]](upcoming.get("detail") or upcoming["reason"])
            if self.next_turn >= len(self.turns):
                if upcoming is None:  # the recording stops with the run still going (recorded mid-run)
                    return NoReply()
                raise ModelUnavailable("the recording has no more model replies")
            turn = self.turns[self.next_turn]
            self.next_turn += 1
            return _decision(turn)
        return answer

    def executor(self, produced: list[dict[str, Any]]) -> Any:
        def run(tool: Tool, args: dict[str, Any], key: str) -> Any:
            step, place = _step_of(key)
            outcome = next((e for e in self.expected[len(produced):] if e.get("key") == key and e["type"] in (
                "tool_executed", "tool_failed", "needs_reconciliation", "failed", "expired")), None)
            turn = next((t for t in self.turns if t and t[0].get("step") == step), [])
            if place is not None and place <= len(turn):  # a turn's n-th call: its own recorded result
                recorded = self.results.get((step, turn[place - 1].get("call_id")))
            else:
                recorded = next((e for (s, _), e in self.results.items() if s == step and e.get("tool") == tool.name),
                                None)
            match outcome:
                case {"type": "tool_executed"}:
                    return recorded.get("result") if recorded else None
                case {"type": "tool_failed", "error": error} if str(error).startswith("timeout: "):
                    raise ToolTimeout(str(error).removeprefix("timeout: "))
                case {"type": "tool_failed", "error": error}:
                    raise _RecordedFailure(str(error))
                case {"type": "needs_reconciliation", "reason": reason}:
                    raise OutcomeUnknown(str(reason))
                case {"type": "failed" | "expired" as status, "reason": reason}:
                    raise DispatchRefused(str(reason).removeprefix("not executed: "), status)
                case _:
                    raise OutcomeUnknown(f"the recording has no outcome for {key}")
        return run


class _RecordedFailure(Exception):
    """A tool failure as recorded: the loop reports it as `_RecordedFailure: <recorded text>`, which
    `_comparable` turns back into the recorded text."""


def _step_of(key: str) -> tuple[int, int | None]:
    """The step of `run_id:step` (or `run_id:step.n`, and n)."""
    step = key.rsplit(":", 1)[1]
    return int(step.split(".")[0]), batch_place(key)


def _decision(entries: list[dict[str, Any]]) -> Any:
    """The policy reply that made a turn, from its entries (several: a reply of several calls)."""
    turn = entries[0]
    versions = turn.get("versions") or {}
    extra: dict[str, Any] = {"model": {"name": versions.get("model"), "system_prompt_sha256": versions.get("prompt")}}
    if isinstance(turn.get("usage"), dict):
        extra["usage"] = dict(turn["usage"])
    said = {k: turn[k] for k in ("text", "note") if k in turn}
    if len(entries) > 1:
        calls = [{"tool": e["tool"], "args": e.get("args", {}), "call_id": e.get("call_id")} for e in entries]
        return {"calls": calls, **said, **extra}
    if "final" in turn:
        return {"final": turn["final"], **extra}
    if "tool" in turn:
        return {"tool": turn["tool"], "args": turn.get("args", {}), "call_id": turn.get("call_id"), **extra, **said}
    return {"error": "the recorded reply could not be used", **extra}


def _recorded_result(state: dict[str, Any], key: str | None) -> Any:
    step, place = _step_of(key) if key else (None, None)
    history = state["history"]
    if place is not None:  # a turn's n-th call: the result told under its call id
        calls = [e for e in history if e.get("role") == "assistant" and e.get("step") == step and "tool" in e]
        call_id = calls[place - 1].get("call_id") if place <= len(calls) else None
        history = [e for e in history if e.get("call_id") == call_id]
    results = [e for e in history if e.get("role") == "tool" and e.get("step") == step and "result" in e]
    return results[-1]["result"] if results else None


def _aligned(event: Mapping[str, Any], expected: list[dict[str, Any]], produced: list[dict[str, Any]]) -> dict[str, Any]:
    """`event` as compared with the recorded event in its place: without the policy's fields when
    that was recorded without them."""
    out = _comparable(event)
    recorded = expected[len(produced)] if len(produced) < len(expected) else None
    if recorded is not None and recorded.get("type") == out.get("type") and not _POLICY_FIELDS & recorded.keys():
        out = {k: v for k, v in out.items() if k not in _POLICY_FIELDS}
    return out


def _comparable(event: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in event.items() if k not in _UNCOMPARED}
    if isinstance(out.get("usage"), dict):
        out["usage"] = {k: v for k, v in out["usage"].items() if k != "seconds"}
    if out.get("type") == "tool_failed" and isinstance(out.get("error"), str):
        out["error"] = out["error"].removeprefix(f"{_RecordedFailure.__name__}: ")
    if out.get("type") == "decision" and out.get("kind") == "malformed":
        out.pop("error", None)  # the recorded reply's text is not kept whole, so neither is its complaint
    return out


def _first_difference(expected: list[dict[str, Any]], produced: list[dict[str, Any]]) -> Divergence | None:
    for index in range(max(len(expected), len(produced))):
        want = expected[index] if index < len(expected) else None
        got = produced[index] if index < len(produced) else None
        if want != got:
            step = (want or got or {}).get("step")
            return Divergence(index, step if isinstance(step, int) else None, want, got)
    return None
