"""Signoff's two surfaces and what they share: settings, wiring, the words (`words.py`) and the
argument lines (`arguments.py`) both say; the Slack edge in `slack/`, the CLI and terminal in `cli/`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from signoff.bot.settings import ENV_DESCRIPTIONS, ENV_VARS, Settings

__all__ = ["ENV_DESCRIPTIONS", "ENV_VARS", "Settings"]


def __getattr__(name: str) -> Any:
    # Imported when first asked for, not with the package: every `signoff.bot.*` import runs this
    # file, and `signoff --help` needs no settings model.
    if name in __all__:
        from signoff.bot import settings

        return getattr(settings, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
