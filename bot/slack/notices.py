"""Telling the person who clicked: an ephemeral notice in the modal, the channel or their DM."""

from __future__ import annotations

import logging
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.webhook import WebhookClient

from signoff.bot.slack import argument_blocks
from signoff.bot.slack.blocks import notice, safe
from signoff.bot.slack.payloads import Malformed, Where
from signoff.bot.slack.web_client import shared_tls
from signoff.runtime.people import is_slack_user

log = logging.getLogger("signoff.bot.slack.notices")


class Notices:
    """Short answers to one person, over the Web API or the request's response_url."""

    def __init__(self, client: WebClient) -> None:
        self.client = client

    def tell(self, where: Where, text: str, modal: str | None = None) -> None:
        """An ephemeral answer: in the `modal` clicked in, via response_url, ephemeral in the channel, or a DM."""
        message = notice(text)
        try:
            if modal:
                self.client.views_update(view_id=modal, view=argument_blocks.outcome_modal(text))
            elif where.response_url:
                WebhookClient(where.response_url, ssl=shared_tls()).send(
                    text=message.text, blocks=message.blocks, response_type="ephemeral", replace_original=False)
            elif where.channel:
                self.client.chat_postEphemeral(channel=where.channel, user=where.user, **message.as_kwargs())
            else:
                self.client.chat_postMessage(channel=where.user, **message.as_kwargs())
        except SlackApiError as exc:
            log.warning("could not tell %s: %s", where.user, exc.response.get("error"))

    def refuse_malformed(self, body: Any, problem: Any) -> None:
        """Log a click we cannot act on, and tell the clicker if the body names one."""
        reason = problem.reason if isinstance(problem, Malformed) else "this button does not fit here"
        clicker = (body.get("user") or {}).get("id") if isinstance(body, dict) else None
        log.warning("click not understood: %s", reason)
        if is_slack_user(clicker):
            self.tell(Where(user=clicker), f"Sorry, I could not read that click: {safe(reason, 200)}.")
