"""The Slack edge of Signoff: settings, Block Kit rendering, listeners, notifier, scheduler, serving."""

from signoff.bot.settings import ENV_DESCRIPTIONS, ENV_VARS, Settings

__all__ = ["ENV_DESCRIPTIONS", "ENV_VARS", "Settings"]
