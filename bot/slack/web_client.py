"""The Slack Web API client `signoff serve` uses: the bot token, `SLACK_API_URL`, and each failed
call counted for the metrics."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.web import SlackResponse

from signoff.bot.settings import Settings


class CountedWebClient(WebClient):
    """The Web API client, telling `on_error(method, error)` of each call that failed: Slack's error
    code (`ratelimited`, `channel_not_found`, ...), `http_<status>` without one, or `unreachable`."""

    def __init__(self, *args: Any, on_error: Callable[[str, str], None] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.on_error = on_error

    def api_call(self, api_method: str, **kwargs: Any) -> SlackResponse:
        try:
            return super().api_call(api_method, **kwargs)
        except SlackApiError as exc:
            self._failed(api_method, str(exc.response.get("error") or f"http_{exc.response.status_code}"))
            raise
        except OSError:
            self._failed(api_method, "unreachable")
            raise

    def _failed(self, method: str, error: str) -> None:
        if self.on_error is not None:
            self.on_error(method, error)


def web_client(settings: Settings, on_error: Callable[[str, str], None] | None = None) -> WebClient:
    """The Web API client: bot token, `SLACK_API_URL`; `on_error` hears of each failed call."""
    return CountedWebClient(token=secret_value(settings.slack_bot_token), base_url=settings.slack_api_url,
                            on_error=on_error)


def secret_value(value: Any) -> str | None:
    return value.get_secret_value() if value is not None else None
