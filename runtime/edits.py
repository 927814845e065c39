"""A person's edit of a call waiting for approval: whether the edit may be made (the one check the
edit form answers with and the edit itself applies) and each change as people and the model read it,
secrets by their fingerprints only. Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from signoff.runtime.decisions import jsonable
from signoff.runtime.judging import repeat_of
from signoff.runtime.pending_calls import PendingCall
from signoff.runtime.schema import RunState
from signoff.runtime.state import Redacted, is_secret_name
from signoff.tools.base import CheckedArgs, Tool


def checked_edit(state: RunState, pending: PendingCall | None, tool: Tool, args: Any) -> CheckedArgs:
    """The edited arguments `args` of `pending` as its tool validates them; `ValueError` saying why
    the edit cannot be made: not a call the tool takes, unchanged, or a repeat of a side effect the
    run settled or of another call of its turn (refused as the model's own proposal would be).
    What the edit form answers and what the edit does are this one check. (`pending` None: the run
    no longer waits on the call; only the arguments are checked, and the edit itself is refused.)"""
    checked = tool.checked(jsonable(args))  # ValueError: not a call this tool takes
    if pending is None:
        return checked
    if checked.args == pending.args:
        raise ValueError("nothing was changed")
    repeated = repeat_of(state, tool.name, checked.args, pending.key) if tool.side_effect else None
    if repeated is not None:
        raise ValueError(f"the edited call would repeat: {repeated}")
    return checked


def argument_changes(before: Mapping[str, Any], after: Mapping[str, Any],
                     secrets: frozenset[str] = frozenset()) -> list[str]:
    """Each argument a person changed, as people and the model read it: `amount_usd: "500" -> "50"`,
    `note: added "..."`, `cc: removed`; a secret one (named in `secrets`) only by its fingerprints,
    `iban: changed [redacted: 22 chars, #1a2b3c4d] -> [redacted: 22 chars, #5e6f7a8b]`."""
    changes = []
    for name in sorted({*before, *after}):  # by name: the same list whichever order the arguments came in
        secret = is_secret_name(name, secrets)
        shown = _fingerprinted if secret else _shown
        if name not in after:
            changes.append(f"{name}: removed")
        elif name not in before:
            changes.append(f"{name}: added {shown(after[name])}")
        elif before[name] != after[name]:
            changes.append(f"{name}:{' changed' if secret else ''} {shown(before[name])} -> {shown(after[name])}")
    return changes


def _fingerprinted(value: Any) -> str:
    return str(Redacted.of(value))


def _shown(value: Any, limit: int = 120) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= limit else text[:limit - 1] + "…"
