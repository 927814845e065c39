"""`scripted:<path>`: replays a fixed list of decisions. For demos and tests; it is not a model.

A decision may be a batch, `{"calls": [{"tool", "args", "call_id"}, ...]}`, returned as it is.
The position in the script is the number of model replies in the history (the distinct `step`s
of its assistant entries: a batch records one entry per call, all with the reply's step), not a
counter, so a run resumed from a checkpoint in another process continues at the right decision.
"""

from __future__ import annotations

import copy
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from signoff.runtime.errors import ConfigError


class ScriptedPolicy:
    """A policy that returns `decisions[i]` for the i-th model call of a run."""

    def __init__(self, decisions: list[dict[str, Any]], name: str = "scripted") -> None:
        problems = [f"decision {i} is not a JSON object" for i, d in enumerate(decisions) if not isinstance(d, dict)]
        if problems:
            raise ConfigError(problems)
        self.decisions = copy.deepcopy(list(decisions))
        self.name = name
        self.model = {"name": f"{name} (scripted, not a model)", "system_prompt_sha256": None}
        self._counted: OrderedDict[int, _Counted] = OrderedDict()
        """By the identity of a run's first history entry: its replies counted so far, so each call
        counts only the entries added since the last (the agent hands the same entries every time)."""
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedPolicy:
        """Load a JSON list of decisions, e.g. `[{"tool": "search", "args": {"q": "x"}}, {"final": "done"}]`."""
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read script {str(path)!r}: {exc.strerror or exc}") from None
        except json.JSONDecodeError as exc:
            raise ConfigError(f"script {str(path)!r} is not valid JSON: {exc}") from None
        if not isinstance(data, list):
            raise ConfigError(f"script {str(path)!r} must be a JSON list of decisions")
        return cls(data, name=f"scripted:{path.name}")

    def __call__(self, history: list[dict[str, Any]]) -> dict[str, Any]:
        index = self._replies_so_far(history)
        if index >= len(self.decisions):
            decision: dict[str, Any] = {
                "final": f"The script ran out after {len(self.decisions)} decision(s); "
                         "this run was driven by a script, not a model.",
            }
        else:
            decision = copy.deepcopy(self.decisions[index])
        decision.setdefault("model", dict(self.model))
        return decision


    def _replies_so_far(self, history: list[dict[str, Any]]) -> int:
        """`replies_so_far(history)`, counting only the entries added since this run's last call."""
        if not history:
            return 0
        with self._lock:
            counted = self._counted.pop(id(history[0]), None)
            if counted is None or not counted.continued_by(history):
                counted = _Counted(history[0])
            counted.add(history)
            self._counted[id(history[0])] = counted
            while len(self._counted) > COUNTED_RUNS:
                self._counted.popitem(last=False)
            return len(counted.steps)


COUNTED_RUNS = 64
"""Runs whose replies a scripted policy keeps counted."""


@dataclass
class _Counted:
    first: Any
    """The run's first entry, held so its identity stays its own while it is counted."""
    length: int = 0
    last: Any = None
    steps: set[Any] = field(default_factory=set)

    def continued_by(self, history: list[dict[str, Any]]) -> bool:
        """Whether `history` is the history counted so far with entries added (the same entries)."""
        return (history[0] is self.first and len(history) >= self.length
                and (self.length == 0 or history[self.length - 1] is self.last))

    def add(self, history: list[dict[str, Any]]) -> None:
        self.steps.update(entry.get("step") for entry in history[self.length:] if entry.get("role") == "assistant")
        self.length, self.last = len(history), history[-1]


def replies_so_far(history: list[dict[str, Any]]) -> int:
    """How many replies the policy gave in `history`: one per step with an assistant entry."""
    return len({entry.get("step") for entry in history if entry.get("role") == "assistant"})
