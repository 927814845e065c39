"""`signoff serve`: compose store, runner, workers, scheduler and the Bolt app, then serve Slack.

HTTP mode runs the WSGI app on gunicorn (`gunicorn 'signoff.bot.slack.serve:wsgi_app()'` works too), with
slash commands, interactivity and events on `POST /slack/events`. With `SLACK_APP_TOKEN` set it uses
Socket Mode instead and needs no public URL. Either way the port answers `GET /healthz` (liveness:
the process works, the database is not asked), `GET /readyz` (the database answers and Slack takes
the token) and `GET /metrics` (Prometheus).

gunicorn runs one worker process with threads: the worker pool, the scheduler and the metrics live
in it, so a scrape sees all of this replica's counters. Scale with replicas (the store decides every
race between them), not with gunicorn workers, whose counters a scrape would see one at a time.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from apscheduler.schedulers.background import BackgroundScheduler
from slack_bolt import App
from slack_bolt.adapter.socket_mode import SocketModeHandler
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from signoff.bot.api.app import ApprovalApi, RunChanges
from signoff.bot.api.callbacks import Callbacks, start_callbacks
from signoff.bot.api.limits import RateLimit
from signoff.bot.api.requests import MAX_BODY_BYTES
from signoff.bot.observe.logs import SecretFilter as SecretFilter  # where it was defined before logs.py
from signoff.bot.observe.logs import configure_logging as configure_log_output
from signoff.bot.observe.logs import quiet
from signoff.bot.observe.observers import Observation, serve_observation
from signoff.bot.oncall import on_call_reader
from signoff.bot.settings import Settings
from signoff.bot.slack.access_review_jobs import access_reviewer, start_access_reviews
from signoff.bot.slack.app import AppOptions, build_app
from signoff.bot.slack.approvers import Approvers
from signoff.bot.slack.audit_webhook import stream_audit_events
from signoff.bot.slack.gunicorn_app import Gunicorn, gunicorn_options
from signoff.bot.slack.notifier import SlackNotifier
from signoff.bot.slack.readiness import Readiness
from signoff.bot.slack.scheduler import start_scheduler
from signoff.bot.slack.web_client import secret_value, web_client
from signoff.bot.slack.web_edges import mcp_gateway, web_console
from signoff.bot.slack.workers import Workers
from signoff.bot.slack.wsgi import (
    EVENTS_PATH,
    HEALTH_PATH,
    METRICS_PATH,
    READY_PATH,
    BodyLimits,
    BodyReader,
    WsgiApp,
    http_server,
    make_wsgi,
)
from signoff.bot.wiring import (
    api_keys,
    approval_callbacks,
    build_runner,
    load_approval_policy,
    load_tools,
    model_env,
    policy_factory,
    runner_config,
    shared_state,
    stop_mcp_servers,
)
from signoff.bot.words import DEMO_MODEL
from signoff.runtime.agent import Policy
from signoff.runtime.errors import ConfigError
from signoff.runtime.ports import Store
from signoff.runtime.reviewing import AccessReviewer
from signoff.runtime.runner import Runner
from signoff.runtime.runner_config import RunnerConfig
from signoff.runtime.telling_ports import Observer
from signoff.tools.base import Tool

if TYPE_CHECKING:
    from signoff.bot.gateway.http import HttpGateway

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
    observation: Observation
    scheduler: BackgroundScheduler | None = None
    api: WsgiApp | None = None
    """The approval API (`/v1`), served beside Slack's routes."""
    console: WsgiApp | None = None
    """The web console (`/ui/`), with `SIGNOFF_OIDC_*` set; None: off, and `/ui/` answers 404."""
    gateway: HttpGateway | None = None
    """The MCP gateway (`/mcp`), with `SIGNOFF_GATEWAY_CONFIG` set."""
    reviewer: AccessReviewer | None = None
    """Reviews of standing access; None: `SIGNOFF_REVIEW_SCHEDULE` is off or there is no approval channel."""
    wsgi: WsgiApp = field(init=False)
    readiness: Readiness = field(init=False)

    def __post_init__(self) -> None:
        self.readiness = Readiness(self.runner, self.client)
        self.wsgi = make_wsgi(self.app, self.healthy, ready=self.readiness, metrics=self.observation.metrics,
                              api=self.api, console=self.console, mcp=self.gateway)

    def healthy(self) -> bool:
        """Alive: the clock runs. Asks nothing of the database, so an outage there restarts no pod."""
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
        if self.gateway is not None:
            self.gateway.close()
        self.observation.close()


@dataclass(frozen=True)
class Parts:
    """Pieces a caller (tests, an embedding program) supplies instead of building them from settings."""

    client: WebClient | None = None
    store: Store | None = None
    tools: dict[str, Tool] | None = None
    policies: Callable[[str], Policy] | None = None
    app_options: AppOptions | None = None
    scheduler: bool = True
    observers: tuple[Observer, ...] = ()
    """Observers of the runs besides the logs, metrics and traces `serve` always has."""
    approvers_clock: Callable[[], float] = time.monotonic
    """Seconds by which cached approvers (group and channel members, who is on call) age."""


