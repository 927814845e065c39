"""How each HTTP tool is gated: by its method, under the operator's word.

- GET and HEAD are read-only: they run without asking. Every other method is a side effect, which
  waits for an approval and carries `Idempotency-Key: <run_id:step>`.
- A side effect is not idempotent (after a crash it stops for a person rather than run again)
  unless the tool says `idempotent: true`.
- A tool's `side_effect` and `idempotent` win. Making a tool stricter is always allowed; loosening
  it needs `trusted: true` on its API, which `config` checks before any tool is made.
- The time limit is the tool's `timeout`, else the API's, else 30 s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from signoff.tools.http.config import DEFAULT_TIMEOUT_S, READ_ONLY_METHODS, ApiConfig, EndpointConfig

Source = Literal["method", "override", "api", "default"]


@dataclass(frozen=True)
class HttpGate:
    """What one HTTP tool may do without a person, and where each part of that came from."""

    side_effect: bool
    idempotent: bool
    timeout_s: float
    side_effect_from: Source
    idempotent_from: Source
    timeout_from: Source

    def summary(self) -> str:
        """`approval (method), not idempotent (default), 30s (api)`, for `signoff check`."""
        kind = "approval" if self.side_effect else "read-only"
        parts = [f"{kind} ({self.side_effect_from})"]
        if self.side_effect:
            parts.append(f"{'idempotent' if self.idempotent else 'not idempotent'} ({self.idempotent_from})")
        parts.append(f"{self.timeout_s:g}s ({self.timeout_from})")
        return ", ".join(parts)


def resolve_gate(api: ApiConfig, tool: EndpointConfig) -> HttpGate:
    """The gate of `tool` on `api`: from its method, then its overrides (already checked against `trusted`)."""
    side_effect = tool.method not in READ_ONLY_METHODS if tool.side_effect is None else tool.side_effect
    timeout_from: Source
    if tool.timeout is not None:
        timeout_s, timeout_from = tool.timeout, "override"
    elif api.timeout is not None:
        timeout_s, timeout_from = api.timeout, "api"
    else:
        timeout_s, timeout_from = DEFAULT_TIMEOUT_S, "default"
    return HttpGate(
        side_effect=side_effect, idempotent=side_effect and tool.idempotent is True, timeout_s=timeout_s,
        side_effect_from="method" if tool.side_effect is None else "override",
        idempotent_from="default" if tool.idempotent is None else "override",
        timeout_from=timeout_from,
    )
