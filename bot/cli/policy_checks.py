"""`signoff policy test` (a policy against cases that say what it should decide, for CI) and
`signoff policy backtest` (a policy against the calls a database recorded).

`signoff policy --help` imports this module: the runtime is imported inside the functions that use it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from signoff.bot.cli.options import DATABASE_URL, MCP_CONFIG, OUTBOX, TOOLS, load_settings, options
from signoff.bot.cli.outcomes import EXIT_ERROR, EXIT_OK

if TYPE_CHECKING:
    from signoff.bot.settings import Settings
    from signoff.runtime.approval_policy import ApprovalPolicy
    from signoff.runtime.backtest import Backtest, Backtested, Change, Ruling
    from signoff.runtime.policy_cases import Case
    from signoff.tools.base import Tool

FAIL_ON = ("newly-allowed", "newly-asked", "newly-denied", "changed-approvers")
"""The changes `--fail-on` takes: `backtest.CHANGES` but `unchanged`, as flags spell them."""
_CHANGE_WORDS = {"newly_allowed": "newly allowed", "newly_asked": "newly asked", "newly_denied": "newly denied",
                 "changed_approvers": "changed approvers", "unchanged": "unchanged"}


def _policy(settings: Settings) -> ApprovalPolicy:
    """The policy POLICY names, or an error naming the file (not SIGNOFF_POLICY, which was not used)."""
    from signoff.bot.wiring import load_approval_policy
    from signoff.runtime.errors import ConfigError

    try:
        return load_approval_policy(settings)
    except ConfigError as exc:
        raise click.ClickException(str(exc).removeprefix("SIGNOFF_POLICY: ")) from None


# -- signoff policy test ---------------------------------------------------------------------------


@click.command("test")
@click.argument("policy_file", metavar="POLICY")
@click.option("--cases", "cases_file", required=True, metavar="PATH",
              help="YAML list of cases: tool, args, optionally requester, channel, usage; and expect "
                   "(allow, ask or deny), optionally rule, approvers, quorum, ttl, grant.")
@options(TOOLS, MCP_CONFIG, OUTBOX)
def policy_test(policy_file: str, cases_file: str, tools: str | None, mcp_config: str | None,
                outbox: str | None) -> int:
    """Check the approval policy POLICY against the cases in --cases: one line per case it fails
    (what was expected, what the policy decided and by which rule), then a summary.

    The tools are loaded as `signoff policy explain` loads them, to know whether each is read-only
    and to show the rules the arguments as a run would. Exit status 0 when every case passes, 1
    when any fails, 2 when the cases file cannot be read (naming the case and the field).

    \b
        signoff policy test policy.yaml --cases policy-cases.yaml
    """
    from signoff.bot.wiring import load_tools

    settings = load_settings({"policy": policy_file, "tools": tools, "mcp_config": mcp_config, "outbox": outbox})
    loaded_policy = _policy(settings)
    cases = _read_cases(cases_file)
    loaded = load_tools(settings)
    for case in cases:
        if case.tool not in loaded:
            raise click.BadParameter(f"{cases_file}: {case.label}: tool: unknown tool {case.tool!r}; the tools are "
                                     f"{', '.join(loaded) or '(none)'}", param_hint="--cases")
    failed = 0
    for case in cases:
        line = _failure(loaded_policy, loaded[case.tool], case)
        if line is not None:
            failed += 1
            click.echo(line)
    click.echo(_summary(len(cases), failed))
    return EXIT_ERROR if failed else EXIT_OK


def _read_cases(path: str) -> list[Case]:
    from signoff.runtime.policy_cases import CasesError, parse_cases

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise click.BadParameter(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}",
                                 param_hint="--cases") from None
    try:
        return parse_cases(text, source=path)
    except CasesError as exc:
        raise click.BadParameter(str(exc), param_hint="--cases") from None


def _failure(policy: ApprovalPolicy, tool: Tool, case: Case) -> str | None:
    """The line for a case the policy fails, or None when it passes."""
    from signoff.bot.cli.policy import decided, verdict_line
    from signoff.runtime.policy_cases import differences

    verdict, _notes = decided(policy, tool, case.args, requester=case.requester, channel=case.channel,
                              usage=case.usage)
    missed = differences(case, verdict)
    if not missed:
        return None
    return (f"FAIL {case.label}: expected {_expected(case.expected)}; the policy decided: {verdict_line(verdict)}"
            f" ({', '.join(missed)} differ{'s' if len(missed) == 1 else ''})")


def _expected(expected: Mapping[str, Any]) -> str:
    """`ask, rule big-refunds, approvers S0FINANCE, quorum 2`: the case's expectations, as written."""
    from signoff.bot.cli.policy import duration_words

    words = [str(expected["expect"])]
    for name, value in expected.items():
        match name:
            case "expect":
                continue
            case "rule":
                words.append("no rule (the default)" if value is None else f"rule {value}")
            case "approvers":
                words.append(f"approvers {', '.join(value)}")
            case "ttl":
                words.append(f"ttl {duration_words(value)}")
            case "grant":
                words.append(_grant_words(value))
            case _:
                words.append(f"{name} {value}")
    return ", ".join(words)


