"""Settings from the environment: `Settings.from_env(environ)` is the only place Signoff reads it.

Only `SLACK_*` and `SIGNOFF_*` keys are read, and the two on-call services' own names for their
credentials (`PAGERDUTY_TOKEN`, `OPSGENIE_API_KEY`). Bad values stop start-up with one `ConfigError`
naming every bad variable; secret values are never echoed, in errors or in `repr`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, SecretStr, ValidationError

from signoff.database_url import sqlalchemy_database_url

# The runtime is imported inside the functions that use it: `signoff.bot` imports this module,
# and `signoff --help` (which imports `signoff.bot`) needs none of the runtime.
if TYPE_CHECKING:
    from signoff.runtime.budget import Budget

# name, default as documented ("" for none), one-line description
_TABLE: tuple[tuple[str, str, str], ...] = (
    ("SLACK_BOT_TOKEN", "", "Bot token (xoxb-...); required by `signoff serve`."),
    ("SLACK_SIGNING_SECRET", "", "Signing secret that verifies Slack's requests; required in HTTP mode."),
    ("SLACK_APP_TOKEN", "", "App-level token (xapp-...); when set, `signoff serve` uses Socket Mode."),
    ("SLACK_API_URL", "https://slack.com/api/", "Base URL of the Slack Web API (GovSlack, or a local test server)."),
    ("SIGNOFF_DATABASE_URL", "sqlite:///signoff.db", "SQLAlchemy URL of the run store (SQLite file or PostgreSQL)."),
    ("SIGNOFF_MODEL", "scripted:demo", "Model that drives runs: openai:<model>, anthropic:<model> or scripted:<path>."),
    ("SIGNOFF_TOOLS", "demo", "Toolsets, comma-separated: demo, mcp:<server> (mcp:* for every server in SIGNOFF_MCP_CONFIG), http:<api> (http:* for every API in SIGNOFF_HTTP_TOOLS) or package.module:attribute."),
    ("SIGNOFF_MCP_CONFIG", "", "JSON file of MCP servers in the usual mcpServers format (command or url, with ${VAR} taken from the environment); see Use MCP servers."),
    ("SIGNOFF_GATEWAY_CONFIG", "", "JSON file of MCP servers (the mcpServers format) that signoff serve offers to MCP clients at /mcp, every call decided as the approval API decides it, clients authenticated by API keys; see The MCP gateway."),
    ("SIGNOFF_HTTP_TOOLS", "", "YAML (or JSON) file of HTTP APIs to call as tools, picked with http:<api> or http:* in SIGNOFF_TOOLS: base URL, headers (with ${VAR} taken from the environment), one method and path per tool; see Call your HTTP APIs."),
    ("SIGNOFF_INSTRUCTIONS", "", "Operator instructions added to the model's system prompt."),
    ("SIGNOFF_PRICES", "", "JSON price table for cost budgets (default: the built-in sample prices)."),
    ("SIGNOFF_APPROVERS", "", "Who may approve (and see runs): Slack user ids and user group ids, comma-separated, `*` for any member of the channel where approvals are posted, and on-call schedules (pagerduty:<schedule id>, opsgenie:<schedule name>) for whoever is on call; required by `signoff serve`."),
    ("SIGNOFF_POLICY", "", "YAML file of approval rules: which calls run unasked, which ask whom (how many, for how long) and which are refused; see Approval policy. Without it every side effect asks SIGNOFF_APPROVERS."),
    ("PAGERDUTY_TOKEN", "", "PagerDuty REST API key (read-only is enough) that reads who is on call for pagerduty:<schedule id> approvers."),
    ("SIGNOFF_PAGERDUTY_URL", "https://api.pagerduty.com", "Base URL of the PagerDuty REST API (its EU service region, or a local test server)."),
    ("OPSGENIE_API_KEY", "", "Opsgenie API key (of an API integration) that reads who is on call for opsgenie:<schedule name> approvers."),
    ("SIGNOFF_OPSGENIE_URL", "https://api.opsgenie.com", "Base URL of the Opsgenie API (https://api.eu.opsgenie.com for its EU instance, or a local test server)."),
    ("SIGNOFF_ALLOW_SELF_APPROVAL", "false", "Let a requester approve their own run's side effects."),
    ("SIGNOFF_APPROVAL_CHANNEL", "", "Channel id for approval requests (default: the run's channel)."),
    ("SIGNOFF_APPROVAL_TTL", "30m", "How long an approval request stays open, e.g. 90s, 15m, 2h, 1h30m, 1d."),
    ("SIGNOFF_DISPATCH_WINDOW", "10m", "How long after an approval its call may still start (workers busy, a restart); later, it is not executed and people are told."),
    ("SIGNOFF_REVIEW_SCHEDULE", "0 9 * * 1", "When `signoff serve` posts a review of standing access (the grants and API keys in force, each with Keep and Revoke) to SIGNOFF_APPROVAL_CHANNEL: five cron fields in UTC, by the database's clock; `off` (or set empty) for never. See Reviews of standing access."),
    ("SIGNOFF_REVIEW_REMIND_AFTER", "1d", "How long a review of standing access waits for answers before its reviewers are reminded; after twice this, it is escalated to the channel."),
    ("SIGNOFF_SWEEP_INTERVAL", "15s", "How often expired approvals are swept and orphaned runs recovered."),
    ("SIGNOFF_MAX_STEPS", "8", "Budget: model calls per run."),
    ("SIGNOFF_MAX_TOOL_CALLS", "", "Budget: tool executions per run (default: unlimited)."),
    ("SIGNOFF_MAX_TOKENS", "", "Budget: input plus output tokens per run (default: unlimited)."),
    ("SIGNOFF_MAX_COST_USD", "", "Budget: model cost in US dollars per run (default: unlimited)."),
    ("SIGNOFF_MAX_SECONDS", "", "Budget: seconds spent running, not waiting (default: unlimited)."),
    ("SIGNOFF_STALL_AFTER", "3", "Turns in a row that repeat an earlier call and get the same result before a run stops as stalled (0: never)."),
    ("SIGNOFF_EXTEND_STEPS", "4", "Steps added when someone presses Extend on a run that ran out of steps."),
    ("SIGNOFF_PORT", "3000", "HTTP port of `signoff serve` in HTTP mode."),
    ("SIGNOFF_WORKERS", "4", "Threads in the worker pool that executes runs."),
    ("SIGNOFF_API_RATE", "600", "Approval API requests a key may make a minute on each `signoff serve` process; more are answered 429."),
    ("SIGNOFF_LEASE_SECONDS", "60", "Lease a worker holds on a run (and a replica on delivering audit events); an expired lease lets another worker take over."),
    ("SIGNOFF_OUTBOX", "./outbox", "Directory where the demo send_email tool writes its .eml files."),
    ("SIGNOFF_AUDIT_WEBHOOK_URL", "", "HTTP(S) URL that `signoff serve` delivers every audit event written from now on to, as a signed CloudEvent; see Audit webhook."),
    ("SIGNOFF_AUDIT_WEBHOOK_SECRET", "", "Secret that signs each audit webhook delivery (the Signoff-Signature header); required with SIGNOFF_AUDIT_WEBHOOK_URL."),
    ("SIGNOFF_OIDC_ISSUER", "", "OpenID Connect issuer whose sign-in opens the web console under /ui/ (https://slack.com for Sign in with Slack, or Okta, Google, Entra, Keycloak); without it the console is off. See Web console."),
    ("SIGNOFF_OIDC_CLIENT_ID", "", "Client id of Signoff at that issuer; required with SIGNOFF_OIDC_ISSUER."),
    ("SIGNOFF_OIDC_CLIENT_SECRET", "", "Client secret of Signoff at that issuer (it also signs the console's cookies); required with SIGNOFF_OIDC_ISSUER."),
    ("SIGNOFF_PUBLIC_URL", "", "The URL people reach `signoff serve` at, e.g. https://signoff.example.com: the console's sign-in returns to it, its cookies are Secure when it is https, and cards link to it; required with SIGNOFF_OIDC_ISSUER."),
    ("SIGNOFF_SIGNING_KEY", "", "Path of the Ed25519 private key (PEM) each decision's receipt is signed with; `signoff keys signing create PATH` makes one. Without it, decisions get no receipts. See Signed receipts."),
    ("SIGNOFF_TRUSTED_KEYS", "", "Comma-separated paths of further Ed25519 public keys (PEM) whose receipts are trusted too, e.g. the key before a rotation; `signoff receipts public-key` prints them with Signoff's own."),
    ("SIGNOFF_LOG_LEVEL", "INFO", "Log level: DEBUG, INFO, WARNING or ERROR."),
    ("SIGNOFF_LOG_FORMAT", "text", "Log format: text (one timestamped line a record) or json (one JSON object a line)."),
    ("SIGNOFF_FAILPOINTS", "", "Fault testing only: crash at named points, e.g. after_tool=exit. Never set in production."),
)

ENV_VARS: dict[str, str] = {name: default for name, default, _ in _TABLE}
"""Every variable Signoff reads, with its default as documented ("" when there is none)."""

ENV_DESCRIPTIONS: dict[str, str] = {name: text for name, _, text in _TABLE}
"""One line per variable, for the settings table in docs/getting-started.md and `--help` texts."""



def unknown_variables(environ: Mapping[str, str]) -> dict[str, str | None]:
    """Each `SIGNOFF_*` name in `environ` that is not one of `ENV_VARS`, with the one it most looks
    like (or None): a misspelt name is never read, so its value silently never applies."""
    from difflib import get_close_matches

    return {name: next(iter(get_close_matches(name, ENV_VARS, n=1, cutoff=0.85)), None)
            for name in sorted(environ) if name.startswith("SIGNOFF_") and name not in ENV_VARS}


SECRET_VARS = frozenset({"SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "SLACK_APP_TOKEN", "SIGNOFF_AUDIT_WEBHOOK_SECRET",
                         "PAGERDUTY_TOKEN", "OPSGENIE_API_KEY", "SIGNOFF_OIDC_CLIENT_SECRET"})

_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def parse_duration(value: Any) -> timedelta:
    """`90s`, `15m`, `2h`, `1h30m`, `1d` (or a bare number of seconds) as a positive `timedelta`."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    else:
        text = str(value).strip().lower()
        match = _DURATION.match(text) if text else None
        if text.isdigit():
            seconds = int(text)
        elif match and any(match.groups()):
            d, h, m, s = (int(g or 0) for g in match.groups())
            seconds = d * 86400 + h * 3600 + m * 60 + s
        else:
            raise ValueError(f"expected a duration like 90s, 15m, 2h, 1h30m or 1d, got {value!r}")
    if seconds <= 0:
        raise ValueError("must be longer than zero")
    return timedelta(seconds=seconds)


