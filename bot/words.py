"""The words Slack and the terminal both say. Pure: no I/O, no Slack.

Limit names, the budget figures and line, run statuses, why a run stopped (a budget in numbers),
what Extend adds, the model label and the model's words beside a call, and what became of an
approval or a request (edited, allowing similar calls, timed out). Plain text; each surface formats
it (`bot.slack.blocks` escapes it into mrkdwn, `bot.cli` prints it as it is). Results and requests
in short are in `bot.summaries`; what a Slack user or group id is, in `runtime.people`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from signoff.bot.untrusted import flat, shown_lines
from signoff.runtime.budget import COUNTED_LIMITS, EXTEND_FRACTION, usage_report
from signoff.runtime.digests import call_digest
from signoff.runtime.durations import spoken
from signoff.runtime.records import ApprovalRecord, RunRecord

LIMIT_NAMES = {
    "max_steps": "steps", "max_tool_calls": "tool calls", "max_tokens": "tokens",
    "max_cost_usd": "cost (USD)", "max_seconds": "seconds",
}
"""Each budget limit as people read it; the keys are `runtime.budget.LIMIT_TO_USAGE`'s."""

DEMO_MODEL = "scripted:demo"
"""The built-in scripted demo: looks up the customer's orders, searches the handbook, proposes an email and two
refunds (under the demo's policy one runs unasked and one is refused)."""



_STATUS_WORDS = {"idle": "queued", "running": "working"}
"""Statuses named for what the run is doing: `idle` is waiting for a worker to take it up."""


def status_words(status: str) -> str:
    """A run status as people read it: `budget_exhausted` is `budget exhausted`, `idle` is `queued`
    and `running` is `working`."""
    return _STATUS_WORDS.get(status) or status.replace("_", " ")


def counted(count: int, thing: str, things: str | None = None) -> str:
    """`count` of `thing` as a sentence says it: `1 approval`, `2 approvals`, `1,200 tool calls`."""
    return f"{count:,} {thing if count == 1 else things or thing + 's'}"


_LIMIT_UNITS = {  # the things each countable limit counts, one and many
    "max_steps": ("step", "steps"), "max_tool_calls": ("tool call", "tool calls"), "max_tokens": ("token", "tokens"),
}


def limit_reached(limit: str, used: float, cap: float) -> str:
    """A run's use of the limit it ran out of, as a sentence with its numbers, e.g. `The run used all
    8 of its steps.` or `The run spent $1.02 of its $1.00.`"""
    match limit:
        case "max_cost_usd":
            return f"The run spent ${used:,.2f} of its ${cap:,.2f}."
        case "max_seconds":
            return f"The run ran for {used:,.0f} of its {counted(int(cap), 'second')}."
        case _ if limit in _LIMIT_UNITS:
            one, many = _LIMIT_UNITS[limit]
            spent, allowed = int(used), int(cap)
            if spent == allowed == 1:
                return f"The run used its only {one}."
            if spent == allowed:
                return f"The run used all {allowed:,} of its {many}."
            return f"The run used {spent:,} of its {counted(allowed, one, many)}."
        case _:
            return f"The run reached its limit on {LIMIT_NAMES.get(limit, limit)}."


def stop_words(stop: Mapping[str, Any] | None, state: Mapping[str, Any] | None = None) -> str:
    """Why a run stopped, as people read it: a budget in numbers (`limit_reached`; from the run's
    `state` if the stop does not say them), else its reason."""
    stop = stop or {}
    limit = stop.get("budget")
    use = (stop.get("limits") or {}).get(limit) if isinstance(limit, str) else None
    if use is None and isinstance(limit, str) and state is not None and "budget" in state:
        use = usage_report(dict(state)).get(limit)
    if isinstance(use, Mapping) and all(isinstance(use.get(k), int | float) for k in ("used", "limit")):
        return limit_reached(str(limit), use["used"], use["limit"])
    return str(stop.get("reason") or "")


def extension_words(limit: str, extend_steps: int) -> str:
    """What one Extend adds to the limit a run ran out of, e.g. `+4 steps` or `+50% cost`: the steps
    and tool calls `SIGNOFF_EXTEND_STEPS` says, any other limit half as much again (`Runner.extend`)."""
    if limit in COUNTED_LIMITS:
        one, many = _LIMIT_UNITS[limit]
        return f"+{counted(extend_steps, one, many)}"
    return f"+{EXTEND_FRACTION:.0%} " + {"max_cost_usd": "cost", "max_seconds": "time"}.get(
        limit, LIMIT_NAMES.get(limit, limit))


_OWN_RUN = {  # request -> what someone other than the requester has to do
    "extend": "extend its budget", "reconcile.done": "mark its call done", "reconcile.retry": "retry its call",
    "reconcile.abort": "abort it",
}


def own_run_refusal(request: str) -> str:
    """Why the requester may not make `request` of their own run, e.g. `you started this run, so
    someone else has to extend its budget`."""
    return f"you started this run, so someone else has to {_OWN_RUN.get(request, 'decide this for it')}"


