"""`chat.update`, retried: it is idempotent, so a 429 (after its Retry-After) or a 5xx is tried again."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from signoff.bot.slack.blocks import Message

log = logging.getLogger("signoff.bot.slack.notifier")


def update_with_retries(client: WebClient, channel: str, ts: str, message: Message, *, attempts: int,
                        sleep: Callable[[float], None]) -> None:
    """chat.update with backoff on 429 (honouring Retry-After) and 5xx, up to `attempts` tries."""
    for attempt in range(1, attempts + 1):
        try:
            client.chat_update(channel=channel, ts=ts, **message.as_kwargs())
            return
        except SlackApiError as exc:
            status = exc.response.status_code
            if attempt == attempts or not (status == 429 or status >= 500):
                raise
            delay = _retry_after(exc.response.headers) if status == 429 else 0.25 * 2 ** (attempt - 1)
        except OSError:
            if attempt == attempts:
                raise
            delay = 0.25 * 2 ** (attempt - 1)
        log.info("chat.update %s/%s: retrying in %.2fs (attempt %d)", channel, ts, delay, attempt)
        sleep(delay)


def _retry_after(headers: Mapping[str, Any]) -> float:
    for key, value in headers.items():
        if key.lower() == "retry-after":
            raw = value[0] if isinstance(value, list) else value
            try:
                return min(max(float(raw), 0.0), 30.0)
            except (TypeError, ValueError):
                break
    return 1.0
