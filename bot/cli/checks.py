"""`signoff check`: is this installation able to work? One line per part, "ok", "FAIL" or "skip"."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from signoff.bot.cli.outbox_check import check_outbox
from signoff.bot.cli.policy import policy_summary
from signoff.bot.cli.rendering import one_line
from signoff.bot.cli.toolview import check_http, check_mcp
from signoff.bot.cli.webhook_check import check_audit_webhook
from signoff.bot.settings import Settings
from signoff.bot.wiring import (
    check_schema,
    is_default_sqlite,
    load_approval_policy,
    load_tools,
    masked,
    model_env,
    resolve_model_spec,
)
from signoff.runtime.approval_policy import ApprovalPolicy
from signoff.runtime.errors import ConfigError, SignoffError
from signoff.runtime.models import check_model
from signoff.tools.base import Tool


def check_lines(settings: Settings, environ: Mapping[str, str]) -> list[str]:
    """Tools (and each MCP server, started to list its tools, and each HTTP API), the approval policy,
    database, Slack and model, each checked for real (the file parsed, a query, `auth.test`, a model call)."""
    return [check_tools(settings, environ), *check_mcp(settings, environ), *check_http(settings, environ),
            *check_policy(settings, environ), check_database(settings), check_outbox(settings),
            check_audit_webhook(settings), check_receipts(settings), check_slack(settings),
            check_model_line(settings, environ)]


def check_tools(settings: Settings, environ: Mapping[str, str] | None = None) -> str:
    try:
        tools = load_tools(settings, environ)
    except ConfigError as exc:
        return f"FAIL tools: {exc}"
    return f"ok tools: {settings.tools} -> {', '.join(tools)}"


def check_policy(settings: Settings, environ: Mapping[str, str] | None = None) -> list[str]:
    """The policy line, then a warning for each rule whose `tool` names no tool the model sees: a
    misspelt name never matches, so its rule never applies (a deny would not deny)."""
    try:
        policy = load_approval_policy(settings)
    except ConfigError as exc:
        return [f"FAIL policy: {exc}"]
    lines = [f"ok policy: {policy_summary(policy)}"]
    try:
        tools = load_tools(settings, environ)
    except ConfigError:
        return lines  # the tools line says why
    lines += [f"warn policy: rule {rule.name!r} names no tool the model sees ({rule.tool}); check its spelling"
              for rule in policy.rules if not any(rule.names(name) for name in tools)]
    lines += [f"warn policy: {warning}" for warning in loose_value_warnings(policy, tools)]
    return lines


def loose_value_warnings(policy: ApprovalPolicy, tools: Mapping[str, Tool]) -> list[str]:
    """One line for each allow rule that converts or compares an argument a tool it names lets be
    something else (null, true or false, left out): such a call fails the rule's `when`, so it is
    asked about rather than allowed, which the rule's author should hear before an approver does."""
    warnings = []
    for rule in (rule for rule in policy.rules if rule.decision == "allow"):
        reads = rule.value_reads()
        for tool in (tool for name, tool in tools.items() if reads and rule.names(name)):
            for read in reads:
                loose = _loose_values(tool.json_schema(), read.argument, guarded=read.guarded)
                if loose:
                    warnings.append(f"rule {rule.name!r} {read.verb} args.{read.argument}, which {tool.name} lets be "
                                    f"{loose}: such a call is asked about, not allowed (write "
                                    f"`has(args.{read.argument}) && ...` to say what you mean)")
    return warnings


def _loose_values(schema: Mapping[str, Any], argument: str, *, guarded: bool) -> str | None:
    """What `argument` may be, by the tool's JSON schema, that no conversion or comparison takes."""
    properties = schema.get("properties")
    declared = properties.get(argument) if isinstance(properties, dict) else None
    if not isinstance(declared, dict):
        return None if schema.get("additionalProperties") is False else "anything (its schema does not declare it)"
    kinds = _json_types(declared, schema.get("$defs") or {}, depth=0)
    loose = [words for kind, words in (("null", "null"), ("boolean", "true or false")) if kind in kinds]
    required = schema.get("required") or []
    if not guarded and (argument not in required or "default" in declared):
        loose.append("left out")
    return " or ".join(loose) or None


