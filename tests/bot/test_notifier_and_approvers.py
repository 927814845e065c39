from __future__ import annotations

import json
from datetime import timedelta

import pytest
from bot_fakes import HOSTILE, NOW, make_approval, make_run
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from signoff.bot.slack.approvers import NO_APPROVERS, NOT_AN_APPROVER, NOT_IN_THE_CHANNEL, Approvers
from signoff.bot.slack.notifier import SlackNotifier
from signoff.receipts import fingerprint
from signoff.runtime.cards import ALONE, Card
from signoff.runtime.records import GrantRecord
from tests.fakes.slack import FakeSlack


@pytest.fixture
def client(slack: FakeSlack) -> WebClient:
    return WebClient(token=slack.token, base_url=slack.url)


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def notifier(client, sleeps) -> SlackNotifier:
    return SlackNotifier(client, sleep=sleeps.append)


def posted_approval(notifier, slack):
    run = make_run()
    ref = notifier.approval_requested(run, make_approval(), ALONE)
    return run, ref


def test_chat_update_retries_429_with_retry_after_then_succeeds(notifier, slack, sleeps):
    run, ref = posted_approval(notifier, slack)
    slack.fail("chat.update", times=2, status=429, retry_after=3)
    notifier.approval_decided(run, make_approval(status="approved", decided_by="U0LEAD", decided_at=NOW,
                                                 message=ref), ALONE)
    assert sleeps == [3.0, 3.0]
    assert slack.attempts("chat.update") == 3
    assert "Approved by <@U0LEAD>" in slack.message(ref["channel"], ref["ts"])["text"]


def test_chat_update_retries_5xx_with_backoff_and_gives_up(notifier, slack, sleeps):
    run, ref = posted_approval(notifier, slack)
    slack.fail("chat.update", times=10, status=503)
    with pytest.raises(SlackApiError):
        notifier.approval_decided(run, make_approval(status="denied", decided_by="U0LEAD", decided_at=NOW,
                                                     message=ref), ALONE)
    assert sleeps == [0.25, 0.5, 1.0]
    assert slack.attempts("chat.update") == 4


def test_chat_update_does_not_retry_a_permanent_error(notifier, slack, sleeps):
    run = make_run()
    with pytest.raises(SlackApiError) as info:
        notifier.approval_decided(run, make_approval(status="approved", message={"channel": "C0RUNS", "ts": "1.2"}), ALONE)
    assert info.value.response["error"] == "message_not_found"
    assert sleeps == [] and slack.attempts("chat.update") == 1


def test_post_message_is_never_retried(notifier, slack, sleeps):
    slack.fail("chat.postMessage", times=1, status=500)
    with pytest.raises(SlackApiError):
        notifier.approval_requested(make_run(), make_approval(), ALONE)
    assert slack.attempts("chat.postMessage") == 1 and sleeps == []


def test_run_message_falls_back_to_the_requesters_dm_when_the_bot_is_not_in_the_channel(notifier, slack):
    run = make_run(origin={"channel": "C0PRIVATE"})
    original = slack._api_chat_postMessage

    def not_in_channel(body):
        if body.get("channel") == "C0PRIVATE":
            return {"ok": False, "error": "not_in_channel"}
        return original(body)

    slack._api_chat_postMessage = not_in_channel
    ref = notifier.run_started(run)
    assert ref == {"channel": "D0ASKER", "ts": ref["ts"]}
    assert slack.calls_to("conversations.open") == [{"users": "U0ASKER"}]


def test_progress_threads_under_the_run_message_even_before_origin_is_reloaded(notifier, slack):
    run = make_run(origin={"channel": "C0RUNS"})
    ref = notifier.run_started(run)
    notifier.tool_result(run, {"role": "tool", "step": 1, "tool": "lookup_order", "result": {"ok": True}}, None)
    assert slack.thread("C0RUNS", ref["ts"])[0]["text"] == "lookup_order returned a result"


