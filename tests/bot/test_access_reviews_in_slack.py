"""Reviews of standing access in Slack, end to end over signed HTTP with a real database: the
scheduled review lists the grants and API keys in force with Keep and Revoke; only those allowed
may answer, a replayed click does nothing twice, a stale review says so; a revoke refuses the key's
next request and asks about the grant's next call; an unanswered review reminds, then escalates.
"""

from __future__ import annotations

import pytest
from review_harness import (
    REVIEWS,
    api_status,
    event_types,
    line,
    line_texts,
    make_key,
    refund_run,
    review_now,
    reviewing,
    reviews_posted,
)
from slack_harness import find_button

from signoff.bot.settings import Settings
from signoff.bot.slack.access_review_cards import REVIEW_KEEP_ACTION, REVIEW_REVOKE_ACTION
from signoff.bot.slack.blocks import APPROVE_SIMILAR_ACTION
from signoff.bot.wiring import api_keys
from signoff.runtime.errors import ConfigError


def test_keep_and_revoke_only_by_who_may_once_and_revoke_holds_at_once(make_signoff, tmp_path, slack, ledger):
    signoff = reviewing(make_signoff, tmp_path)
    refund_run(signoff, 20.0)
    signoff.click(signoff.approval_message(), APPROVE_SIMILAR_ACTION, user="U0LEAD")
    refund_run(signoff, 25.0)  # the grant lets it run unasked: its first use
    [grant] = signoff.runner.store.list_grants()
    assert grant.uses == 1 and grant.last_used_at == signoff.store.now()
    secret = make_key(signoff, "ci-bot")
    make_key(signoff, "ops-bot", requester="U0LEAD")
    assert api_status(signoff, secret) == 404  # the key works: it only asks for an approval it has not

    review_now(signoff)
    review_now(signoff)  # the same period: nothing more is posted
    [card] = reviews_posted(signoff)
    card = slack.message(REVIEWS, card["ts"])
    assert card["text"] == "Review of standing access: 3 of 3 to answer"
    texts = line_texts(card)
    [granted] = [t for t in texts if t.startswith(":ticket:")]
    assert "*issue_refund* under rule `refunds`: calls in any run of <@U0ASKER> with the same order_id" in granted
    assert "made by <@U0LEAD>" in granted and "· used 1 time, last <!date^" in granted
    assert any(t.startswith(":key: API key *ci-bot*: may ask about `issue_refund`, cards to <#C0API>, for itself")
               and "never used" not in t for t in texts)

    confirm = find_button(line(card, "ci-bot"), REVIEW_REVOKE_ACTION)["confirm"]  # Slack asks before a revoke
    assert (confirm["title"]["text"], confirm["style"]) == ("Revoke API key ci-bot?", "danger")
    assert "confirm" not in find_button(line(card, "ci-bot"), REVIEW_KEEP_ACTION)  # a keep needs no dialog
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
