"""Several replicas on one database (SQLite and PostgreSQL): the review of a period is posted by
exactly one of them, however their ticks race and whatever their own clocks say, and a revoke
pressed on one refuses the grant's next call on another at once."""

from __future__ import annotations

import threading

from review_harness import (
    REVIEWS,
    line,
    make_key,
    refund_run,
    review_now,
    reviewing,
    reviews_posted,
)

from signoff.bot.slack.access_review_cards import REVIEW_REVOKE_ACTION
from signoff.bot.slack.blocks import APPROVE_SIMILAR_ACTION


def test_two_replicas_racing_post_each_period_s_review_once(make_signoff, tmp_path, database_url, slack, ledger):
    first, second = reviewing(make_signoff, tmp_path, database_url), reviewing(make_signoff, tmp_path, database_url)
    make_key(first, "ci-bot")
    for week in range(4):
        start = threading.Barrier(2)

        def tick(replica, start=start):
            start.wait()
            review_now(replica)

        racers = [threading.Thread(target=tick, args=(replica,)) for replica in (first, second)]
        for racer in racers:
            racer.start()
        for racer in racers:
            racer.join()
        review_now(second)  # a late tick of the same period posts nothing either
        assert len(reviews_posted(first)) == week + 1
        first.clock.advance(days=7)
        second.clock.advance(days=7)
    assert len({m["ts"] for m in slack.messages_in(REVIEWS)}) == 4


def test_a_revoke_on_one_replica_asks_about_the_grant_s_next_call_on_another(
        make_signoff, tmp_path, database_url, slack, ledger):
    first, second = reviewing(make_signoff, tmp_path, database_url), reviewing(make_signoff, tmp_path, database_url)
    refund_run(first, 20.0)
    first.click(first.approval_message(), APPROVE_SIMILAR_ACTION, user="U0LEAD")
    assert refund_run(second, 21.0).status == "done"  # the grant covers it, on the other replica
    [grant] = first.runner.store.list_grants()
    review_now(second)
    [card] = reviews_posted(second)
    first.click(line(card, grant.grant_id), REVIEW_REVOKE_ACTION, user="U0OPS")
    assert first.ephemerals()[-1] == "Revoked: from now on, the calls it covered are asked about again."
    assert refund_run(second, 22.0).status == "awaiting_approval"