def _parse_ids(value: Any) -> frozenset[str]:
    from signoff.runtime.people import APPROVER_FORMS, approver_kind

    items = value if isinstance(value, list | set | frozenset | tuple) else str(value).split(",")
    ids = frozenset(str(item).strip() for item in items if str(item).strip())
    bad = sorted(i for i in ids if approver_kind(i) is None)
    if bad:
        raise ValueError(f"expected each to be {APPROVER_FORMS}, got {', '.join(bad)}")
    return ids


def _channel_id(value: Any) -> str:
    text = str(value).strip()
    if not re.match(r"^[CGD][A-Z0-9]{2,}$", text):
        raise ValueError(f"expected a channel id like C0123ABCD (not a name), got {text!r}")
    return text


def _http_url(value: Any) -> str:
    url = str(value).strip()
    if not re.match(r"^https?://[^/\s]+", url):
        raise ValueError("expected an http(s) URL")  # the URL itself is not echoed: it may carry a token
    return url


def _api_url(value: Any) -> str:
    url = _http_url(value)
    # WebClient joins method names onto the base URL, so it must end with a slash.
    return url if url.endswith("/") else url + "/"


Duration = Annotated[timedelta, BeforeValidator(parse_duration)]
DatabaseUrl = Annotated[str, BeforeValidator(lambda v: sqlalchemy_database_url(str(v)))]
SlackIds = Annotated[frozenset[str], BeforeValidator(_parse_ids)]
ChannelId = Annotated[str, BeforeValidator(_channel_id)]
ApiUrl = Annotated[str, BeforeValidator(_api_url)]
HttpUrl = Annotated[str, BeforeValidator(_http_url)]
LogLevel = Annotated[
    Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], BeforeValidator(lambda v: str(v).strip().upper())
]
LogFormat = Annotated[Literal["text", "json"], BeforeValidator(lambda v: str(v).strip().lower())]


