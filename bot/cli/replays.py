"""What `signoff runs replay` prints: one run's verdict, the first divergence, and a summary. Pure."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from signoff.runtime.replay import Replayed

_EVENT_CHARS = 400


def verdict_lines(result: Replayed) -> list[str]:
    """`run-1: identical (15 loop events)`, or where it diverged with what was expected and what came."""
    if result.divergence is None:
        return [f"{result.run_id}: identical ({result.compared} loop events, ends {result.status})"]
    where = result.divergence
    step = f"step {where.step}" if where.step is not None else "the start"
    return [
        f"{result.run_id}: DIVERGED at {step} (loop event {where.index + 1} of {result.compared})",
        f"  expected: {_event(where.expected, 'nothing more')}",
        f"  got:      {_event(where.got, 'nothing more: the replay stopped here')}",
    ]


def summary_line(results: Sequence[Replayed], seconds: float) -> str:
    diverged = [r.run_id for r in results if r.divergence is not None]
    per_run = f", {seconds / len(results) * 1000:.1f} ms a run" if results else ""
    tail = f": {', '.join(diverged[:10])}{' …' if len(diverged) > 10 else ''}" if diverged else ""
    return (f"replayed {len(results)} runs in {seconds:.2f} s{per_run}: {len(results) - len(diverged)} identical, "
            f"{len(diverged)} diverged{tail}")


def _event(event: dict[str, Any] | None, missing: str) -> str:
    if event is None:
        return missing
    rest = {k: v for k, v in event.items() if k != "type"}
    text = f"{event.get('type')} {json.dumps(rest, sort_keys=True, ensure_ascii=False, default=str)}"
    return text if len(text) <= _EVENT_CHARS else text[:_EVENT_CHARS] + "…"