def _json_types(schema: Mapping[str, Any], definitions: Mapping[str, Any], depth: int) -> set[str]:
    """The JSON types a schema admits (of those a rule cares about: null, boolean, other), through
    `anyOf`, `oneOf`, `allOf`, `enum`, `const` and local `$ref`s; a schema that constrains none admits
    every type."""
    if depth > 8:  # a `$ref` cycle: say nothing rather than loop
        return set()
    kinds: set[str] = set()
    declared = schema.get("type")
    kinds.update([declared] if isinstance(declared, str) else declared if isinstance(declared, list) else [])
    for value in [*schema.get("enum", []), *([schema["const"]] if "const" in schema else [])]:
        kinds.add("null" if value is None else "boolean" if isinstance(value, bool) else "other")
    for branch in [*schema.get("anyOf", []), *schema.get("oneOf", [])]:
        kinds |= _json_types(branch, definitions, depth + 1) if isinstance(branch, dict) else set()
    every = [_json_types(b, definitions, depth + 1) for b in schema.get("allOf", []) if isinstance(b, dict)]
    kinds |= set.intersection(*every) if every else set()
    reference = schema.get("$ref")
    if isinstance(reference, str) and reference.startswith("#/$defs/"):
        target = definitions.get(reference.removeprefix("#/$defs/"))
        kinds |= _json_types(target, definitions, depth + 1) if isinstance(target, dict) else set()
    unconstrained = not any(key in schema for key in ("type", "enum", "const", "anyOf", "oneOf", "$ref", "allOf"))
    return {"null", "boolean"} if unconstrained else kinds


def check_receipts(settings: Settings) -> str:
    """Whether decisions are signed: the signing key read, and each key trusted besides."""
    from signoff.bot.wiring import trusted_keys
    from signoff.receipts import key_id

    try:
        keys = trusted_keys(settings)
    except ConfigError as exc:
        return f"FAIL receipts: {exc}"
    if settings.signing_key is None:
        return "skip receipts: SIGNOFF_SIGNING_KEY is not set; decisions get no signed receipts"
    besides = f"; {len(keys) - 1} more trusted" if len(keys) > 1 else ""
    return f"ok receipts: each decision is signed with key {key_id(keys[0])}{besides}"


def check_database(settings: Settings) -> str:
    url = settings.database_url
    try:
        backend = make_url(url).get_backend_name()
    except ArgumentError:
        return "FAIL database: SIGNOFF_DATABASE_URL is not a database URL"
    if is_default_sqlite(url) and not Path(make_url(url).database or "").exists():
        return f"ok database: {url} does not exist yet; `signoff run` creates it on first use"
    options = {"connect_args": {"connect_timeout": 5}} if backend == "postgresql" else {}
    try:
        check_schema(url, **options)
    except ConfigError as exc:
        return f"FAIL database: {_scrub(str(exc), url)}"
    return f"ok database: {masked(url)} is reachable and its schema is current"


def check_slack(settings: Settings) -> str:
    if settings.slack_bot_token is None:
        return "skip slack: SLACK_BOT_TOKEN is not set (only `signoff serve` needs it)"
    from slack_sdk import WebClient
    from slack_sdk.errors import SlackApiError, SlackClientError

    client = WebClient(token=settings.slack_bot_token.get_secret_value(), base_url=settings.slack_api_url,
                       timeout=10)
    try:
        reply = client.auth_test()
    except SlackApiError as exc:
        return f"FAIL slack: auth.test at {settings.slack_api_url} answered {exc.response.get('error', 'an error')}"
    except (SlackClientError, OSError) as exc:
        return f"FAIL slack: cannot reach {settings.slack_api_url}: {one_line(exc, 200)}"
    return f"ok slack: auth.test accepted the bot token ({reply.get('user')} in {reply.get('team')})"


def check_model_line(settings: Settings, environ: Mapping[str, str]) -> str:
    try:
        text = check_model(resolve_model_spec(settings.model), model_env(environ))
    except SignoffError as exc:
        return f"FAIL model {settings.model}: {one_line(exc, 300)}"
    return f"ok model {settings.model}: {text.removeprefix('ok').lstrip(': ')}"


def _scrub(text: str, url: str) -> str:
    """`text` without the URL's password, even where a driver quoted it."""
    try:
        password = make_url(url).password
    except ArgumentError:
        return text
    return text.replace(str(password), "***") if password else text
