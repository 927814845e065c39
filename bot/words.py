"""The words Slack and the terminal both say, and the Slack-id rule. Pure: no I/O, no Slack.

Limit names, the budget figures and line, the model label, what became of an approval or a
request, and what a Slack user or group id is. Plain ASCII text; each surface formats it
(`bot.slack.blocks` escapes it into mrkdwn, `bot.cli` prints it as it is).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from signoff.runtime.budget import usage_report
from signoff.runtime.records import ApprovalRecord

LIMIT_NAMES = {
    "max_steps": "steps", "max_tool_calls": "tool calls", "max_tokens": "tokens",
    "max_cost_usd": "cost (USD)", "max_seconds": "seconds",
}
"""Each budget limit as people read it; the keys are `runtime.budget.LIMIT_TO_USAGE`'s."""

DEMO_MODEL = "scripted:demo"
"""The built-in scripted demo: looks up the customer's orders, searches the handbook, proposes an email and two
refunds (under the demo's policy one runs unasked and one is refused)."""



def status_words(status: str) -> str:
    """A run status as people read it: `budget_exhausted` is `budget exhausted`."""
    return status.replace("_", " ")


def budget_figures(state: Mapping[str, Any]) -> list[str]:
    """Usage against each limit the run has, e.g. `["steps 2/8", "cost $0.0100/$1.00"]`."""
    figures = []
    for limit, report in usage_report(dict(state)).items():
        used, cap = report["used"], report["limit"]
        if limit == "max_cost_usd":
            figures.append(f"cost ${used:.4f}/${cap:.2f}")
        elif limit == "max_seconds":
            figures.append(f"seconds {used:.0f}/{cap:g}")
        else:
            figures.append(f"{LIMIT_NAMES[limit]} {used:g}/{cap:g}")
    return figures


def unlimited_figures(state: Mapping[str, Any]) -> list[str]:
    """Tool calls and cost so far where no limit holds them, e.g. `["tool calls 2"]` (cost only once spent)."""
    budget, usage = state.get("budget", {}), state.get("usage", {})
    figures = []
    if budget.get("max_tool_calls") is None:
        figures.append(f"tool calls {usage.get('tool_calls', 0)}")
    if budget.get("max_cost_usd") is None and usage.get("cost_usd"):
        figures.append(f"cost ${usage['cost_usd']:.4f}")
    return figures


def plain_budget_line(state: Mapping[str, Any]) -> str:
    """`budget_figures` then `unlimited_figures` in ASCII, e.g. `steps 3/8, tool calls 2`.

    The terminal's line; Slack's (`bot.slack.blocks.budget_line`) joins the same figures with `·`.
    """
    return ", ".join(budget_figures(state) + unlimited_figures(state))


def is_scripted(spec: str) -> bool:
    return spec.strip().lower().startswith("scripted:")


def model_label(spec: str) -> str:
    """The model as people should read it; a scripted one says plainly that it is not a model."""
    if not is_scripted(spec):
        return spec
    source = "the built-in demo script" if spec.strip() == DEMO_MODEL else spec.partition(":")[2]
    return f"scripted (not a real model), replaying {source}"


# -- outcome sentences ---------------------------------------------------------------------------
# In lower case and without a full stop, so each surface can start, stress and end them its own way.


def who_decides(asked: Mapping[str, Any] | None, name: Callable[[str], str] = str) -> str:
    """Who an approval waits for, e.g. `2 approvals from S0FINANCE (rule big-refunds)` or `1 approval
    from the approvers`; `name` shows each id (Slack mentions them)."""
    asked = asked or {}
    quorum = int(asked.get("quorum") or 1)
    approvers = [str(i) for i in asked.get("approvers") or ()]
    given = ("any member of the approval channel" if approvers == ["*"] else
             ", ".join("any member of the approval channel" if i == "*" else name(i) for i in approvers)
             if approvers else "the approvers")
    rule = asked.get("rule")
    return (f"{quorum} approval{'s' if quorum != 1 else ''} from {given}"
            + (f" (rule {rule})" if isinstance(rule, str) and rule else ""))


def approval_progress(approval: ApprovalRecord, name: Callable[[str], str] = str) -> str:
    """How far a quorum is, e.g. `1 of 2 approvals: U0LEE`."""
    approved = approval.approved_by
    return (f"{len(approved)} of {approval.quorum} approval{'s' if approval.quorum != 1 else ''}"
            + (f": {', '.join(name(user) for user in approved)}" if approved else ""))


def people(names: Sequence[str]) -> str:
    """Names as a sentence says them: `a`, `a and b`, `a, b and c`."""
    if len(names) <= 1:
        return "".join(names)
    return f"{', '.join(names[:-1])} and {names[-1]}"


def deciders(approval: ApprovalRecord, name: Callable[[str], str] = str) -> str | None:
    """Who decided an approval, for `approval_words`: every approver of an approved quorum (`U0A and
    U0B`), else the one who decided (None: nobody did)."""
    if not approval.decided_by:
        return None
    approved = approval.approved_by
    if approval.status in ("approved", "consumed", "expired") and len(approved) > 1:
        return people([name(user) for user in approved])
    return name(approval.decided_by)


def approval_words(status: str, decided_by: str | None) -> str:
    """What became of an approval, e.g. `denied by U0LEAD` or `expired, not executed`."""
    match status:
        case "approved" | "consumed":
            return f"approved by {decided_by}"
        case "denied":
            return f"denied by {decided_by}"
        case "expired" if decided_by:
            # Approved in time, but no worker could start it within the dispatch window.
            return f"approved by {decided_by} but not started in time; not executed"
        case "expired":
            return "expired, not executed"
        case "cancelled":
            return "cancelled, not executed"
        case "superseded":
            return "replaced by a new request; not executed"
        case _:
            return "waiting for a decision"


_REQUEST_WORDS = {  # request (`AlreadyDone.what`) -> (what it did, what follows once done, or "")
    "extend": ("extended", "the run continues"),
    "cancel": ("closed", ""),
    "retry": ("retried", "the run continues"),
    "reconcile.done": ("marked done", "the run continues"),
    "reconcile.retry": ("retried", "the call runs again"),
    "reconcile.abort": ("aborted", ""),
}


def request_words(request: str) -> tuple[str, str]:
    """What a request on a stopped run did and what follows, e.g. `("extended", "the run continues")`."""
    return _REQUEST_WORDS.get(request, ("acted on", ""))


def not_done(reason: str) -> str:
    """A runner's refusal (`NotAllowed`, `Mismatch`, `Refused`) as the person who asked is told it."""
    return f"not done: {reason}"


def capitalized(text: str) -> str:
    """`text` with its first letter in upper case, the rest as it is: one of the sentences above, begun."""
    return text[:1].upper() + text[1:]
