"""The decision buttons on an approval: Approve (alone, or allowing similar calls), Approve all, Deny
and Edit, each carrying only what identifies its approvals, and Approve's "are you sure?" dialogs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from signoff.bot.slack.blocks import (
    APPROVE_ACTION,
    APPROVE_ALL_ACTION,
    APPROVE_SIMILAR_ACTION,
    BREAK_GLASS_ACTION,
    DENY_ACTION,
    EDIT_ACTION,
    MAX_CONFIRM_BUTTON,
    MAX_CONFIRM_TEXT,
    MAX_CONFIRM_TITLE,
    OPEN_PAGE_ACTION,
    button,
    plain_text,
)
from signoff.bot.words import grant_offer, similar_words
from signoff.runtime.break_glass import offer_of
from signoff.runtime.durations import spoken
from signoff.runtime.records import ApprovalRecord
from signoff.runtime.step_up import step_up_of


def approval_page(console: str, approval: ApprovalRecord) -> str:
    """The approval's page in the web console (`console`: `SIGNOFF_PUBLIC_URL`)."""
    return f"{console.rstrip('/')}/ui/approvals/{approval.approval_id}"


def approve_buttons(approval: ApprovalRecord, *, tool_confirms: bool = False,
                    console: str | None = None) -> list[dict[str, Any]]:
    """Approve, Approve + allow similar and Break glass where the rule offers them; for a rule with `step_up`,
    no button bound to the approval but a link to its page in the web console (`console`: where
    that is; None: it is off, and nothing here approves it)."""
    if step_up_of(approval.asked) is not None:
        return [page_button(approval, console)] if console else []
    similar = approve_similar_button(approval, tool_confirms=tool_confirms)
    glass = [button("Break glass", BREAK_GLASS_ACTION, approval_value(approval))] if offer_of(approval.asked) else []
    return [approve_button(approval, tool_confirms=tool_confirms), *([similar] if similar else []), *glass]


def page_button(approval: ApprovalRecord, console: str) -> dict[str, Any]:
    """A link to the approval's page, where a fresh sign-in approves it; it carries nothing to decide with."""
    element = button("Approve on its page (sign-in needed)", OPEN_PAGE_ACTION, approval.approval_id, "primary")
    element["url"] = approval_page(console, approval)
    return element


def step_up_words(approval: ApprovalRecord) -> str | None:
    """What a card says of a rule's `step_up` (None: it has none)."""
    needed = step_up_of(approval.asked)
    if needed is None:
        return None
    return (f":closed_lock_with_key: Approving this call needs a sign-in no older than {spoken(needed.total_seconds())}"
            " at Signoff's web console: Slack's Approve does not approve it.")


def approval_value(approval: ApprovalRecord) -> str:
    """What an approval button carries: only the approval id and the digest it is bound to."""
    return f"{approval.approval_id}:{approval.digest}"


def batch_value(approvals: Sequence[ApprovalRecord]) -> str:
    """What Approve all carries: each call's `approval_value`, comma-separated, nothing else."""
    return ",".join(approval_value(approval) for approval in approvals)


def approve_button(approval: ApprovalRecord, *, tool_confirms: bool = False) -> dict[str, Any]:
    """Approve; behind an "are you sure?" dialog when the policy rule that asked says `confirm` or
    the tool is marked `confirm` (`tool_confirms`)."""
    element = button("Approve", APPROVE_ACTION, approval_value(approval), "primary")
    if (approval.asked or {}).get("confirm") is True or tool_confirms:
        element["confirm"] = approve_confirmation(approval, tool_confirms=tool_confirms)
    return element


def approve_confirmation(approval: ApprovalRecord, *, tool_confirms: bool = False) -> dict[str, Any]:
    """Block Kit's confirmation dialog for Approve: Slack shows it before it sends the click."""
    asked = approval.asked or {}
    rule = asked.get("rule")
    if asked.get("confirm") is True:
        why = f" Policy rule {rule} asks you to confirm." if isinstance(rule, str) and rule else ""
    else:
        why = f" {approval.tool} asks you to confirm every approval." if tool_confirms else ""
    runs = f"once {approval.quorum} people have approved" if approval.quorum > 1 else "right away"
    text = f"You approve {approval.tool} with key {approval.key} and the arguments as shown; it runs {runs}.{why}"
    return {"title": plain_text(f"Approve {approval.tool}?", MAX_CONFIRM_TITLE),
            "text": plain_text(text, MAX_CONFIRM_TEXT),
            "confirm": plain_text("Approve", MAX_CONFIRM_BUTTON), "deny": plain_text("Cancel", MAX_CONFIRM_BUTTON),
            "style": "primary"}


def approve_all_button(approvals: Sequence[ApprovalRecord], *, confirming: Sequence[str] = ()) -> dict[str, Any]:
    """Approve all the calls of `approvals` (the card's calls the clicker can approve there); behind a
    dialog that says what it approves, always: one click decides several calls. `confirming`: the
    tools among them whose rule or contract asks for a confirmation."""
    element = button(f"Approve all {len(approvals)}", APPROVE_ALL_ACTION, batch_value(approvals), "primary")
    tools = ", ".join(sorted({approval.tool for approval in approvals}))
    why = f" {', '.join(confirming)} asks you to confirm." if confirming else ""
    text = (f"You approve {len(approvals)} calls ({tools}), each with its key and its arguments as shown; "
            f"each one you may approve runs once its approvals are complete.{why}")
    element["confirm"] = {"title": plain_text(f"Approve {len(approvals)} calls?", MAX_CONFIRM_TITLE),
                          "text": plain_text(text, MAX_CONFIRM_TEXT),
                          "confirm": plain_text("Approve all", MAX_CONFIRM_BUTTON),
                          "deny": plain_text("Cancel", MAX_CONFIRM_BUTTON), "style": "primary"}
    return element


def approve_similar_button(approval: ApprovalRecord, *, tool_confirms: bool = False) -> dict[str, Any] | None:
    """*Approve + allow similar for 30 min*, where the approval's rule offers a grant (None where it
    offers none); behind "are you sure?" when the tool asks it of every approval."""
    offer = grant_offer(approval.asked)
    if offer is None:
        return None
    lasting = spoken(offer["for_seconds"])
    element = button(f"Approve + allow similar for {lasting}", APPROVE_SIMILAR_ACTION, approval_value(approval))
    if tool_confirms:
        text = (f"You approve {approval.tool} with key {approval.key} and the arguments as shown, and let "
                f"{similar_words(offer)} run unasked for {lasting}. {approval.tool} asks you to confirm every "
                "approval.")
        element["confirm"] = {**approve_confirmation(approval, tool_confirms=True),
                              "text": plain_text(text, MAX_CONFIRM_TEXT)}
    return element


def deny_button(approval: ApprovalRecord) -> dict[str, Any]:
    return button("Deny", DENY_ACTION, approval_value(approval), "danger")


def edit_button(approval: ApprovalRecord) -> dict[str, Any]:
    return button("Edit", EDIT_ACTION, approval_value(approval))
