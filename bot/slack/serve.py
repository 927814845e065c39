"""`signoff serve`: compose store, runner, workers, scheduler and the Bolt app, then serve Slack.

HTTP mode runs the WSGI app on gunicorn (`gunicorn 'signoff.bot.slack.serve:wsgi_app()'` works too), with
slash commands, interactivity and events on `POST /slack/events` and `GET /healthz`. With
`SLACK_APP_TOKEN` set it uses Socket Mode instead and needs no public URL.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler
from slack_bolt import App
from slack_bolt.adapter.socket_mode import SocketModeHandler
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from signoff.bot.settings import Settings
from signoff.bot.slack.app import AppOptions, build_app
from signoff.bot.slack.approvers import Approvers
from signoff.bot.slack.notifier import SlackNotifier
from signoff.bot.slack.scheduler import start_scheduler
from signoff.bot.slack.workers import Workers
from signoff.bot.slack.wsgi import EVENTS_PATH, HEALTH_PATH, WsgiApp, http_server, make_wsgi
from signoff.bot.wiring import (
    build_runner,
    load_tools,
    model_env,
    policy_factory,
    runner_config,
    stop_mcp_servers,
)
from signoff.bot.words import DEMO_MODEL
from signoff.runtime.adapters.sql import SqlStore
from signoff.runtime.agent import Policy
from signoff.runtime.errors import ConfigError
from signoff.runtime.runner import Runner
from signoff.tools.base import Tool

log = logging.getLogger("signoff.bot.slack.serve")


@dataclass
class Service:
    """Everything `signoff serve` runs, composed once per process."""

    settings: Settings
    runner: Runner
    client: WebClient
    notifier: SlackNotifier
    workers: Workers
    app: App
    pool: ThreadPoolExecutor
    scheduler: BackgroundScheduler | None = None
    wsgi: WsgiApp = field(init=False)

    def __post_init__(self) -> None:
        self.wsgi = make_wsgi(self.app, self.healthy)

    def healthy(self) -> bool:
        """The database answers and the clock runs."""
        try:
            self.runner.get_run("healthz-probe")
        except Exception as exc:  # whatever the database says, the answer is "not ready"
            log.warning("health check: database unavailable: %s", exc)
            return False
        return self.scheduler is None or self.scheduler.running

    def socket_mode_handler(self) -> SocketModeHandler:
        """The Socket Mode connection, built but not yet connected."""
        token = self.settings.slack_app_token
        if token is None:
            raise ConfigError("SLACK_APP_TOKEN: required for Socket Mode")
        return SocketModeHandler(self.app, app_token=token.get_secret_value(), web_client=self.client)

    def close(self, wait: bool = True) -> None:
        if self.scheduler is not None and self.scheduler.running:
            self.scheduler.shutdown(wait=wait)
        self.workers.drain(timeout=30 if wait else 0)
        self.pool.shutdown(wait=wait)
        # After the workers: a run still draining may be in the middle of an MCP call.
        stop_mcp_servers()


@dataclass(frozen=True)
class Parts:
    """Pieces a caller (tests, an embedding program) supplies instead of building them from settings."""

    client: WebClient | None = None
    store: SqlStore | None = None
    tools: dict[str, Tool] | None = None
    policies: Callable[[str], Policy] | None = None
    app_options: AppOptions | None = None
    scheduler: bool = True


def compose(settings: Settings, *, environ: Mapping[str, str], parts: Parts | None = None) -> Service:
    """Build the bot `settings` describe; raises `ConfigError` for anything unusable."""
    parts = parts or Parts()
    given = parts.tools is not None or parts.policies is not None or parts.store is not None
    if given and (parts.store is None or parts.tools is None):
        raise ConfigError("give both a store and tools, or neither")
    client = parts.client or web_client(settings)
    approvers = Approvers(settings.approvers, client, approval_channel=settings.approval_channel)
    tools = load_tools(settings) if parts.tools is None else parts.tools
    config = runner_config(settings)
    notifier = SlackNotifier(client, tools=tools, approval_channel=settings.approval_channel,
                             redact_keys=config.redact_keys, extend_steps=config.extend_steps)
    if parts.store is not None:
        policies = parts.policies or policy_factory(settings, tools, model_env(environ))
        runner = Runner(parts.store, tools, policies, config, notifier, may_approve=approvers.may_approve,
                        may_see=approvers.may_see)
    else:
        runner = build_runner(settings, notifier, env=model_env(environ), tools=tools, config=config,
                              may_approve=approvers.may_approve, may_see=approvers.may_see)
    pool = ThreadPoolExecutor(max_workers=settings.workers, thread_name_prefix="signoff-run")
    workers = Workers(runner, pool)
    options = parts.app_options or AppOptions(
        signing_secret=None if settings.socket_mode else _secret(settings.slack_signing_secret))
    app = build_app(runner, client=client, workers=workers, notifier=notifier, options=options)
    scheduler = start_scheduler(runner, workers, settings.sweep_interval) if parts.scheduler else None
    return Service(settings, runner, client, notifier, workers, app, pool, scheduler)


def web_client(settings: Settings) -> WebClient:
    """The Web API client: bot token, `SLACK_API_URL`."""
    return WebClient(token=_secret(settings.slack_bot_token), base_url=settings.slack_api_url)


def _secret(value: Any) -> str | None:
    return value.get_secret_value() if value is not None else None


# -- entry points -----------------------------------------------------------------------------------


def serve(settings: Settings, *, environ: Mapping[str, str] | None = None) -> None:
    """Run the bot until interrupted: Socket Mode with an app token, otherwise HTTP on gunicorn."""
    environ = os.environ if environ is None else environ
    settings.for_serve()
    configure_logging(settings)
    if settings.model == DEMO_MODEL:  # the default: a first `signoff serve` must not pass for a real agent
        demo_tools = " with the demo tools" if settings.tools == "demo" else ""
        log.warning("serving the scripted demo model, not a real one%s: set SIGNOFF_MODEL (e.g. "
                    "openai:gpt-4o-mini) and SIGNOFF_TOOLS for a real agent", demo_tools)
    if settings.socket_mode:
        service = compose(settings, environ=environ)
        # Slack reaches us over the socket; the port still answers /healthz for container probes.
        health = http_server(service.wsgi, "0.0.0.0", settings.port)
        threading.Thread(target=health.serve_forever, name="healthz", daemon=True).start()
        log.info("Socket Mode: connecting to Slack (health checks on port %d%s)", settings.port, HEALTH_PATH)
        try:
            service.socket_mode_handler().start()  # type: ignore[no-untyped-call]  # slack_bolt leaves it unannotated
        finally:
            health.shutdown()
            service.close()
        return
    check(settings, environ)  # fail here, with one clear message, rather than in a forked worker
    log.info("HTTP mode: listening on port %d (%s, %s)", settings.port, EVENTS_PATH, HEALTH_PATH)
    _Gunicorn(lambda: compose(settings, environ=environ), gunicorn_options(settings)).run()


def check(settings: Settings, environ: Mapping[str, str]) -> None:
    """What would stop the bot from working: tools, model, database, and Slack accepting the token."""
    try:
        runner = build_runner(settings, None, env=model_env(environ))
    finally:
        # MCP servers started to load their tools: their threads would not survive the fork, and
        # the worker starts its own.
        stop_mcp_servers()
    # gunicorn forks after this check: a pooled connection carried into the worker and closed there
    # drops the worker's own SQLite locks ("disk I/O error"), so none may cross the fork.
    runner.store.close()
    try:
        web_client(settings).auth_test()
    except SlackApiError as exc:
        raise ConfigError(f"SLACK_BOT_TOKEN: Slack refused it ({exc.response.get('error')})") from None
    except OSError as exc:
        raise ConfigError(f"SLACK_API_URL: cannot reach {settings.slack_api_url} ({exc})") from None


def gunicorn_options(settings: Settings) -> dict[str, Any]:
    # One process with threads: the worker pool and scheduler live in it. More processes (or
    # replicas) are safe, because the store decides every race; see the README.
    return {"bind": f"0.0.0.0:{settings.port}", "workers": 1, "worker_class": "gthread", "threads": 32,
            "timeout": 30, "graceful_timeout": 30, "accesslog": None, "loglevel": settings.log_level.lower()}


def wsgi_app() -> WsgiApp:
    """App factory for an external WSGI server: `gunicorn 'signoff.bot.slack.serve:wsgi_app()'`."""
    settings = Settings.from_env(os.environ).for_serve()
    configure_logging(settings)
    return compose(settings, environ=os.environ).wsgi


class _Gunicorn:
    """gunicorn with our app built in the worker process, after the fork (threads do not survive one)."""

    def __init__(self, factory: Callable[[], Service], options: dict[str, Any]) -> None:
        from gunicorn.app.base import BaseApplication

        services: list[Service] = []

        def close_services(server: object, worker: object) -> None:
            for service in services:
                service.close(wait=True)

        class Application(BaseApplication):  # type: ignore[misc]  # gunicorn ships no type hints
            def load_config(self) -> None:
                for key, value in options.items():
                    self.cfg.set(key, value)
                self.cfg.set("worker_exit", close_services)

            def load(self) -> WsgiApp:
                service = factory()
                services.append(service)
                return service.wsgi

        self._application = Application()

    def run(self) -> None:
        self._application.run()


# -- logging ------------------------------------------------------------------------------------------

_TOKEN = re.compile(r"xox[a-z]-[A-Za-z0-9-]+|xapp-[A-Za-z0-9-]+")


class SecretFilter(logging.Filter):
    """Masks Slack tokens and our configured secrets in every log record."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self.secrets = [s for s in secrets if s and len(s) >= 6]

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        masked = _TOKEN.sub("[secret]", text)
        for secret in self.secrets:
            masked = masked.replace(secret, "[secret]")
        if masked != text:
            record.msg, record.args = masked, None
        return True


def configure_logging(settings: Settings) -> None:
    """Log at `SIGNOFF_LOG_LEVEL` to stderr, with every secret masked."""
    secrets = [_secret(s) or "" for s in (settings.slack_bot_token, settings.slack_signing_secret,
                                           settings.slack_app_token)]
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    secret_filter = SecretFilter(secrets)
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, SecretFilter) for f in handler.filters):
            handler.addFilter(secret_filter)
    # slack_sdk logs request headers (the bearer token) at DEBUG; keep it quieter than ours.
    logging.getLogger("slack_sdk").setLevel(max(logging.INFO, logging.getLevelName(settings.log_level)))
