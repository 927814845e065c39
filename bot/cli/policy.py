"""`signoff policy explain`: what the approval policy decides for one call, and why; and the
policy's one-line summary `signoff check` prints, and the wording `policy test` and `policy
backtest` share with it.

`signoff policy --help` imports this module: the policy engine and the tools are imported inside
the functions that use them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, assert_never

import click

from signoff.bot.cli.options import DEMO, MCP_CONFIG, OUTBOX, POLICY, TOOLS, load_settings, options
from signoff.bot.cli.outcomes import EXIT_OK

if TYPE_CHECKING:
    from signoff.runtime.approval_policy import ApprovalPolicy, Requirement, Verdict
    from signoff.tools.base import Tool


def policy_summary(policy: ApprovalPolicy) -> str:
    """`policy.yaml - 4 rules, digest 1a2b...`, or what the built-in policy does."""
    from signoff.runtime.approval_policy import BUILT_IN

    if policy.source == BUILT_IN:
        return "built-in (every side effect asks SIGNOFF_APPROVERS)"
    count = len(policy.rules)
    return f"{policy.source} - {count} rule{'' if count == 1 else 's'}, digest {policy.digest}"


def verdict_line(verdict: Verdict) -> str:
    """The rule that decided a call and what it requires, e.g. `rule small-refunds: allow - runs
    without asking anyone`."""
    from signoff.runtime.approval_policy import Allow, Ask, Deny

    match verdict:
        case Allow(rule=None):
            return "no rule matches: allow (default for read-only tools) - runs without asking anyone"
        case Allow(rule=rule):
            return f"rule {rule}: allow - runs without asking anyone"
        case Ask(rule=None, requirement=requirement):
            return f"no rule matches: ask (default for side effects) - {requirement_words(requirement)}"
        case Ask(rule=rule, requirement=requirement):
            return f"rule {rule}: ask - {requirement_words(requirement)}"
        case Deny(rule=rule, reason=reason):
            return f'rule {rule}: deny - "{reason}"'
        case _:
            assert_never(verdict)


def requirement_words(requirement: Requirement) -> str:
    """`2 approvals from S0FINANCE, within 2h, confirm before approving`."""
    from signoff.bot.words import who_decides

    words = [who_decides(requirement.to_json()), f"within {duration_words(requirement.ttl)}"]
    if requirement.allow_self_approval:
        words.append("the requester may approve it too")
    if requirement.confirm:
        words.append("confirm before approving")
    return ", ".join(words)


def duration_words(ttl: timedelta) -> str:
    """A duration as a policy file writes it: `90s` is `1m30s`, `7200` seconds is `2h`."""
    seconds, parts = int(ttl.total_seconds()), []
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)):
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


def error_lines(policy: ApprovalPolicy, verdict: Verdict) -> list[str]:
    """Each `when` that could not be evaluated, and whether its rule was passed over or applied."""
    lines = []
    for error in verdict.errors:
        # `evaluate` writes each as "rule '<name>': <message>".
        rule = next((r for r in policy.rules if error.startswith(f"rule {r.name!r}: ")), None)
        if rule is None:
            lines.append(f"could not be evaluated: {error}")
            continue
        message = error.removeprefix(f"rule {rule.name!r}: ")
        fate = "applied" if rule.name == verdict.rule else "passed over"
        lines.append(f"rule {rule.name} could not be evaluated: {message}, so it was {fate}")
    return lines


def parsed_args(text: str) -> dict[str, Any]:
    """The JSON object ARGS, or a usage error naming what is wrong with it."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})",
                                 param_hint="ARGS") from None
    if not isinstance(value, dict):
        raise click.BadParameter(f"must be a JSON object of arguments, got {type(value).__name__}",
                                 param_hint="ARGS")
    return value


@click.command("explain")
@click.argument("tool")
@click.argument("args", default="{}")
@click.option("--requester", default="", help="Who the run is for, as rules see `requester` (a Slack user id).")
@click.option("--channel", default="", help="The run's channel, as rules see `channel` (a Slack channel id).")
@options(POLICY, TOOLS, MCP_CONFIG, OUTBOX, DEMO)
def policy_explain(tool: str, args: str, requester: str, channel: str, policy: str | None, tools: str | None,
                   mcp_config: str | None, outbox: str | None, demo: bool) -> int:
    """Say what the approval policy (SIGNOFF_POLICY, or --policy) decides for calling TOOL with
    ARGS (a JSON object, default {}): the rule that matches and what it requires, or the default.

    The tools are loaded as `signoff tools` loads them, to know whether TOOL is read-only; the
    rules see the arguments sent, as the tool validates them, without the defaults it fills in
    (as in a run), and the usage of a run just started.
    Nothing runs and nothing is recorded.

    \b
        signoff policy explain issue_refund '{"amount_usd": "20000.00"}'
    """
    from signoff.bot.wiring import load_approval_policy, load_tools
    from signoff.runtime.schema import NO_USAGE

    arguments = parsed_args(args)
    settings = load_settings({"policy": policy, "tools": tools, "mcp_config": mcp_config, "outbox": outbox},
                             demo=demo)
    loaded_policy = load_approval_policy(settings)
    loaded = load_tools(settings)
    if tool not in loaded:
        raise click.ClickException(f"unknown tool {tool!r}; the tools are {', '.join(loaded) or '(none)'}")
    verdict, notes = decided(loaded_policy, loaded[tool], arguments, requester=requester, channel=channel,
                             usage=NO_USAGE.to_json())
    for line in [verdict_line(verdict), *error_lines(loaded_policy, verdict), *notes,
                 f"policy: {policy_summary(loaded_policy)}"]:
        click.echo(line)
    return EXIT_OK


def decided(policy: ApprovalPolicy, tool: Tool, arguments: Mapping[str, Any], *, requester: str, channel: str,
            usage: Mapping[str, Any]) -> tuple[Verdict, list[str]]:
    """What `policy` decides of calling `tool` with `arguments`, the rules seeing them as a run's
    would (`arguments_as_validated`), and a note on how they differ from `arguments`."""
    from signoff.runtime.approval_policy import ProposedCall, evaluate

    facts, notes = arguments_as_validated(tool, arguments)
    call = ProposedCall(tool=tool.name, args=facts, side_effect=tool.side_effect, requester=requester,
                        channel=channel, usage=usage)
    return evaluate(policy, call), notes


def arguments_as_validated(tool: Tool, arguments: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The arguments a rule would see (those sent, as the tool validates them, without the defaults
    it fills in) and a note on how they differ from ARGS."""
    try:
        checked = tool.checked(dict(arguments))
    except ValueError as exc:
        # A real run would stop here, before the policy; the rules are still worth explaining.
        return dict(arguments), [f"note: the rules saw the arguments as given; a run would refuse them before "
                                 f"any rule ({exc})"]
    sent, defaulted = checked.sent, sorted(checked.defaulted)
    if sent == arguments and not defaulted:
        return sent, []
    how = f"as {tool.name} validates them"
    if defaulted:
        # A default is not what the model asked for: `has(args.x)` is false and a conversion an error.
        how += f", without the default{'s' if len(defaulted) > 1 else ''} it fills in for {', '.join(defaulted)}"
    shown = json.dumps(sent, ensure_ascii=False, sort_keys=True)
    return sent, [f"note: the rules saw the arguments sent, {how}: {shown}"]
