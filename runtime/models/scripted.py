"""`scripted:<path>`: replays a fixed list of decisions. For demos and tests; it is not a model.

A decision may be a batch, `{"calls": [{"tool", "args", "call_id"}, ...]}`, returned as it is.
The position in the script is the number of model replies in the history (the distinct `step`s
of its assistant entries: a batch records one entry per call, all with the reply's step), not a
counter, so a run resumed from a checkpoint in another process continues at the right decision.
"""

from __future__ import annotations

import copy
import json
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
        index = replies_so_far(history)
        if index >= len(self.decisions):
            decision: dict[str, Any] = {
                "final": f"The script ran out after {len(self.decisions)} decision(s); "
                         "this run was driven by a script, not a model.",
            }
        else:
            decision = copy.deepcopy(self.decisions[index])
        decision.setdefault("model", dict(self.model))
        return decision


def replies_so_far(history: list[dict[str, Any]]) -> int:
    """How many replies the policy gave in `history`: one per step with an assistant entry."""
    return len({entry.get("step") for entry in history if entry.get("role") == "assistant"})
