"""The Slack edge of Signoff: the Bolt app and its listeners, Block Kit messages, the notifier, the
scheduler, the worker pool, the WSGI routes and `signoff serve`.

Imports nothing from `signoff.bot.cli`; the words it shares with the terminal are `signoff.bot.words`.
"""