def test_approvals_go_to_the_configured_approval_channel(client, slack):
    notifier = SlackNotifier(client, approval_channel="C0APPROVALS")
    ref = notifier.approval_requested(make_run(), make_approval(), ALONE)
    assert ref["channel"] == "C0APPROVALS"


def test_runs_without_a_slack_origin_are_not_announced(notifier, slack):
    run = make_run(origin={}, requester="alice")
    assert notifier.run_started(run) is None
    assert notifier.approval_requested(run, make_approval(), ALONE) is None
    notifier.run_stopped(make_run(origin={}, requester="alice", status="failed", state={"stop": {"reason": "x"}}))
    assert slack.calls_to("chat.postMessage") == []


def test_everything_posted_carries_text_and_passes_block_kit_checks(notifier, slack):
    run = make_run(goal=HOSTILE * 500, state={"answer": HOSTILE * 500, "stop": {"reason": HOSTILE * 50}})
    ref = notifier.run_started(run)
    run = make_run(goal=HOSTILE * 500, origin=ref, state={"answer": HOSTILE * 500})
    approval = make_approval(args={"body": HOSTILE * 1000, "token": "xoxb-leak"})
    notifier.approval_requested(run, approval, ALONE)
    notifier.tool_result(run, {"role": "tool", "step": 1, "tool": "x", "result": {"rows": [HOSTILE] * 500}}, None)
    notifier.run_finished(run)
    notifier.run_stopped(make_run(goal=HOSTILE, origin=ref, status="budget_exhausted",
                                  state={"stop": {"reason": "max_steps reached", "budget": "max_steps"}}))
    attempts = [c for c in slack.calls if c.method.startswith("chat.")]
    assert attempts and all(c.ok for c in attempts), [c.response for c in attempts if not c.ok]
    assert "xoxb-leak" not in json.dumps([c.body for c in slack.calls])


def test_approvers_resolve_groups_and_cache_them(client, slack):
    now = [0.0]
    approvers = Approvers(frozenset({"U0LEAD", "S0ONCALL"}), client, cache_seconds=60, clock=lambda: now[0])
    run = make_run()
    assert approvers.may_approve("U0LEAD", run) is None
    assert approvers.may_approve("U0ONCALL1", run) is None
    assert approvers.may_approve("U0INTERN", run) == NOT_AN_APPROVER
    assert len(slack.calls_to("usergroups.users.list")) == 1  # cached
    slack.usergroups["S0ONCALL"] = ["U0INTERN"]
    now[0] = 61.0
    assert approvers.may_approve("U0INTERN", run) is None
    assert approvers.may_approve("U0ONCALL1", run) == NOT_AN_APPROVER


def test_approvers_fail_closed_when_slack_cannot_resolve_a_group(client, slack):
    approvers = Approvers(frozenset({"S0ONCALL"}), client)
    slack.fail("usergroups.users.list", times=1, status=500)
    assert approvers.may_approve("U0ONCALL1", make_run()) == NOT_AN_APPROVER
    assert approvers.may_approve("U0ONCALL1", make_run()) is None  # the next click asks again


def test_unknown_group_approves_nobody(client, slack):
    approvers = Approvers(frozenset({"S0MISSING"}), client)
    assert approvers.may_approve("U0LEAD", make_run()) == NOT_AN_APPROVER


def test_an_empty_list_approves_nobody_without_asking_slack(client, slack):
    approvers = Approvers(frozenset(), client)
    assert approvers.may_approve("U0ANYONE", make_run()) == NO_APPROVERS
    assert not approvers.may_see("U0ANYONE", make_run(origin={}))
    assert slack.calls == []


