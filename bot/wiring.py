"""Composition helpers shared by the CLI and `signoff serve`: settings in, store and runner out.

The composition root: the one module of the bot that builds a store or imports an adapter. The rest
reads the store through `runtime.ports`, and what it needs of the database's URL (shown masked, the
zero-configuration file, ...) it takes from here (a test checks both).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from sqlalchemy import Engine, case, func, select
from sqlalchemy.exc import OperationalError

from signoff.bot.settings import Settings
from signoff.bot.words import DEMO_MODEL
from signoff.receipts import read_private_key, read_public_key
from signoff.runtime.access_reviews import AccessReviews
from signoff.runtime.adapters.db import check_writable as check_writable
from signoff.runtime.adapters.db import database_error, ensure_schema, make_engine, upgrade
from signoff.runtime.adapters.db import is_default_sqlite as is_default_sqlite
from signoff.runtime.adapters.db import is_new_sqlite as is_new_sqlite
from signoff.runtime.adapters.db import masked as masked
from signoff.runtime.adapters.db import sqlite_file as sqlite_file
from signoff.runtime.adapters.db import url_problem as url_problem
from signoff.runtime.adapters.recorded_reads import read_only_engine, read_recorded_calls
from signoff.runtime.adapters.sql import SqlStore
from signoff.runtime.adapters.tables import approvals, runs
from signoff.runtime.agent import Policy
from signoff.runtime.api_keys import ApiKeys
from signoff.runtime.approval_policy import ApprovalPolicy, PolicyError, default_policy
from signoff.runtime.backtest import RecordedCall
from signoff.runtime.deciders import MaySee
from signoff.runtime.errors import ConfigError
from signoff.runtime.failpoints import Failpoints
from signoff.runtime.models import policy_from_spec
from signoff.runtime.people import MayApprove
from signoff.runtime.policy_file import parse_policy
from signoff.runtime.ports import Store
from signoff.runtime.receipts import SigningKey
from signoff.runtime.runner import Runner
from signoff.runtime.runner_config import RunnerConfig
from signoff.runtime.telling_ports import Notifier, Observer
from signoff.tools.base import Tool
from signoff.tools.mcp import McpConfigError, McpServers
from signoff.tools.registry import MCP_PREFIX, ToolsetError, load_toolsets

if TYPE_CHECKING:
    from signoff.bot.console.oidc import Issuer
    from signoff.bot.observe.metrics import Pending
    from signoff.runtime.adapters.api_callbacks import SqlCallbacks
    from signoff.runtime.audit_webhook import AuditStream, DeliveryStatus

PACKAGE_DIR = Path(__file__).resolve().parent
"""Where the package data (demo script, Slack manifest) lives, in a checkout and in an installation."""

MODEL_ENV_PREFIXES = ("OPENAI_", "ANTHROPIC_")
"""Variables the model adapters read (API keys, base URLs); everything else stays out of their reach."""


def demo_script_path() -> Path:
    """The packaged script behind `scripted:demo`."""
    return PACKAGE_DIR / "demo_script.json"


def resolve_model_spec(spec: str) -> str:
    """`scripted:demo` names the packaged demo script; every other spec is used as given.

    Runs store the short name, so a run started by one installation resumes in another.
    """
    return f"scripted:{demo_script_path()}" if spec.strip() == DEMO_MODEL else spec


def model_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The part of `environ` a model adapter may read."""
    return {k: v for k, v in environ.items() if k.startswith(MODEL_ENV_PREFIXES)}


def open_store(database_url: str, auto_upgrade: bool = False) -> SqlStore:
    """A store on a reachable database whose schema is current.

    Raises `ConfigError` when the database cannot be reached or its schema is behind; with
    `auto_upgrade` the schema is created or upgraded instead.
    """
    engine = make_engine(database_url)
    ensure_schema(engine, auto_upgrade=auto_upgrade)
    return SqlStore(engine)


def upgrade_schema(database_url: str) -> tuple[str | None, str]:
    """Create or upgrade the database's schema to the newest revision: (the revision before, after).

    Raises `ConfigError` when the database cannot be reached."""
    engine = make_engine(database_url)
    try:
        return upgrade(engine)
    except OperationalError as exc:
        raise database_error(masked(database_url), exc) from None
    finally:
        engine.dispose()


