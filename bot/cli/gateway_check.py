"""`signoff check --gateway servers.json`: what the gateway would offer from that file, and how the
policy gates each tool. Each server is started to list its tools, as `signoff check` starts those of
`SIGNOFF_MCP_CONFIG`; the classification (read-only or a side effect, and where that came from) is
the one the gateway and `signoff tools` use, and the policy's word is read from its rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from signoff.runtime.approval_policy import ApprovalPolicy
    from signoff.tools.mcp import Gate

MAX_WHEN_CHARS = 80


def gateway_lines(path: str, policy: ApprovalPolicy, environ: Mapping[str, str]) -> list[str]:
    """One line per server of the file at `path` (ok, FAIL or skip), then one per tool: its gate as
    `signoff check` shows it, and what the policy does with a call to it."""
    from signoff.bot.cli.toolview import server_lines
    from signoff.tools.mcp import McpConfigError, McpServers

    try:
        servers = McpServers.from_file(path, environ)
    except McpConfigError as exc:
        return [f"FAIL gateway: {problem}" for problem in exc.problems]
    try:
        lines: list[str] = []
        for report in servers.reports():
            shown = server_lines(report, {report.name})
            lines.append(shown[0].replace(" mcp ", " gateway ", 1))
            if report.error or report.disabled:
                continue
            width = max((len(name) for name in report.gates), default=0)
            lines += [f"    {name:<{width}}  {policy_words(policy, name, gate)}  [{gate.summary()}]"
                      for name, gate in report.gates.items()]
            lines += [f"    skipped {why}" for why in report.skipped]
        return lines
    except McpConfigError as exc:  # the SDK is not installed
        return [f"FAIL gateway: {problem}" for problem in exc.problems]
    finally:
        servers.close()


def policy_words(policy: ApprovalPolicy, tool: str, gate: Gate) -> str:
    """`read: runs unasked (no rule names it)`, `write: refused (rule no-force-push)`, or, with
    rules that hold only when their `when` does, `write: runs unasked when ... (rule small-adds);
    otherwise asks (no rule names it)`."""
    decided = {"allow": "runs unasked", "ask": "asks", "deny": "refused"}
    conditional: list[str] = []
    last = "runs unasked (no rule names it)" if not gate.side_effect else "asks (no rule names it)"
    for rule in policy.rules_naming(tool):
        if rule.when is None:
            last = f"{decided[rule.decision]} (rule {rule.name})"
            break
        when = rule.when if len(rule.when) <= MAX_WHEN_CHARS else rule.when[:MAX_WHEN_CHARS - 1] + "…"
        conditional.append(f"{decided[rule.decision]} when {when} (rule {rule.name})")
    kind = "read" if not gate.side_effect else "write"
    if not conditional:
        return f"{kind}: {last}"
    return f"{kind}: " + "; ".join([*conditional, "otherwise " + last.replace("no rule names it", "by default")])