def test_star_lets_the_members_of_the_runs_channel_decide_and_nobody_else(client, slack):
    approvers = Approvers(frozenset({"*"}), client)
    private = make_run(origin={"channel": "C0PRIVATE", "ts": "1.1"})
    assert approvers.may_approve("U0LEAD", private) is None
    assert approvers.may_approve("U0OPS", private) == NOT_IN_THE_CHANNEL  # in #runs, not in this channel
    assert approvers.may_approve("U0LEAD", make_run(origin={})) == NOT_IN_THE_CHANNEL  # no channel, no members
    assert approvers.may_see("U0LEAD", private) and not approvers.may_see("U0OPS", private)
    assert [c["channel"] for c in slack.calls_to("conversations.members")] == ["C0PRIVATE"]  # cached since


def test_star_with_an_approval_channel_means_the_members_of_that_channel(client, slack):
    approvers = Approvers(frozenset({"*", "U0CFO"}), client, approval_channel="C0RUNS")
    private = make_run(origin={"channel": "C0PRIVATE", "ts": "1.1"})
    assert approvers.may_approve("U0OPS", private) is None  # where the card is posted, so where they decide
    assert approvers.may_approve("U0STRANGER", private) == NOT_IN_THE_CHANNEL
    assert approvers.may_approve("U0CFO", make_run(origin={})) is None  # listed by id: no channel needed
    assert not approvers.may_see("U0OPS", private)  # deciding shows them the run; the runner adds that


def test_channel_members_are_read_page_by_page(client, slack):
    slack.channels["C0BIG"] = [f"U0M{i:05d}" for i in range(2500)]
    approvers = Approvers(frozenset({"*"}), client)
    run = make_run(origin={"channel": "C0BIG"})
    assert approvers.may_approve("U0M02499", run) is None
    assert approvers.may_approve("U0M02500", run) == NOT_IN_THE_CHANNEL
    assert [bool(c.get("cursor")) for c in slack.calls_to("conversations.members")] == [False, True, True]


def test_a_failed_member_lookup_refuses_then_asks_again(client, slack):
    now = [0.0]
    approvers = Approvers(frozenset({"*"}), client, cache_seconds=30, clock=lambda: now[0])
    run = make_run(origin={"channel": "C0PRIVATE"})
    slack.fail("conversations.members", times=1, status=500)
    assert approvers.may_approve("U0LEAD", run) == NOT_IN_THE_CHANNEL
    assert approvers.may_approve("U0LEAD", run) is None
    slack.channels["C0PRIVATE"] = ["U0ASKER"]  # U0LEAD leaves the channel
    assert approvers.may_approve("U0LEAD", run) is None  # for as long as the cache holds
    now[0] = 31.0
    assert approvers.may_approve("U0LEAD", run) == NOT_IN_THE_CHANNEL
    assert approvers.may_approve("U0LEAD", make_run(origin={"channel": "C0GONE"})) == NOT_IN_THE_CHANNEL


def test_a_decided_card_is_drawn_from_what_it_is_handed_with_no_store_to_read(notifier, slack):
    """The runner reads a card's grant and receipt; the notifier, which holds no store, draws them."""
    run, ref = posted_approval(notifier, slack)
    approval = make_approval(status="approved", decided_by="U0LEAD", decided_at=NOW, message=ref,
                             asked={"grant": {"for_seconds": 1800, "same": ["order_id"], "scope": "run"}})
    grant = GrantRecord(grant_id="grt_1", approval_id=approval.approval_id, run_id=run.run_id, requester="U0ASKER",
                        tool="issue_refund", rule="refunds", same={"order_id": "42"}, scope="run", created_by="U0LEAD",
                        created_at=NOW, expires_at=NOW + timedelta(minutes=30))
    receipt = {"receipt": {"key_id": "k1", "decision": "approved"}, "signature": "c2ln"}

    notifier.approval_decided(run, approval, Card(grant=grant, receipt=receipt))

    shown = slack.message(ref["channel"], ref["ts"])
    assert shown["text"].startswith("Approved by <@U0LEAD>, allowing similar calls for 30 min")
    assert f"receipt {fingerprint(receipt)} · key k1" in json.dumps(shown["blocks"], ensure_ascii=False)
    assert not hasattr(notifier, "reads") and not hasattr(notifier, "store")
