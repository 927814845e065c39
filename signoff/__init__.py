"""Signoff: agents act, humans sign off.

What user code imports: `from signoff import Tool, ToolFailed, Agent, Budget`. The engine, the tool
contract and the Slack edge live in `signoff.runtime`, `signoff.tools` and `signoff.bot`; nothing is
installed under a bare top-level name, so a project's own `tools/`, `bot/` or `runtime/` package
cannot shadow ours, nor ours theirs.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # The public names are the runtime's, listed once there.
    from signoff.runtime import *  # noqa: F403
    from signoff.runtime import __all__ as __all__


def _runtime() -> ModuleType:
    return importlib.import_module("signoff.runtime")


def _public_name(name: str) -> Any:
    """`signoff.Agent` and the rest: the runtime is imported when one of its names is first asked
    for, not with the package, because every `signoff.*` import runs this file first and
    `signoff --help` needs none of the runtime."""
    if name == "__all__" or (not name.startswith("__") and name in _runtime().__all__):
        return getattr(_runtime(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _public_names() -> list[str]:
    return sorted({*globals(), *_runtime().__all__})


if not TYPE_CHECKING:  # seen by the interpreter only: the type checker reads the import above
    __getattr__, __dir__ = _public_name, _public_names
