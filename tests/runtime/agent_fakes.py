"""Scripted policies, recording tools, a manual clock and a checkpoint recorder for the runtime tests.

Everything here is plain data in, data out, so a test can build "a new process" by building the
objects again and resuming from a JSON blob.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict

from signoff.runtime import Checkpoint, Tool


def call(tool: str, **args: Any) -> dict[str, Any]:
    """A decision that calls `tool` with `args`."""
    return {"tool": tool, "args": args}


def final(text: str) -> dict[str, Any]:
    """A decision that ends the run with `text`."""
    return {"final": text}


class Script:
    """A policy that answers the n-th policy call with the n-th scripted decision.

    It counts the assistant entries in the history it is shown (each step appends exactly one),
    so it is a pure function of the history: a fresh `Script` over the same decisions continues
    a resumed run exactly where the original stopped.
    """

    def __init__(self, *decisions: Any, then: Any = None) -> None:
        self.decisions = list(decisions)
        self.then = final("done") if then is None else then
        self.seen: list[list[dict[str, Any]]] = []

    def __call__(self, history: list[dict[str, Any]]) -> Any:
        self.seen.append(history)
        n = sum(1 for entry in history if entry["role"] == "assistant")
        decision = self.decisions[n] if n < len(self.decisions) else self.then
        return copy.deepcopy(decision)

    @property
    def calls(self) -> int:
        return len(self.seen)


@dataclass
class Outbox:
    """Every tool execution, in order, as (tool, args, key)."""

    runs: list[tuple[str, dict[str, Any], str]] = field(default_factory=list)

    def of(self, tool: str) -> list[tuple[str, dict[str, Any], str]]:
        return [r for r in self.runs if r[0] == tool]


class SearchArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    query: str
    limit: int = 3


class EmailArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    to: str
    subject: str
    body: str = ""


def search_tool(outbox: Outbox, **options: Any) -> Tool:
    """Read-only search; an empty query raises `ValueError("empty query")`."""

    def search(args: dict[str, Any], key: str) -> dict[str, Any]:
        outbox.runs.append(("search", args, key))
        if not args["query"].strip():
            raise ValueError("empty query")
        return {"hits": [f"{args['query']} #{i}" for i in range(1, args["limit"] + 1)]}

    return Tool("search", search, args_model=SearchArgs, description="Search the wiki.", **options)


def send_email_tool(outbox: Outbox, **options: Any) -> Tool:
    """Side-effecting email; returns a message id derived from the idempotency key."""

    def send_email(args: dict[str, Any], key: str) -> dict[str, Any]:
        outbox.runs.append(("send_email", args, key))
        return {"message_id": f"msg-{key}"}

    return Tool("send_email", send_email, side_effect=True, args_model=EmailArgs,
                description="Send an email.", idempotent=True, **options)


def standard_tools(outbox: Outbox) -> list[Tool]:
    return [search_tool(outbox), send_email_tool(outbox)]


class ManualClock:
    """A clock that only moves when told to."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass(frozen=True)
class Snapshot:
    """A checkpoint copied at the moment it was delivered (its `state` is live and keeps changing)."""

    blob: str
    new_history: list[dict[str, Any]]
    events: list[dict[str, Any]]
    execution: dict[str, Any] | None


class Recorder:
    """`on_checkpoint` and `on_event` sinks that copy what they receive."""

    def __init__(self) -> None:
        self.snapshots: list[Snapshot] = []
        self.events: list[dict[str, Any]] = []

    def on_checkpoint(self, checkpoint: Checkpoint) -> None:
        self.snapshots.append(Snapshot(
            blob=json.dumps(checkpoint.state, sort_keys=True),
            new_history=copy.deepcopy(checkpoint.new_history),
            events=copy.deepcopy(checkpoint.events),
            execution=copy.deepcopy(checkpoint.execution),
        ))

    def on_event(self, event: dict[str, Any]) -> None:
        self.events.append(copy.deepcopy(event))

    def hooks(self) -> dict[str, Callable[..., None]]:
        return {"on_checkpoint": self.on_checkpoint, "on_event": self.on_event}

    def types(self) -> list[str]:
        return [e["type"] for e in self.events]

    def of(self, event_type: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == event_type]


def observations(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool and runtime entries of the history: what the model was told."""
    return [e for e in state["history"] if e["role"] in ("tool", "runtime")]


def last_observation(state: dict[str, Any]) -> dict[str, Any]:
    return observations(state)[-1]
