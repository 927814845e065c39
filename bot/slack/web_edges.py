"""The web edges `signoff serve` mounts beside Slack, each built only when its settings are given:
the web console (`/ui/`, `SIGNOFF_OIDC_*`) and the MCP gateway over Streamable HTTP (`/mcp`,
`SIGNOFF_GATEWAY_CONFIG`). Both decide through the same runner and approval API as Slack."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from signoff.bot.api.app import ApprovalApi
from signoff.bot.settings import Settings
from signoff.bot.slack.workers import Workers
from signoff.bot.slack.wsgi import WsgiApp
from signoff.runtime.errors import ConfigError
from signoff.runtime.runner import Runner

if TYPE_CHECKING:
    from signoff.bot.gateway.http import HttpGateway


def mcp_gateway(settings: Settings, api: ApprovalApi, environ: Mapping[str, str]) -> HttpGateway | None:
    """The MCP gateway over `SIGNOFF_GATEWAY_CONFIG`'s servers (None without it), its calls asked
    of the approval API on this process's own port."""
    if not settings.gateway_config:
        return None
    from signoff.bot.gateway import Catalog
    from signoff.bot.gateway.http import HttpGateway
    from signoff.tools.mcp import McpConfigError

    try:
        catalog = Catalog.from_file(settings.gateway_config, environ)
    except McpConfigError as exc:
        raise ConfigError("SIGNOFF_GATEWAY_CONFIG: " + "; ".join(exc.problems)) from None
    return HttpGateway(catalog, api.key_of, f"http://127.0.0.1:{settings.port}")


def web_console(settings: Settings, runner: Runner, client: WebClient, workers: Workers) -> WsgiApp | None:
    """The web console `SIGNOFF_OIDC_*` configure (None without them): people are found in Slack by
    their email (`users.lookupByEmail`), and a run they decide goes to this process's workers."""
    if not settings.console_on:
        return None
    from signoff.bot.console.app import Console
    from signoff.bot.wiring import console_issuer

    def lookup(email: str) -> str | None:
        try:
            return str(client.users_lookupByEmail(email=email)["user"]["id"])
        except SlackApiError as exc:
            if exc.response.get("error") == "users_not_found":
                return None
            raise

    team: list[str | None] = []

    def workspace() -> str | None:
        if not team:
            team.append(str(client.auth_test().get("team_id") or "") or None)
        return team[0]

    assert settings.oidc_client_secret is not None and settings.public_url is not None
    return Console(runner, console_issuer(settings), settings.oidc_client_secret.get_secret_value(),
                   settings.public_url, lookup=lookup, drive=workers.submit, team=workspace)
