"""A policy's reply read as a turn of the run: its usage charged, and where it came from. Pure.

What a turn records about its origin (`versions`: the model, the system prompt and the tool
catalogue behind it; `usage`: what the reply reported) lets a replay charge the same and name the
deploy that changed a run's behaviour.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, NotRequired, TypedDict

from signoff.runtime.decisions import charge_usage, jsonable
from signoff.runtime.digests import canonical_json
from signoff.runtime.history import ReportedUsage, Versions
from signoff.runtime.schema import LastVersions, RunState
from signoff.tools.base import Tool


@dataclass(frozen=True)
class Catalogue:
    """The tools' contracts, and the hash that names them in a turn's `versions`."""

    digest: str
    contracts: dict[str, str]

    @classmethod
    def of(cls, tools: Mapping[str, Tool]) -> Catalogue:
        contracts = {name: tool.contract for name, tool in sorted(tools.items())}
        return cls(hashlib.sha256(canonical_json(contracts).encode()).hexdigest()[:16], contracts)


class Provenance(TypedDict):
    """What a turn's history entry records about where it came from."""

    versions: Versions
    usage: NotRequired[ReportedUsage]
    """Only when the reply reported some."""


class Turn(NamedTuple):
    """A reply, read (a tuple: one is made for every reply)."""

    decision: Any
    """The reply without its `usage` and `model` keys: a call, a final answer or something malformed."""
    provenance: Provenance
    changes: dict[str, Any]
    """What the turn changes in the run state: usage, model, contracts, last versions."""
    versions_changed: tuple[dict[str, Any], dict[str, Any]] | None = None
    """(was, now) when the model or the system prompt differs from the previous turn's."""


def read_turn(raw: Any, run: RunState, catalogue: Catalogue) -> Turn:
    """Take usage and model metadata off a reply and work out what the turn records."""
    reported = raw.get("usage") if isinstance(raw, dict) else None
    decision, model, usage = charge_usage(raw, run.usage)
    changes: dict[str, Any] = {"usage": usage}
    if model is not None:
        model = jsonable(model)
        changes["model"] = model
    if catalogue.digest not in run.contracts:
        changes["contracts"] = {**run.contracts, catalogue.digest: dict(catalogue.contracts)}
    versions, now = _versions(model, catalogue)
    last = run.last_versions
    changed = None
    if last is not now:  # the same model and prompt as the last turn are the same value (cached)
        changes["last_versions"] = now
        if last is not None and last != now:
            changed = (last.to_json(), now.to_json())
    provenance: Provenance = {"versions": versions}
    if isinstance(reported, dict):
        provenance["usage"] = ReportedUsage.model_validate(
            {k: jsonable(reported[k]) for k in ReportedUsage.model_fields if k in reported})
    return Turn(decision, provenance, changes, changed)


def _versions(model: dict[str, Any] | None, catalogue: Catalogue) -> tuple[Versions, LastVersions]:
    """The model spec, system prompt and tool contracts behind a turn, and its model and prompt."""
    if model is None:
        return _versions_of(None, None, catalogue.digest)
    name, prompt = model.get("name"), model.get("system_prompt_sha256")
    return _versions_of(name if name is None or isinstance(name, str) else str(name),
                        prompt[:16] if isinstance(prompt, str) else None, catalogue.digest)


@functools.lru_cache(maxsize=256)
def _versions_of(model: str | None, prompt: str | None, tools: str) -> tuple[Versions, LastVersions]:
    """Frozen values, so one per combination serves every turn (a run's turns mostly share one)."""
    return Versions(model=model, prompt=prompt, tools=tools), LastVersions(model=model, prompt=prompt)
