"""What every framework adapter says to Signoff the same way: a call's idempotency key, the request's
content (asked twice, by the side that decides and by the side that runs, so it must be identical),
and the words a model reads when a call did not run. No framework is imported here.
"""

from __future__ import annotations

from typing import Any

from signoff.client import Approval, AsyncApproval, decider_words


def call_key(framework: str, thread: str, call_id: str) -> str:
    """The idempotency key of one tool call: the framework's own thread and call ids, so a replay
    of the same call is the same approval, and no two threads' calls are."""
    if not thread or not call_id:
        raise ValueError(f"a {framework} tool call needs a thread id and a call id (got {thread!r}, {call_id!r})")
    return f"{framework}:{thread}:{call_id}"


def call_reason(framework: str, tool: str, thread: str) -> str:
    """The request's `reason`: where the call comes from (part of the request's content, so derived
    only from what both sides know)."""
    return f"{tool}, proposed by an agent ({framework}, thread {thread})"


def refusal(approval: Approval | AsyncApproval, timeout: float | None) -> str:
    """Why a call did not run, for the model: who denied it and why, or that nobody decided in time."""
    if approval.status == "pending":
        waited = f" within {timeout:g} s" if timeout is not None else ""
        return f"Signoff: not approved: nobody decided{waited}, so the call was not run."
    if approval.status in ("started", "succeeded", "failed"):  # a replay of a call that was approved
        return f"Signoff: this call was approved and has run already ({approval.status}); it was not run again."
    words = approval.status + (f" by {decider_words(approval.decided_by)}" if approval.decided_by else "")
    because = f": {approval.reason}" if approval.reason else ""
    return f"Signoff: {words}{because}. The call was not run."


def not_run(status: str) -> str:
    """What the model reads when a call may not start: started before (a replay), not approved, or
    Signoff unreachable; `status` is the approval's status or the error's code."""
    return f"Signoff: this call was not run: its approval is {status}, not approved and unstarted."


def edited(asked: dict[str, Any], approved: dict[str, Any]) -> bool:
    """Whether the approver changed the arguments."""
    return asked != approved