def _field(name: str, **kwargs: Any) -> Any:
    default = ENV_VARS[name]
    return Field(default if default != "" else None, alias=name, **kwargs)


def _check_failpoints(value: Any) -> Any:
    from signoff.runtime.failpoints import Failpoints

    if value:
        Failpoints(str(value))  # raises ValueError naming the bad point
    return value


Failpoint = Annotated[str | None, BeforeValidator(_check_failpoints)]


def _check_review_schedule(value: Any) -> Any:
    from signoff.bot.review_schedule import review_trigger

    review_trigger(str(value))  # raises ValueError naming what is wrong
    return str(value).strip()


ReviewSchedule = Annotated[str, BeforeValidator(_check_review_schedule)]


class Settings(BaseModel):
    """Everything `signoff` can be configured with, parsed and checked."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid", validate_default=True)

    slack_bot_token: SecretStr | None = _field("SLACK_BOT_TOKEN")
    slack_signing_secret: SecretStr | None = _field("SLACK_SIGNING_SECRET")
    slack_app_token: SecretStr | None = _field("SLACK_APP_TOKEN")
    slack_api_url: ApiUrl = _field("SLACK_API_URL")
    database_url: DatabaseUrl = _field("SIGNOFF_DATABASE_URL", repr=False)
    model: str = _field("SIGNOFF_MODEL", min_length=1)
    tools: str = _field("SIGNOFF_TOOLS", min_length=1)
    mcp_config: str | None = _field("SIGNOFF_MCP_CONFIG")
    gateway_config: str | None = _field("SIGNOFF_GATEWAY_CONFIG")
    http_tools: str | None = _field("SIGNOFF_HTTP_TOOLS")
    instructions: str | None = _field("SIGNOFF_INSTRUCTIONS")
    prices: str | None = _field("SIGNOFF_PRICES")
    approvers: SlackIds = Field(frozenset(), alias="SIGNOFF_APPROVERS")
    policy: str | None = _field("SIGNOFF_POLICY")
    pagerduty_token: SecretStr | None = _field("PAGERDUTY_TOKEN")
    pagerduty_url: HttpUrl = _field("SIGNOFF_PAGERDUTY_URL")
    opsgenie_api_key: SecretStr | None = _field("OPSGENIE_API_KEY")
    opsgenie_url: HttpUrl = _field("SIGNOFF_OPSGENIE_URL")
    allow_self_approval: bool = _field("SIGNOFF_ALLOW_SELF_APPROVAL")
    approval_channel: ChannelId | None = _field("SIGNOFF_APPROVAL_CHANNEL")
    approval_ttl: Duration = _field("SIGNOFF_APPROVAL_TTL")
    dispatch_window: Duration = _field("SIGNOFF_DISPATCH_WINDOW")
    sweep_interval: Duration = _field("SIGNOFF_SWEEP_INTERVAL")
    review_schedule: ReviewSchedule = _field("SIGNOFF_REVIEW_SCHEDULE")
    review_remind_after: Duration = _field("SIGNOFF_REVIEW_REMIND_AFTER")
    max_steps: int = _field("SIGNOFF_MAX_STEPS", gt=0)
    max_tool_calls: int | None = _field("SIGNOFF_MAX_TOOL_CALLS", gt=0)
    max_tokens: int | None = _field("SIGNOFF_MAX_TOKENS", gt=0)
    max_cost_usd: float | None = _field("SIGNOFF_MAX_COST_USD", gt=0)
    max_seconds: float | None = _field("SIGNOFF_MAX_SECONDS", gt=0)
    stall_turns: int = _field("SIGNOFF_STALL_AFTER", ge=0)
    extend_steps: int = _field("SIGNOFF_EXTEND_STEPS", gt=0)
    port: int = _field("SIGNOFF_PORT", ge=1, le=65535)
    workers: int = _field("SIGNOFF_WORKERS", ge=1, le=256)
    api_rate: int = _field("SIGNOFF_API_RATE", ge=1, le=1_000_000)
    lease_seconds: int = _field("SIGNOFF_LEASE_SECONDS", gt=0)
    outbox: str = _field("SIGNOFF_OUTBOX", min_length=1)
    audit_webhook_url: HttpUrl | None = _field("SIGNOFF_AUDIT_WEBHOOK_URL", repr=False)
    audit_webhook_secret: SecretStr | None = _field("SIGNOFF_AUDIT_WEBHOOK_SECRET")
    oidc_issuer: HttpUrl | None = _field("SIGNOFF_OIDC_ISSUER")
    oidc_client_id: str | None = _field("SIGNOFF_OIDC_CLIENT_ID")
    oidc_client_secret: SecretStr | None = _field("SIGNOFF_OIDC_CLIENT_SECRET")
    public_url: HttpUrl | None = _field("SIGNOFF_PUBLIC_URL")
    signing_key: str | None = _field("SIGNOFF_SIGNING_KEY")
    trusted_keys: str | None = _field("SIGNOFF_TRUSTED_KEYS")
    log_level: LogLevel = _field("SIGNOFF_LOG_LEVEL")
    log_format: LogFormat = _field("SIGNOFF_LOG_FORMAT")
    failpoints: Failpoint = _field("SIGNOFF_FAILPOINTS")

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Settings:
        """Read `ENV_VARS` from `environ`; empty values count as unset.

        Raises `ConfigError` naming every bad variable, without echoing secret values.
        """
        from signoff.runtime.errors import ConfigError

        values = {
            name: environ[name].strip() for name in ENV_VARS if name in environ and environ[name].strip()
        }
        if "SIGNOFF_REVIEW_SCHEDULE" in environ and not environ["SIGNOFF_REVIEW_SCHEDULE"].strip():
            values["SIGNOFF_REVIEW_SCHEDULE"] = "off"  # set empty: no reviews, rather than the default
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            raise ConfigError(_problems(exc)) from None

    @property
    def socket_mode(self) -> bool:
        """Socket Mode when an app-level token is configured, HTTP otherwise."""
        return self.slack_app_token is not None

    @property
    def stall_after(self) -> int | None:
        """`SIGNOFF_STALL_AFTER` for the runtime: None when stall detection is off."""
        return self.stall_turns or None

    @property
    def budget(self) -> Budget:
        """The default budget for new runs."""
        from signoff.runtime.budget import Budget

        return Budget(
            max_steps=self.max_steps, max_tool_calls=self.max_tool_calls, max_tokens=self.max_tokens,
            max_cost_usd=self.max_cost_usd, max_seconds=self.max_seconds,
        )

    def for_serve(self) -> Settings:
        """Check what `signoff serve` needs besides what the CLI needs; raise `ConfigError` if not."""
        from signoff.runtime.errors import ConfigError
        from signoff.runtime.people import CHANNEL_MEMBERS

        problems = []
        if self.slack_bot_token is None:
            problems.append("SLACK_BOT_TOKEN: required by `signoff serve` (a bot token, xoxb-...)")
        elif not self.slack_bot_token.get_secret_value().startswith("xoxb-"):
            problems.append("SLACK_BOT_TOKEN: expected a bot token starting with xoxb-")
        if self.socket_mode:
            assert self.slack_app_token is not None
            if not self.slack_app_token.get_secret_value().startswith("xapp-"):
                problems.append("SLACK_APP_TOKEN: expected an app-level token starting with xapp-")
        elif self.slack_signing_secret is None:
            problems.append(
                "SLACK_SIGNING_SECRET: required in HTTP mode (or set SLACK_APP_TOKEN to use Socket Mode)"
            )
        if not self.approvers:
            # Deciding who may approve is the operator's call; no default is safe for every workspace.
            problems.append(f"SIGNOFF_APPROVERS: required by `signoff serve`: the Slack user ids (U...) and user "
                            f"group ids (S...) who may approve, {CHANNEL_MEMBERS} for any member of the channel "
                            "where approvals are posted, or on-call schedules (pagerduty:<schedule id>, "
                            "opsgenie:<schedule name>)")
        problems += self.audit_webhook_problems() + self.console_problems()
        if problems:
            raise ConfigError(problems)
        return self

    def audit_webhook_problems(self) -> list[str]:
        """What keeps the audit webhook from delivering: a URL without a secret to sign with."""
        if self.audit_webhook_url is not None and self.audit_webhook_secret is None:
            return ["SIGNOFF_AUDIT_WEBHOOK_SECRET: required with SIGNOFF_AUDIT_WEBHOOK_URL (each delivery is "
                    "signed with it, and the receiver checks the signature)"]
        return []

    def console_problems(self) -> list[str]:
        """What keeps the web console from signing anyone in: an issuer without its client, or
        without the public URL the sign-in returns to (all unset: the console is off)."""
        if self.oidc_issuer is None:
            given = [name for name, value in (("SIGNOFF_OIDC_CLIENT_ID", self.oidc_client_id),
                                              ("SIGNOFF_OIDC_CLIENT_SECRET", self.oidc_client_secret)) if value]
            return [f"{name}: set without SIGNOFF_OIDC_ISSUER, so the web console stays off" for name in given]
        needed = (("SIGNOFF_OIDC_CLIENT_ID", self.oidc_client_id, "Signoff's client id at the issuer"),
                  ("SIGNOFF_OIDC_CLIENT_SECRET", self.oidc_client_secret, "Signoff's client secret at the issuer"),
                  ("SIGNOFF_PUBLIC_URL", self.public_url, "the https URL people reach Signoff at"))
        return [f"{name}: required with SIGNOFF_OIDC_ISSUER ({what})" for name, value, what in needed if not value]

    @property
    def console_on(self) -> bool:
        """Whether `signoff serve` serves the web console under /ui/ (every OIDC setting is given)."""
        return bool(self.oidc_issuer and self.oidc_client_id and self.oidc_client_secret and self.public_url)

    def __repr_args__(self) -> Any:
        yield from super().__repr_args__()
        yield "database_url", mask_url(self.database_url)


def mask_url(url: str) -> str:
    """The URL with any password replaced by `***`, for logs and error messages."""
    return re.sub(r"(://[^:/@\s]*:)[^@/\s]*@", r"\1***@", url)


def _problems(exc: ValidationError) -> list[str]:
    problems = []
    for err in exc.errors(include_input=False, include_url=False):
        name = str(err["loc"][0]) if err["loc"] else "settings"
        message = err["msg"].removeprefix("Value error, ")
        if name in SECRET_VARS or name == "SIGNOFF_DATABASE_URL":
            message = err["type"].replace("_", " ")  # pydantic messages may quote the value
        problems.append(f"{name}: {message}")
    return problems
