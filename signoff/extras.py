"""How to install one of Signoff's extras, worded once for every message that needs it.

Signoff is installed from a clone or from a wheel built in one; no package index has it, so a hint
never names Signoff to pip as a package to fetch.
"""

from __future__ import annotations


def install_extra(extra: str) -> str:
    """The command that adds `extra` (e.g. `postgres`, `mcp`) to an install of Signoff."""
    return (f'pip install -e ".[{extra}]" in a clone of Signoff (or its wheel with [{extra}]; '
            "see the getting-started guide)")