def recorded_calls_since(database_url: str, since: datetime) -> list[RecordedCall]:
    """The calls recorded since `since` in the database at `database_url`, for a backtest: read
    without writing, and without creating a database that is not there (`ConfigError` then)."""
    engine = read_only_engine(database_url)
    try:
        return read_recorded_calls(engine, since)
    finally:
        engine.dispose()


def check_schema(database_url: str, **options: Any) -> None:
    """Reach the database (`options`: the engine's) and check that its schema is current; raises
    `ConfigError` when it cannot be reached or its schema is behind."""
    engine = make_engine(database_url, **options)
    try:
        ensure_schema(engine)
    finally:
        engine.dispose()


def in_sql(store: Store) -> SqlStore:
    """`store` as the SQL store it is, whose database (and clock) holds the server's other tables
    too (API keys, reviews, callbacks, the audit webhook's cursor); anything else is refused here."""
    if not isinstance(store, SqlStore):
        raise ConfigError(f"signoff serve keeps runs in a SQL database, not in a {type(store).__name__}")
    return store


def audit_webhook(settings: Settings, store: Store, *, owner: str) -> AuditStream | None:
    """The delivery of the audit events to `SIGNOFF_AUDIT_WEBHOOK_URL` from `store`'s database, by
    `owner` (this replica) under a lease of `SIGNOFF_LEASE_SECONDS`; None without a URL."""
    from signoff.runtime.adapters.audit_cursor import SqlAuditCursor
    from signoff.runtime.adapters.audit_delivery import Webhook, WebhookDeliverer

    if settings.audit_webhook_url is None or settings.audit_webhook_secret is None:
        return None
    webhook = Webhook(settings.audit_webhook_url, settings.audit_webhook_secret.get_secret_value(),
                      lease=timedelta(seconds=settings.lease_seconds))
    sql = in_sql(store)
    return WebhookDeliverer(SqlAuditCursor(sql.engine, clock=sql.clock), webhook, owner=owner)


def audit_webhook_status(database_url: str) -> DeliveryStatus | None:
    """Where the audit webhook's delivery stands in the database (None: it never started there)."""
    from signoff.runtime.adapters.audit_cursor import SqlAuditCursor

    engine = make_engine(database_url)
    try:
        ensure_schema(engine)
        return SqlAuditCursor(engine).status()
    finally:
        engine.dispose()


def api_keys(store: Store) -> ApiKeys:
    """The approval API's keys, kept in `store`'s database."""
    from signoff.runtime.adapters.api_keys import SqlApiKeys

    sql = in_sql(store)
    return SqlApiKeys(sql.engine, clock=sql.clock)


def access_reviews(store: Store) -> AccessReviews:
    """The reviews of standing access, kept in `store`'s database."""
    from signoff.runtime.adapters.access_reviews import SqlAccessReviews

    sql = in_sql(store)
    return SqlAccessReviews(sql.engine, clock=sql.clock)


def approval_callbacks(store: Store) -> SqlCallbacks:
    """Which decided approvals still owe their caller a callback, in `store`'s database."""
    from signoff.runtime.adapters.api_callbacks import SqlCallbacks

    sql = in_sql(store)
    return SqlCallbacks(sql.engine, clock=sql.clock)


def console_issuer(settings: Settings) -> Issuer:
    """The OpenID Connect issuer the web console signs people in at (`SIGNOFF_OIDC_*`), returning
    them to `SIGNOFF_PUBLIC_URL`/ui/callback."""
    from signoff.bot.console.oidc import Issuer

    assert settings.oidc_issuer and settings.oidc_client_id and settings.oidc_client_secret and settings.public_url
    return Issuer(settings.oidc_issuer, settings.oidc_client_id, settings.oidc_client_secret.get_secret_value(),
                  settings.public_url.rstrip("/") + "/ui/callback")


def shared_state(store: Store) -> SqlSharedState:
    """What every replica shares, read from `store`'s database when the metrics are scraped."""
    return SqlSharedState(in_sql(store).engine)


