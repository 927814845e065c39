"""Reviews of standing access in Slack, end to end over signed HTTP with a real database: the
scheduled review lists the grants and API keys in force with Keep and Revoke; only those allowed
may answer, a replayed click does nothing twice, a stale review says so; a revoke refuses the key's
next request and asks about the grant's next call; an unanswered review reminds, then escalates.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import parse_qsl, urlencode

import pytest
from bot_fakes import final, tool_call
from slack_harness import Signoff

from signoff.bot.review_schedule import review_trigger
from signoff.bot.settings import Settings
from signoff.bot.slack.access_review_cards import REVIEW_KEEP_ACTION, REVIEW_REVOKE_ACTION
from signoff.bot.slack.access_review_jobs import review_access
from signoff.bot.slack.blocks import APPROVE_SIMILAR_ACTION
from signoff.bot.wiring import api_keys
from signoff.runtime.api_keys import ApiKey, new_callback_secret, new_secret, secret_hash
from signoff.runtime.audit import EventRow, Selection
from signoff.runtime.errors import ConfigError
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


def test_keep_and_revoke_only_by_who_may_once_and_revoke_holds_at_once(make_signoff, tmp_path, slack, ledger):
    signoff = reviewing(make_signoff, tmp_path)
    refund_run(signoff, 20.0)
    signoff.click(signoff.approval_message(), APPROVE_SIMILAR_ACTION, user="U0LEAD")
    [grant] = signoff.runner.store.list_grants()
    secret = make_key(signoff, "ci-bot")
    make_key(signoff, "ops-bot", requester="U0LEAD")
    assert api_status(signoff, secret) == 404  # the key works: it only asks for an approval it has not

    review_now(signoff)
    review_now(signoff)  # the same period: nothing more is posted
    [card] = reviews_posted(signoff)
    card = slack.message(REVIEWS, card["ts"])
    assert card["text"] == "Review of standing access: 3 of 3 to answer"
    texts = line_texts(card)
    assert any("*issue_refund* under rule `refunds`" in t and "made by <@U0LEAD>" in t for t in texts)
    assert any(t.startswith(":key: API key *ci-bot*: may ask about `issue_refund`, cards to <#C0API>, for itself")
               and "never used" not in t for t in texts)

    signoff.click(line(card, grant.grant_id), REVIEW_KEEP_ACTION, user="U0ASKER")  # not an approver of the rule
    signoff.click(line(card, grant.grant_id), REVIEW_KEEP_ACTION, user="U0LEAD")  # its maker may not keep it
    signoff.click(line(card, "ci-bot"), REVIEW_REVOKE_ACTION, user="U0OPS")  # keys are for SIGNOFF_APPROVERS
    signoff.click(line(card, "ops-bot"), REVIEW_KEEP_ACTION, user="U0LEAD")  # a key that speaks for them
    told = signoff.ephemerals()
    assert told[0].startswith("Not done: ") and "U0ASKER" not in told[0]
    assert told[1] == "Not done: you made this grant, so someone else who may approve its calls has to keep it"
    assert told[2].startswith("Not done: only the configured approvers (SIGNOFF_APPROVERS) review API keys")
    assert told[3] == "Not done: this key asks for approvals as you, so someone else has to review it"
    assert slack.message(REVIEWS, card["ts"])["text"] == "Review of standing access: 3 of 3 to answer"

    signoff.click(line(card, grant.grant_id), REVIEW_KEEP_ACTION, user="U0OPS")
    signoff.click(line(card, grant.grant_id), REVIEW_KEEP_ACTION, user="U0OPS")  # a double click, a replay
    signoff.click(line(card, "ci-bot"), REVIEW_REVOKE_ACTION, user="U0ADMIN")
    signoff.click(line(card, "ci-bot"), REVIEW_REVOKE_ACTION, user="U0ADMIN")
    told = signoff.ephemerals()[4:]
    assert told[0] == "Kept: the grant stays in force; the review records that you kept it."
    assert told[1].startswith("Already kept by <@U0OPS> <!date^") and told[1].endswith("; nothing changed.")
    assert told[2] == "Revoked: every request with this key is refused from now on."
    assert told[3].startswith("Already revoked by <@U0ADMIN>")
    assert api_status(signoff, secret) == 401  # revoked in the database: refused on this and every replica

    updated = slack.message(REVIEWS, card["ts"])
    assert updated["text"] == "Review of standing access: 1 of 3 to answer"
    answered = line_texts(updated)[-1]
    assert f":white_check_mark: kept: grant `{grant.grant_id}` by <@U0OPS>" in answered
    assert ":no_entry: revoked: key `ci-bot` by <@U0ADMIN>" in answered
    events = event_types(signoff, grant.run_id)
    assert events.count("grant_put_to_review") == 1 and events.count("grant_kept") == 1

    # Its maker may still revoke what another kept: access taken away stays away.
    signoff.click(line(card, grant.grant_id), REVIEW_REVOKE_ACTION, user="U0LEAD")
    assert signoff.ephemerals()[-1] == "Revoked: from now on, the calls it covered are asked about again."
    assert refund_run(signoff, 30.0).status == "awaiting_approval"
    assert "grant_revoked" in event_types(signoff, grant.run_id)


def test_a_click_on_a_superseded_review_says_so_and_changes_nothing(make_signoff, tmp_path, slack, ledger):
    signoff = reviewing(make_signoff, tmp_path)
    make_key(signoff, "ci-bot")
    review_now(signoff)
    [old] = reviews_posted(signoff)
    signoff.clock.advance(days=7)
    review_now(signoff)
    assert len(reviews_posted(signoff)) == 2

    signoff.click(line(old, "ci-bot"), REVIEW_REVOKE_ACTION, user="U0ADMIN")
    assert signoff.ephemerals()[-1] == ("Not done: a newer review of standing access replaced this one; "
                                        "answer that one")
    [key] = api_keys(signoff.store).keys()
    assert key.live


def test_an_unanswered_review_reminds_once_then_escalates_to_the_channel(make_signoff, tmp_path, slack, ledger):
    signoff = reviewing(make_signoff, tmp_path)
    make_key(signoff, "ci-bot")
    review_now(signoff)
    [card] = reviews_posted(signoff)
    signoff.clock.advance(hours=25)
    review_now(signoff)
    review_now(signoff)
    [reminder] = slack.thread(REVIEWS, card["ts"])
    assert reminder["text"] == ":bell: <@U0ADMIN> and <@U0LEAD>: 1 line of this review of standing access still " \
                               "waits for Keep or Revoke."
    signoff.clock.advance(hours=24)
    review_now(signoff)
    review_now(signoff)
    [_, escalation] = slack.thread(REVIEWS, card["ts"])
    assert escalation["text"].startswith(":rotating_light: <!here> 1 line of this review of standing access is still unanswered")
    assert [c["reply_broadcast"] for c in slack.calls_to("chat.postMessage") if c.get("thread_ts") == card["ts"]] \
        == [False, True]


def test_reviews_are_off_when_set_off_or_empty_or_without_an_approval_channel(make_signoff, tmp_path):
    assert make_signoff(SIGNOFF_APPROVAL_CHANNEL=REVIEWS, SIGNOFF_REVIEW_SCHEDULE="off").service.reviewer is None
    assert make_signoff(SIGNOFF_APPROVAL_CHANNEL=REVIEWS, SIGNOFF_REVIEW_SCHEDULE="").service.reviewer is None
    assert make_signoff().service.reviewer is None  # no SIGNOFF_APPROVAL_CHANNEL to post in
    with pytest.raises(ConfigError) as refused:
        Settings.from_env({"SIGNOFF_REVIEW_SCHEDULE": "every monday"})
    assert "SIGNOFF_REVIEW_SCHEDULE" in str(refused.value) and "five cron fields" in str(refused.value)
