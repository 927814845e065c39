"""Reviews of standing access driven as Slack and the scheduler would: a harness with a granting
policy, a review channel and SIGNOFF_APPROVERS, runs that make grants, keys, one tick of the review
job, and the review's message read back line by line."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import parse_qsl, urlencode

from bot_fakes import final, tool_call
from slack_harness import Signoff

from signoff.bot.review_schedule import review_trigger
from signoff.bot.slack.access_review_jobs import review_access
from signoff.bot.wiring import api_keys
from signoff.runtime.api_keys import ApiKey, new_callback_secret, new_secret, secret_hash
from signoff.runtime.audit import EventRow, Selection
from signoff.runtime.records import RunRecord

FORM = "application/x-www-form-urlencoded"
REVIEWS = "C0REVIEWS"
GRANTING = """\
rules:
  - name: refunds
    tool: issue_refund
    approvers: [U0LEAD, U0OPS]
    grant: {for: 30d, same: [order_id], scope: requester}
"""


def reviewing(make_signoff, tmp_path, database_url: str | None = None) -> Signoff:
    policy = tmp_path / "policy.yaml"
    policy.write_text(GRANTING, encoding="utf-8")
    return make_signoff(database_url, SIGNOFF_POLICY=str(policy), SIGNOFF_APPROVAL_CHANNEL=REVIEWS,
                        SIGNOFF_APPROVERS="U0ADMIN,U0LEAD", SIGNOFF_REVIEW_SCHEDULE="0 9 * * 1")


def refund_run(signoff: Signoff, amount: float) -> RunRecord:
    signoff.script.decisions = [tool_call("issue_refund", order_id="42", amount_usd=amount), final("Refunded.")]
    before = {r.run_id for r in signoff.runner.store.list_runs(limit=50)}
    body = dict(parse_qsl(signoff.command_body(f"Refund ${amount} of order 42")))
    body["trigger_id"] = f"{time.monotonic_ns()}.1.trigger"
    assert signoff.post(urlencode(body), FORM).status == 200
    [run] = [r for r in signoff.runner.store.list_runs(limit=50) if r.run_id not in before]
    return signoff.run(run.run_id)


def make_key(signoff: Signoff, name: str, requester: str | None = None) -> str:
    secret = new_secret()
    key = ApiKey(name=name, channel="C0API", tools=("issue_refund",), requester=requester,
                 created_at=signoff.store.now())
    api_keys(signoff.store).create_key(key, secret_hash(secret), new_callback_secret())
    return secret


def review_now(signoff: Signoff) -> None:
    """One tick of the review job, as the scheduler runs it."""
    assert signoff.service.reviewer is not None
    trigger = review_trigger(signoff.settings.review_schedule)
    assert trigger is not None
    review_access(signoff.service.reviewer, trigger)


def reviews_posted(signoff: Signoff) -> list[dict[str, Any]]:
    return [m for m in signoff.slack.messages_in(REVIEWS)
            if m["text"].startswith("Review of standing access") and not m.get("thread_ts")]


def line(message: dict[str, Any], subject: str) -> dict[str, Any]:
    """The review's message as a click on `subject`'s line sends it: its buttons are that line's."""
    [block] = [b for b in message["blocks"] if b["type"] == "actions" and b["block_id"].endswith(f".{subject}")]
    return {**message, "blocks": [block]}


def line_texts(message: dict[str, Any]) -> list[str]:
    return [b["text"]["text"] for b in message["blocks"] if b["type"] == "section"]


def event_types(signoff: Signoff, run_id: str) -> list[str]:
    """The run's audit log, as `signoff audit` reads it."""
    return [r.type for r in signoff.store.audit_records(Selection(run_id=run_id)) if isinstance(r, EventRow)]


def api_status(signoff: Signoff, secret: str) -> int:
    return signoff.http.get("/v1/approvals?key=none", headers={"Authorization": f"Bearer {secret}"}).status_code