def model_words(history: Sequence[Mapping[str, Any]], step: int) -> str | None:
    """What the model said beside its call at `step` (a `ToolCall`'s `text`), on one line; None if
    it said nothing or the history is not at hand (a run read without it)."""
    for entry in history:  # of a turn's several calls, the first carries what the model said
        if entry.get("role") == "assistant" and entry.get("step") == step and "tool" in entry:
            text = entry.get("text")
            return (flat(text) if isinstance(text, str) else "") or None
    return None


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
        case "superseded" if decided_by:
            # Only an edit names who closed it; a tool that changed closes it without anyone.
            return f"edited by {decided_by}; a new request follows"
        case "superseded":
            return "replaced by a new request; not executed"
        case _:
            return "waiting for a decision"


# -- edits, grants and timeouts ---------------------------------------------------------------------


def receipt_words(receipt: Mapping[str, Any]) -> str:
    """A decision's signed receipt in short, to compare by eye with the one the API or an export
    holds: its fingerprint and the key that signed it."""
    from signoff.receipts import fingerprint

    fields = receipt.get("receipt") or {}
    return f"receipt {fingerprint(receipt)} · key {fields.get('key_id')}"


def grant_offer(asked: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """What "approve and allow similar" would grant (`pending_calls.GrantOffer` as JSON), or None where the
    approval's rule offers no grant."""
    offer = (asked or {}).get("grant")
    return offer if isinstance(offer, Mapping) and offer.get("for_seconds") else None


def allowing_similar(offer: Mapping[str, Any]) -> str:
    """What a grant lets happen, e.g. `allowing similar calls for 30 min`."""
    return f"allowing similar calls for {spoken(offer['for_seconds'])}"


def similar_words(offer: Mapping[str, Any]) -> str:
    """Which later calls a grant covers, e.g. `calls of this run with the same to`."""
    same = [str(name) for name in offer.get("same") or ()]
    where = "of this run" if offer.get("scope") == "run" else "in any run of the same requester"
    return f"calls {where}" + (f" with the same {people(same)}" if same else "")


def grant_uses(uses: int) -> str:
    """How often a grant let a call run, e.g. `its first use`, `2 of its uses`."""
    return "its first use" if uses == 1 else f"{uses:,} of its uses"


def goes_on_after_expiry(asked: Mapping[str, Any] | None) -> bool:
    """The approval's rule says `on_expiry: continue`: nobody deciding in time is told to the model,
    and the run goes on."""
    return (asked or {}).get("on_expiry") == "continue"


def run_goes_on_after(approval: ApprovalRecord) -> bool:
    """Whether a run waiting on `approval` goes on once it is as it is: decided (approved, denied,
    edited: the model is told), or expired under a rule that says the run goes on without the call."""
    return approval.status in ("approved", "denied", "superseded") or (
        approval.status == "expired" and goes_on_after_expiry(approval.asked))


def timed_out_words(asked: Mapping[str, Any]) -> str:
    """What the model is told when nobody decided in time (`requests.expire` says it so), e.g. `no
    one decided within 30 min; the call was not made`."""
    return f"no one decided within {spoken(int(asked.get('ttl_seconds') or 0))}; the call was not made"


def edited_changes(pending: Mapping[str, Any] | None, approval: ApprovalRecord) -> Mapping[str, Any] | None:
    """`pending_calls.Edited` as JSON for `approval`, when a person changed the call it asks about (the
    run's pending call is that approval's: same key and arguments); else None."""
    pending = pending or {}
    edited = pending.get("edited")
    if not isinstance(edited, Mapping) or pending.get("key") != approval.key or pending.get("args") != approval.args:
        return None
    return edited


def approval_preview(run: RunRecord, approval: ApprovalRecord) -> Mapping[str, Any] | None:
    """The preview `approval` was asked with (`pending_calls.Preview` as JSON): from the run's pending call,
    or its turn's, and only when the approval is bound to that very preview; else None."""
    calls = [run.state.get("pending"), *(c.get("pending") for c in (run.state.get("batch") or {}).get("calls", []))]
    for pending in calls:
        if pending and pending.get("key") == approval.key:
            bound = bound_preview(approval, pending.get("preview"))
            if bound is not None:
                return bound
    return None


def bound_preview(approval: ApprovalRecord, preview: Any) -> Mapping[str, Any] | None:
    """`preview` (`schema.Preview` as JSON) if `approval` is bound to it (its digest covers the
    preview's), else None: a card never shows a preview other than the one decided on."""
    if not isinstance(preview, Mapping):
        return None
    return preview if call_digest(approval.tool, approval.args, approval.key,
                                  preview.get("digest")) == approval.digest else None


def preview_text(shown: Any) -> str:
    """A preview as text, as every surface shows it: text line by line (`untrusted.shown_lines`),
    JSON indented."""
    text = shown if isinstance(shown, str) else json.dumps(shown, ensure_ascii=False, indent=1, sort_keys=True)
    return "\n".join(shown_lines(text))


_REQUEST_WORDS = {  # request (`AlreadyDone.what`) -> (what it did, what follows once done, or "")
    "extend": ("extended", "the run continues"),
    "cancel": ("closed", ""),
    "retry": ("retried", "the run continues"),
    "reconcile.done": ("marked done", "the run continues"),
    "reconcile.retry": ("retried", "the call runs again"),
    "reconcile.abort": ("aborted", ""),
    "revoke": ("revoked", "the calls it covered are asked about again"),
    "keep": ("kept", ""),
    "request_again": ("requested again", "a fresh approval is asked for"),
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