def compose(settings: Settings, *, environ: Mapping[str, str], parts: Parts | None = None) -> Service:
    """Build the bot `settings` describe; raises `ConfigError` for anything unusable."""
    parts = _whole(parts or Parts())
    changes = RunChanges()  # wakes the approval API's long polls when a run changes here
    observation = serve_observation(environ, (*parts.observers, changes))
    client = parts.client or web_client(settings, on_error=observation.metrics.slack_api_error)
    approvers = Approvers(settings.approvers, client, approval_channel=settings.approval_channel,
                          schedules=on_call_reader(settings), clock=parts.approvers_clock)
    tools = load_tools(settings) if parts.tools is None else parts.tools
    config = runner_config(settings)
    notifier = SlackNotifier(client, tools=tools, approval_channel=settings.approval_channel, on_call=approvers.on_call,
                             redact_keys=config.redact_keys, extend_steps=config.extend_steps,
                             console_url=settings.public_url if settings.console_on else None)
    runner = _runner(settings, parts, environ, tools=tools, config=config, notifier=notifier, approvers=approvers,
                     observer=observation.observer)
    store = runner.store
    observation.metrics.watch(shared_state(store))
    pool = ThreadPoolExecutor(max_workers=settings.workers, thread_name_prefix="signoff-run")
    workers = Workers(runner, pool)
    options = parts.app_options or AppOptions(
        signing_secret=None if settings.socket_mode else secret_value(settings.slack_signing_secret))
    keys = api_keys(store)
    reviewer = access_reviewer(settings, runner, notifier, keys)
    app = build_app(runner, client=client, workers=workers, notifier=notifier, options=options, reviewer=reviewer)
    scheduler = start_scheduler(runner, workers, settings.sweep_interval) if parts.scheduler else None
    if scheduler is not None and reviewer is not None:
        start_access_reviews(scheduler, reviewer, settings)
    stream_audit_events(settings, store, observation.metrics, scheduler)
    api = ApprovalApi(runner, keys, BodyReader(BodyLimits(max_bytes=MAX_BODY_BYTES)).read_or_status,
                      RateLimit(settings.api_rate), changes)
    if scheduler is not None:
        start_callbacks(scheduler, Callbacks(api, approval_callbacks(store), keys))
    return Service(settings=settings, runner=runner, client=client, notifier=notifier, workers=workers, app=app,
                   pool=pool, observation=observation, scheduler=scheduler, api=api,
                   console=web_console(settings, runner, client, workers), gateway=mcp_gateway(settings, api, environ),
                   reviewer=reviewer)


def _whole(parts: Parts) -> Parts:
    """`parts`, if they give a store and tools together or neither; else `ConfigError`."""
    given = parts.tools is not None or parts.policies is not None or parts.store is not None
    if given and (parts.store is None or parts.tools is None):
        raise ConfigError("give both a store and tools, or neither")
    return parts


def _runner(settings: Settings, parts: Parts, environ: Mapping[str, str], *, tools: dict[str, Tool],
            config: RunnerConfig, notifier: SlackNotifier, approvers: Approvers, observer: Observer) -> Runner:
    """The runner over the store (and tools, policies) `parts` give, else over those `settings` name."""
    if parts.store is None:
        return build_runner(settings, notifier, env=model_env(environ), tools=tools, config=config,
                            may_approve=approvers.may_approve, may_see=approvers.may_see, observer=observer)
    policies = parts.policies or policy_factory(settings, tools, model_env(environ))
    return Runner(parts.store, tools, policies, config, notifier, may_approve=approvers.may_approve,
                  may_see=approvers.may_see, observer=observer)


# -- entry points -----------------------------------------------------------------------------------


def serve(settings: Settings, *, environ: Mapping[str, str] | None = None) -> None:
    """Run the bot until interrupted: Socket Mode with an app token, otherwise HTTP on gunicorn."""
    environ = os.environ if environ is None else environ
    settings.for_serve()
    configure_logging(settings)
    policy = load_approval_policy(settings)  # a bad policy file stops start-up in one line, before anything is said
    stepped = [rule.name for rule in policy.rules if rule.step_up is not None]
    if stepped and not settings.console_on:
        raise ConfigError(f"SIGNOFF_POLICY: rule {stepped[0]} says step_up, which only the web console's sign-in "
                          "meets: set SIGNOFF_OIDC_ISSUER, SIGNOFF_OIDC_CLIENT_ID, SIGNOFF_OIDC_CLIENT_SECRET and "
                          "SIGNOFF_PUBLIC_URL (see Web console), or nobody can approve its calls")
    if settings.socket_mode:
        _serve_socket_mode(settings, environ)
        return
    check(settings, environ)  # fail here, with one clear message, rather than in a forked worker
    port_check(settings.port)  # gunicorn would retry five times, two lines each, before giving up
    warn_of_the_demo_model(settings)
    log.info("HTTP mode: listening on port %d (%s; %s, %s, %s)", settings.port, EVENTS_PATH, HEALTH_PATH,
             READY_PATH, METRICS_PATH)
    Gunicorn(lambda: compose(settings, environ=environ), gunicorn_options(settings)).run()


