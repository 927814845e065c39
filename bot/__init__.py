"""Signoff's two surfaces and what they share: settings, wiring, the words (`words.py`) and the
argument lines (`arguments.py`) both say; the Slack edge in `slack/`, the CLI and terminal in `cli/`."""

from signoff.bot.settings import ENV_DESCRIPTIONS, ENV_VARS, Settings

__all__ = ["ENV_DESCRIPTIONS", "ENV_VARS", "Settings"]
