"""What one commit's events say, read the same way by the logs, the metrics and the traces. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from signoff.runtime.decisions import reported_count
from signoff.runtime.records import RunRecord
from signoff.runtime.schema import STOPPED, TERMINAL

MODEL_FAILURES = frozenset({"model unavailable", "model rejected credentials", "policy error"})
"""The stop reasons of a run whose model (or policy) could not answer (`agent.Agent._ask`)."""

ENDING_EVENTS: Mapping[str, str] = {"finished": "done", **{status: status for status in (TERMINAL | STOPPED) - {"done"}}}
"""Event type -> the status a run reached with it: `finished` for an answer, the status itself for a stop."""

ModelOutcome = Literal["ok", "malformed", "error"]


@dataclass(frozen=True)
class ModelTurn:
    """One call of the run's model, as the commit that recorded it says."""

    model: str
    """The run's model spec, e.g. `openai:gpt-4o-mini` (what it was configured with, so a metric
    label has as few values as there are configured models)."""
    step: int
    outcome: ModelOutcome
    said: str
    """What came of it: `tool <name>`, `final`, or why it was unusable or failed."""
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0


def model_turn(run: RunRecord, events: Sequence[Mapping[str, Any]]) -> ModelTurn | None:
    """The model call this commit recorded, if it recorded one (a commit records at most one)."""
    for event in events:
        if event["type"] == "decision":
            step = int(event.get("step") or 0)
            kind = event.get("kind")
            outcome: ModelOutcome = "malformed" if kind == "malformed" else "ok"
            said = f"tool {event.get('tool')}" if kind == "tool" else "final" if kind == "final" else str(
                event.get("error") or "malformed")
            tokens_in, tokens_out, cost = turn_usage(run, step)
            return ModelTurn(run.model, step, outcome, said, tokens_in, tokens_out, cost)
        if event["type"] == "failed" and event.get("reason") in MODEL_FAILURES:
            # Not charged: a reply that never came reported no usage.
            return ModelTurn(run.model, int(event.get("step") or 0) + 1, "error", str(event["reason"]))
    return None


def turn_usage(run: RunRecord, step: int) -> tuple[int, int, float]:
    """(input tokens, output tokens, cost) of step `step`'s reply, as it was charged to the run.

    Read from the reply's history entry (its usage as reported), counted as `charge_usage` counts
    it, so the turns' usage adds up to the run's.
    """
    history = run.state.get("history") or ()
    for entry in reversed(history):
        if entry.get("role") == "assistant" and entry.get("step") == step:
            usage = entry.get("usage") or {}
            return (int(reported_count(usage.get("input_tokens"))), int(reported_count(usage.get("output_tokens"))),
                    float(reported_count(usage.get("cost_usd"), float)))
        if isinstance(entry.get("step"), int) and entry["step"] < step:
            break  # entries are in step order: this step's reply is not here
    return 0, 0, 0.0


def ending(event: Mapping[str, Any]) -> str | None:
    """The status the run reached with `event` (done, budget_exhausted, ...), or None."""
    return ENDING_EVENTS.get(str(event["type"]))


def provider_and_model(spec: str) -> tuple[str, str]:
    """`openai:gpt-4o-mini` -> ("openai", "gpt-4o-mini"); a spec without a provider is its own model."""
    provider, sep, model = spec.partition(":")
    return (provider, model) if sep else ("unknown", spec)


def seconds(value: Any) -> float:
    """A duration from an event (seconds, possibly missing or not a number) as a float >= 0."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return number if number > 0 else 0.0