class SqlSharedState:
    """Reads what every replica shares from the database, one cheap query each (both are indexed):
    the metrics' `SharedState`."""

    def __init__(self, engine: Engine, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.engine, self.clock = engine, clock

    def pending_approvals(self) -> Pending:
        from signoff.bot.observe.metrics import Pending  # Prometheus only for a process that serves metrics

        query = select(approvals.c.requested_at, approvals.c.expires_at).where(approvals.c.status == "pending")
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        now = self.clock()
        late = sum(1 for requested, expires in rows if now - requested > (expires - requested) / 2)
        return Pending(len(rows), late)

    def unreviewed_break_glass(self) -> tuple[int, int]:
        """Break-glass approvals nobody reviewed yet, and of those how many were told overdue."""
        from signoff.runtime.break_glass import FOLLOW_UPS

        query = (select(func.count(), func.coalesce(func.sum(case((approvals.c.glass_nudges >= len(FOLLOW_UPS), 1),
                                                                    else_=0)), 0))
                 .where(approvals.c.glass.is_not(None), approvals.c.glass_review.is_(None)))
        with self.engine.connect() as conn:
            unreviewed, overdue = conn.execute(query).one()
        return int(unreviewed), int(overdue)

    def runs_needing_reconciliation(self) -> int:
        query = select(func.count()).select_from(runs).where(runs.c.status == "needs_reconciliation")
        with self.engine.connect() as conn:
            return int(conn.execute(query).scalar_one())


def load_tools(settings: Settings, environ: Mapping[str, str] | None = None) -> dict[str, Tool]:
    """The toolsets `settings` name, starting the MCP servers they pick (see `mcp_servers`), `${VAR}`
    in the HTTP tools file taken from `environ` (the process environment by default); raises
    `ConfigError` naming each one that cannot be loaded."""
    uses_mcp = any(entry.strip().startswith(MCP_PREFIX) for entry in settings.tools.split(","))
    try:
        return load_toolsets(settings.tools, outbox=settings.outbox,
                             mcp=mcp_servers(settings, environ) if uses_mcp else None,
                             http_config=settings.http_tools, environ=os.environ if environ is None else environ)
    except ToolsetError as exc:
        raise ConfigError(exc.problems) from None


_MCP_SERVERS: dict[str, McpServers] = {}
_MCP_LOCK = threading.Lock()


def mcp_servers(settings: Settings, environ: Mapping[str, str] | None = None) -> McpServers | None:
    """This process's servers of `SIGNOFF_MCP_CONFIG` (None when it is not set): one set per file,
    each server started when its tools first load and kept until `stop_mcp_servers()`.

    `${VAR}` in the file is taken from `environ` (the process environment by default): the file
    names its secrets, the environment holds them. Raises `ConfigError` for a file that cannot be used.
    """
    if not settings.mcp_config:
        return None
    path = str(Path(settings.mcp_config).resolve())
    with _MCP_LOCK:
        if path not in _MCP_SERVERS:
            try:
                source = os.environ if environ is None else environ
                _MCP_SERVERS[path] = McpServers.from_file(settings.mcp_config, source)
            except McpConfigError as exc:
                raise ConfigError(exc.problems) from None
        return _MCP_SERVERS[path]


def stop_mcp_servers() -> None:
    """Stop every MCP server this process started (idempotent; they start again when tools next load)."""
    with _MCP_LOCK:
        running = list(_MCP_SERVERS.values())
        _MCP_SERVERS.clear()
    for servers in running:
        servers.close()


def signing_key(settings: Settings) -> SigningKey | None:
    """The key receipts are signed with (`SIGNOFF_SIGNING_KEY`), read from its file; None: not set.

    Raises `ConfigError` when the file cannot be read or holds no Ed25519 private key."""
    if settings.signing_key is None:
        return None
    try:
        return read_private_key(Path(settings.signing_key).read_bytes())
    except (OSError, ValueError) as exc:
        raise ConfigError([f"SIGNOFF_SIGNING_KEY: {settings.signing_key} is not a readable Ed25519 private key "
                           f"in PEM ({type(exc).__name__}); `signoff keys signing create PATH` makes one"]) from None


def trusted_keys(settings: Settings) -> list[Ed25519PublicKey]:
    """The public keys whose receipts Signoff trusts: its own signing key's, then `SIGNOFF_TRUSTED_KEYS`'.

    Raises `ConfigError` naming each file that cannot be read or holds no Ed25519 key."""
    own = signing_key(settings)
    keys = [own.public_key()] if own is not None else []
    problems = []
    for path in filter(None, (p.strip() for p in (settings.trusted_keys or "").split(","))):
        try:
            keys.append(read_public_key(Path(path).read_bytes()))
        except (OSError, ValueError) as exc:
            problems.append(f"SIGNOFF_TRUSTED_KEYS: {path} is not a readable Ed25519 public key in PEM "
                            f"({type(exc).__name__})")
    if problems:
        raise ConfigError(problems)
    return keys


def runner_config(settings: Settings, **overrides: Any) -> RunnerConfig:
    """Runner settings from `settings`; `overrides` replace single fields (e.g. `allow_self_approval`).

    Raises `ConfigError` for a policy file that cannot be read or is not valid."""
    values: dict[str, Any] = dict(
        model=settings.model, budget=settings.budget, approval_ttl=settings.approval_ttl,
        dispatch_window=settings.dispatch_window, stall_after=settings.stall_after,
        lease=timedelta(seconds=settings.lease_seconds), extend_steps=settings.extend_steps,
        allow_self_approval=settings.allow_self_approval,
        failpoints=Failpoints(settings.failpoints or ""),
        signer=signing_key(settings),
    )
    values.update(overrides)
    if "approval_policy" not in values:
        values["approval_policy"] = load_approval_policy(settings, ttl=values["approval_ttl"],
                                                         allow_self_approval=values["allow_self_approval"])
    return RunnerConfig(**values)


def load_approval_policy(settings: Settings, *, ttl: timedelta | None = None,
                         allow_self_approval: bool | None = None) -> ApprovalPolicy:
    """The policy in `SIGNOFF_POLICY`, or the built-in one (every side effect asks the approvers).

    What the file's defaults leave out comes from `SIGNOFF_APPROVERS`, `SIGNOFF_APPROVAL_TTL` and
    `SIGNOFF_ALLOW_SELF_APPROVAL`. Raises `ConfigError` with one line naming the file, the rule
    and the problem."""
    ttl = settings.approval_ttl if ttl is None else ttl
    self_approval = settings.allow_self_approval if allow_self_approval is None else allow_self_approval
    if not settings.policy:
        return default_policy(approvers=sorted(settings.approvers), ttl=ttl, allow_self_approval=self_approval)
    try:
        text = Path(settings.policy).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise ConfigError(f"SIGNOFF_POLICY: cannot read {settings.policy}: {reason}") from None
    try:
        return parse_policy(text, source=settings.policy, approvers=sorted(settings.approvers), ttl=ttl,
                            allow_self_approval=self_approval)
    except PolicyError as exc:
        raise ConfigError(f"SIGNOFF_POLICY: {exc}") from None


def policy_factory(settings: Settings, tools: dict[str, Tool], env: Mapping[str, str]) -> Callable[[str], Policy]:
    """`spec -> Policy` for the runner, building each spec's policy once (clients are reusable)."""
    built: dict[str, Policy] = {}
    lock = threading.Lock()
    tool_list = list(tools.values())

    def policies(spec: str) -> Policy:
        with lock:
            if spec not in built:
                built[spec] = policy_from_spec(
                    resolve_model_spec(spec), tool_list, instructions=settings.instructions or "",
                    prices_path=settings.prices, env=env,
                )
            return built[spec]

    return policies


def build_runner(settings: Settings, notifier: Notifier | None, *, env: Mapping[str, str],
                 tools: dict[str, Tool] | None = None, config: RunnerConfig | None = None,
                 store: Store | None = None, auto_upgrade: bool | None = None,
                 may_approve: MayApprove | None = None, may_see: MaySee | None = None,
                 observer: Observer | None = None) -> Runner:
    """The runner `settings` describe: store, tools, model policies and timings.

    Args:
        env: where model adapters find their keys and base URLs (see `model_env`).
        tools: the tools, loaded first when the notifier shows them too; by default `load_tools(settings)`.
        config: by default `runner_config(settings)`.
        store: an open store; by default one on `settings.database_url`.
        auto_upgrade: create or upgrade its schema; by default only for the zero-configuration SQLite file.
        observer: watches what the runner commits (logs, metrics, traces); by default nothing does.

    Raises `ConfigError` for bad toolsets, a bad model spec, or an unusable database.
    """
    tools = load_tools(settings) if tools is None else tools
    policies = policy_factory(settings, tools, env)
    # Build the default model's policy now, so a bad spec is a start-up error, not a failed run.
    policies(settings.model)
    if store is None:
        if auto_upgrade is None:
            # An embedded database has no operator to run migrations: a new SQLite file is made ready.
            auto_upgrade = is_default_sqlite(settings.database_url) or is_new_sqlite(settings.database_url)
        store = open_store(settings.database_url, auto_upgrade=auto_upgrade)
    return Runner(store, tools, policies, config or runner_config(settings), notifier, may_approve=may_approve,
                  may_see=may_see, observer=observer)
