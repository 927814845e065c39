"""How each MCP tool is gated: from the server's annotations, failing closed, under the operator's word.

- `readOnlyHint: true` makes a tool read-only; anything else (false, absent, no annotations at
  all) makes it a side effect, which waits for an approval.
- `idempotentHint: true` makes it idempotent (re-run with the same key after a crash); anything
  else does not.
- An override in the server's entry (`"tools": {"git_status": {"side_effect": false}}`) wins, but
  annotations come from the server and so does the tool: unless the operator marks the server
  `"trusted": true`, an override may only make a tool stricter (a side effect, not idempotent).
  A looser one is refused and the tool keeps its stricter gate, saying so.
- The time limit is the tool's override, else the server's `timeout`, else 30 s.

A policy file (a later issue) plugs in as a `GateRule`, applied after all of the above.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from signoff.tools.mcp.config import DEFAULT_TIMEOUT_S, ServerConfig, ToolOverride

Source = Literal["annotation", "override", "default", "server"]


@dataclass(frozen=True)
class Gate:
    """What one tool may do without a person, and where each part of that came from."""

    side_effect: bool
    idempotent: bool
    timeout_s: float
    side_effect_from: Source
    idempotent_from: Source
    timeout_from: Source
    redact: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()
    """Overrides that would have loosened the gate of a tool on an untrusted server, as sentences."""

    def summary(self) -> str:
        """`approval (annotation), not idempotent (default), 30s (default)`, for `signoff tools` and `check`."""
        kind = "approval" if self.side_effect else "read-only"
        parts = [f"{kind} ({self.side_effect_from})"]
        if self.side_effect:
            parts.append(f"{'idempotent' if self.idempotent else 'not idempotent'} ({self.idempotent_from})")
        parts.append(f"{self.timeout_s:g}s ({self.timeout_from})")
        parts.extend(f"refused: {why}" for why in self.refused)
        return ", ".join(parts)


GateRule = Callable[[str, str, Gate], Gate]
"""`(server, tool, gate) -> gate`: a rule applied after the annotations and the overrides (the seam
where a policy file will decide; none is built in)."""


def resolve_gate(server: ServerConfig, tool: str, annotations: dict[str, Any] | None,
                 rules: Sequence[GateRule] = ()) -> Gate:
    """The gate of `tool` on `server`, from its annotations (`readOnlyHint`, `idempotentHint`, as the
    server sent them, or None) and the server's entry."""
    hints = annotations or {}
    read_only = hints.get("readOnlyHint") is True
    idempotent = hints.get("idempotentHint") is True
    gate = Gate(
        side_effect=not read_only, idempotent=idempotent, timeout_s=server.timeout or DEFAULT_TIMEOUT_S,
        side_effect_from="annotation" if "readOnlyHint" in hints else "default",
        idempotent_from="annotation" if "idempotentHint" in hints else "default",
        timeout_from="server" if server.timeout else "default",
    )
    override = server.tools.get(tool)
    if override is not None:
        gate = _overridden(gate, override, trusted=server.trusted)
    for rule in rules:
        gate = rule(server.name, tool, gate)
    return gate


def _overridden(gate: Gate, override: ToolOverride, *, trusted: bool) -> Gate:
    refused = list(gate.refused)
    changes: dict[str, Any] = {"redact": gate.redact + override.redact}
    if override.side_effect is not None:
        # Stricter means "asks a person": turning a read-only tool into a side effect.
        if trusted or override.side_effect or not gate.side_effect:
            changes.update(side_effect=override.side_effect, side_effect_from="override")
        else:
            refused.append('"side_effect": false needs "trusted": true on the server')
    if override.idempotent is not None:
        # Stricter means "never re-run by itself after a crash": not idempotent.
        if trusted or not override.idempotent or gate.idempotent:
            changes.update(idempotent=override.idempotent, idempotent_from="override")
        else:
            refused.append('"idempotent": true needs "trusted": true on the server')
    if override.timeout is not None:
        changes.update(timeout_s=override.timeout, timeout_from="override")
    return replace(gate, **changes, refused=tuple(refused))