def _serve_socket_mode(settings: Settings, environ: Mapping[str, str]) -> None:
    """Slack reaches us over the socket; the port still answers the probes and `/metrics`."""
    check_slack(settings)
    # The port is taken first, so a port in use stops start-up before anything else has started.
    probes = listen(lambda environ, start_response: _starting(start_response), settings.port)
    threading.Thread(target=probes.serve_forever, name="probes", daemon=True).start()
    try:
        service = compose(settings, environ=environ)
    except BaseException:
        probes.shutdown()
        probes.server_close()
        raise
    probes.set_app(service.wsgi)
    warn_of_the_demo_model(settings)
    log.info("Socket Mode: connecting to Slack (port %d answers %s, %s and %s)", settings.port, HEALTH_PATH,
             READY_PATH, METRICS_PATH)
    try:
        service.socket_mode_handler().start()  # type: ignore[no-untyped-call]  # slack_bolt leaves it unannotated
    finally:
        probes.shutdown()
        probes.server_close()
        service.close()


def warn_of_the_demo_model(settings: Settings) -> None:
    """Warn that the scripted demo model is served because no model was chosen: a first `signoff
    serve` must not pass for a real agent. Said once start-up has passed every check, so it never
    stands before (or instead of) the error that stopped it; a model chosen on purpose is not warned of."""
    if settings.model == DEMO_MODEL and "model" not in settings.model_fields_set:
        demo_tools = " with the demo tools" if settings.tools == "demo" else ""
        log.warning("serving the scripted demo model, not a real one%s: set SIGNOFF_MODEL (e.g. "
                    "openai:gpt-4o-mini) and SIGNOFF_TOOLS for a real agent", demo_tools)


def _starting(start_response: Callable[..., Any]) -> list[bytes]:
    body = b'{"ok": false, "starting": true}'
    start_response("503 Service Unavailable", [("Content-Type", "application/json"),
                                               ("Content-Length", str(len(body)))])
    return [body]


def listen(wsgi: WsgiApp, port: int) -> Any:
    """A server for `wsgi` on every interface at `port`, or `ConfigError` naming SIGNOFF_PORT."""
    try:
        return http_server(wsgi, "0.0.0.0", port)
    except OSError as exc:
        raise ConfigError(port_refusal(port, exc)) from None


def port_check(port: int) -> None:
    """Raise `ConfigError` naming SIGNOFF_PORT unless this process could listen on `port` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gunicorn binds it
        try:
            probe.bind(("0.0.0.0", port))
        except OSError as exc:
            raise ConfigError(port_refusal(port, exc)) from None


def port_refusal(port: int, exc: OSError) -> str:
    if exc.errno == errno.EADDRINUSE:
        return (f"SIGNOFF_PORT: port {port} is already in use (another signoff serve, or another program); "
                "stop it or choose another port")
    return f"SIGNOFF_PORT: cannot listen on port {port}: {exc.strerror or exc}"


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
    if settings.gateway_config:  # the file is read here; its servers start in the worker, after the fork
        from signoff.tools.mcp import McpConfigError, load_config

        try:
            load_config(settings.gateway_config, environ)
        except McpConfigError as exc:
            raise ConfigError("SIGNOFF_GATEWAY_CONFIG: " + "; ".join(exc.problems)) from None
    check_slack(settings)


def check_slack(settings: Settings) -> None:
    """Raise `ConfigError` in one line unless Slack answers and takes the bot token."""
    try:
        with quiet("slack_sdk"):  # its own error lines (and retries) would come before ours, saying less
            web_client(settings).auth_test()
    except SlackApiError as exc:
        raise ConfigError(f"SLACK_BOT_TOKEN: Slack refused it ({exc.response.get('error')})") from None
    except OSError as exc:
        raise ConfigError(f"SLACK_API_URL: cannot reach {settings.slack_api_url} ({exc})") from None


def wsgi_app() -> WsgiApp:
    """App factory for an external WSGI server: `gunicorn 'signoff.bot.slack.serve:wsgi_app()'`."""
    settings = Settings.from_env(os.environ).for_serve()
    configure_logging(settings)
    return compose(settings, environ=os.environ).wsgi


# -- logging ------------------------------------------------------------------------------------------


def configure_logging(settings: Settings) -> None:
    """Log at `SIGNOFF_LOG_LEVEL` in `SIGNOFF_LOG_FORMAT` to stderr, with every secret masked."""
    secrets = [secret_value(s) or "" for s in (settings.slack_bot_token, settings.slack_signing_secret,
                                           settings.slack_app_token)]
    configure_log_output(settings.log_level, log_format=settings.log_format, secrets=secrets)
