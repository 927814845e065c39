"""The Slack Web API client `signoff serve` uses: the bot token, `SLACK_API_URL`, each failed call
counted for the metrics, and its connections kept open between calls (`bot.slack.connections`)."""

from __future__ import annotations

import functools
import io
import ssl
import urllib.error
import weakref
from collections.abc import Callable
from typing import Any
from urllib.request import Request

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.web import SlackResponse

from signoff.bot.settings import Settings
from signoff.bot.slack.connections import KeptConnections, default_tls


class CountedWebClient(WebClient):
    """The Web API client, telling `on_error(method, error)` of each call that failed: Slack's error
    code (`ratelimited`, `channel_not_found`, ...), `http_<status>` without one, or `unreachable`.

    Its calls go over kept-open connections sharing one TLS context, rather than a new connection,
    context and handshake each; through a proxy they go as slack_sdk sends them."""

    def __init__(self, *args: Any, on_error: Callable[[str, str], None] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.on_error = on_error
        self.connections = KeptConnections(timeout=self.timeout, tls=self.ssl)
        # A client dropped (a test's, a check's) closes what it kept open, rather than leaving it to the collector.
        weakref.finalize(self, self.connections.close)

    def api_call(self, api_method: str, **kwargs: Any) -> SlackResponse:
        try:
            return super().api_call(api_method, **kwargs)
        except SlackApiError as exc:
            self._failed(api_method, str(exc.response.get("error") or f"http_{exc.response.status_code}"))
            raise
        except OSError:
            self._failed(api_method, "unreachable")
            raise

    def _perform_urllib_http_request_internal(self, url: str, req: Request) -> dict[str, Any]:
        if self.proxy is not None or not url.lower().startswith(("http://", "https://")):
            return super()._perform_urllib_http_request_internal(url, req)
        status, headers, body = self.connections.send(url, req)
        if 300 <= status < 400:  # Slack's API redirects nothing; the server took the request: not sent again
            raise urllib.error.HTTPError(url, status, "redirect not followed", headers, io.BytesIO(body))
        if headers.get_content_type() == "application/gzip":  # as slack_sdk reads them (admin.analytics.getFile)
            return {"status": status, "headers": headers, "body": body}
        return {"status": status, "headers": headers, "body": body.decode(headers.get_content_charset() or "utf-8")}

    def _failed(self, method: str, error: str) -> None:
        if self.on_error is not None:
            self.on_error(method, error)


def web_client(settings: Settings, on_error: Callable[[str, str], None] | None = None) -> WebClient:
    """The Web API client: bot token, `SLACK_API_URL`; `on_error` hears of each failed call."""
    return CountedWebClient(token=secret_value(settings.slack_bot_token), base_url=settings.slack_api_url,
                            on_error=on_error)


@functools.cache
def shared_tls() -> ssl.SSLContext:
    """One TLS context for the process's other Slack clients (a `response_url`'s webhook), so each
    does not build its own, reading the CA bundle, for every message."""
    return default_tls()


def secret_value(value: Any) -> str | None:
    return value.get_secret_value() if value is not None else None