def _grant_words(grant: Any) -> str:
    from signoff.bot.cli.policy import duration_words

    if isinstance(grant, bool):
        return "a grant offered" if grant else "no grant offered"
    same = f", same {', '.join(grant.same)}" if grant.same else ""
    return f"grant for {duration_words(grant.lasting)}{same}, scope {grant.scope}"


def _summary(total: int, failed: int) -> str:
    cases = f"{total} case{'' if total == 1 else 's'}"
    return f"{cases}: all passed" if not failed else f"{cases}: {total - failed} passed, {failed} failed"


# -- signoff policy backtest -----------------------------------------------------------------------


def _since(ctx: click.Context, param: click.Parameter, value: str) -> timedelta:
    from pydantic import TypeAdapter, ValidationError

    from signoff.runtime.policy_schema import Duration

    try:
        since: timedelta = TypeAdapter(Duration).validate_python(value.strip())
    except ValidationError:
        raise click.BadParameter(f"expected a duration like 90s, 15m, 2h, 1h30m or 7d, got {value!r}",
                                 ctx, param) from None
    return since


@click.command("backtest")
@click.argument("policy_file", metavar="POLICY")
@click.option("--since", default="7d", show_default=True, callback=_since,
              help="How far back to look: the calls recorded in this window.")
@options(DATABASE_URL)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: the counts and the calls that changed.")
@click.option("--fail-on", multiple=True, type=click.Choice(FAIL_ON),
              help="Exit 1 when any call would change this way (repeatable).")
def policy_backtest(policy_file: str, since: timedelta, database_url: str | None, as_json: bool,
                    fail_on: tuple[str, ...]) -> int:
    """Decide every call recorded in the last --since again by the approval policy POLICY, beside
    what the policy in force then decided: how many would newly run unasked, newly be asked, newly
    be denied, or be asked of other approvers (or another quorum), and those calls.

    Reads the database (SIGNOFF_DATABASE_URL, or --database-url) and writes nothing to it.

    \b
        signoff policy backtest policy.yaml --since 7d --fail-on newly-allowed
    """
    from signoff.bot.cli.policy import policy_summary
    from signoff.bot.wiring import recorded_calls_since
    from signoff.runtime.backtest import backtest

    settings = load_settings({"policy": policy_file, "database_url": database_url})
    loaded_policy = _policy(settings)
    recorded = recorded_calls_since(settings.database_url, datetime.now(UTC) - since)
    result = backtest(loaded_policy, recorded)
    if as_json:
        click.echo(json.dumps(result.to_json(), ensure_ascii=False))
    else:
        for line in _report(result, policy_summary(loaded_policy), since, len(recorded)):
            click.echo(line)
    failing = [name for name in fail_on if result.counts[_change(name)]]
    return EXIT_ERROR if failing else EXIT_OK


def _change(flag: str) -> Change:
    from signoff.runtime.backtest import CHANGES

    return next(change for change in CHANGES if change == flag.replace("-", "_"))


def _report(result: Backtest, summary: str, since: timedelta, total: int) -> list[str]:
    from signoff.bot.cli.policy import duration_words

    lines = [f"{total} call{'' if total == 1 else 's'} recorded in the last {duration_words(since)}, "
             f"decided again by {summary}:"]
    lines += [f"  {_CHANGE_WORDS[name]}: {count}" for name, count in result.counts.items()]
    lines += [_call_line(call) for call in result.changed]
    return lines


def _call_line(call: Backtested) -> str:
    recorded = call.recorded
    return (f"{_CHANGE_WORDS[call.change]}: {recorded.call.tool} in {recorded.run_id} (key {recorded.key}): "
            f"then {_ruling_words(recorded.then)}; now {_ruling_words(call.now)}")


def _ruling_words(ruling: Ruling) -> str:
    """`rule big-refunds: ask 2 approvals from S0FINANCE`, `no rule: allow`."""
    from signoff.bot.words import who_decides

    by = f"rule {ruling.rule}" if ruling.rule is not None else "no rule"
    if ruling.decision != "ask":
        return f"{by}: {ruling.decision}"
    if ruling.approvers is None and ruling.quorum is None:
        return f"{by}: ask (whom not recorded)"
    return f"{by}: ask {who_decides({'approvers': list(ruling.approvers or ()), 'quorum': ruling.quorum})}"
