"""The outbox: what a sweep owes people is kept in the sweep's own transaction and sent by whichever
relay takes it first, once per take, in the order it was owed, and only while it is still true.

Before it, a reminder or an escalation was told from memory after the sweep's commit: a crash or a
Slack outage in between lost it for good, and an escalation's new approvers never heard of it.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from store_harness import Told
from test_policy_runs import ADA, KIM, LEE, NUDGING, QUORUM_2, paused, runner_with

from signoff.runtime import approval_commands
from signoff.runtime.failpoints import FailpointHit
from signoff.runtime.notices import Escalate, HeldNotice, Redraw, Remind
from signoff.runtime.ports import Store
from signoff.runtime.records import Counted, Decided
from signoff.runtime.relay import FENCE, retry_in


class ToldDirectly(Told):
    """Records whom each reminder and escalation tells directly, and can be made to fail (Slack down)."""

    def __init__(self, *, down: bool = False) -> None:
        super().__init__()
        self.down = down
        self.direct: list[tuple[str, tuple[str, ...]]] = []

    def approval_reminded(self, run: Any, approval: Any, tell: list[str]) -> None:
        if self.down:
            raise ConnectionError("slack is down")
        self.direct.append(("reminded", tuple(tell)))

    def approval_escalated(self, run: Any, approval: Any, added: list[str], tell: list[str]) -> None:
        if self.down:
            raise ConnectionError("slack is down")
        self.direct.append(("escalated", tuple(tell)))


def test_an_escalation_whose_sweep_died_before_telling_is_told_by_the_other_replica_once(
        store: Store, effects: Path, clock: Any) -> None:
    dying = runner_with(store, effects, NUDGING, notifier=ToldDirectly(), failpoints="after_sweep=raise")
    run, approval = paused(dying)
    clock.advance(minutes=6)
    with pytest.raises(FailpointHit):
        dying.nudge_due()  # the escalation and the reminder are stored; the process dies before telling

    told = ToldDirectly()
    other = runner_with(store, effects, NUDGING, notifier=told)
    assert other.nudge_due() == []  # made once: the sweep that died made it
    other.recover()
    assert told.direct == [("escalated", (ADA,)), ("reminded", (LEE, ADA))]
    assert told.of("approval_updated") == [approval.approval_id]  # the card shows Ada too
    other.recover()
    runner_with(store, effects, NUDGING, notifier=told).recover()
    assert len(told.direct) == 2  # sent once, whichever replica looks again
    assert isinstance(other.decide(approval.approval_id, approval.digest, ADA, True), Decided)
    assert other.execute(run.run_id) == "done"


def test_a_reminder_slack_refused_is_sent_again_after_its_backoff(store: Store, effects: Path, clock: Any) -> None:
    slack = ToldDirectly(down=True)
    runner = runner_with(store, effects, NUDGING, notifier=slack)
    run, _ = paused(runner)
    clock.advance(minutes=5)
    assert [n.kinds for n in runner.nudge_due()] == [("remind",)]
    assert slack.direct == []
    slack.down = False
    runner.recover()
    assert slack.direct == []  # not due again yet
    clock.advance(seconds=retry_in(1).total_seconds())
    runner.recover()
    assert slack.direct == [("reminded", (LEE,))]
    assert [e["method"] for e in runner.timeline(run.run_id) if e["type"] == "notify_failed"] == ["approval_reminded"]


def test_a_reminder_of_an_approval_decided_before_it_was_sent_is_not_sent(
        store: Store, effects: Path, clock: Any) -> None:
    slack = ToldDirectly(down=True)
    runner = runner_with(store, effects, NUDGING, notifier=slack)
    _, approval = paused(runner)
    clock.advance(minutes=5)
    runner.nudge_due()
    assert isinstance(runner.decide(approval.approval_id, approval.digest, LEE, True), Decided)
    slack.down = False
    clock.advance(minutes=1)
    runner.recover()
    assert slack.direct == []  # nobody is asked to decide what is decided
    assert store.take_notices(FENCE) == []  # and it is owed no more


def test_a_notice_taken_is_fenced_from_every_other_taker_and_an_approvals_notices_keep_their_order(
        store: Store, effects: Path, clock: Any) -> None:
    runner = runner_with(store, effects, NUDGING)  # nobody to tell: the sweep's notices stay owed
    _, approval = paused(runner)
    clock.advance(minutes=9, seconds=30)
    approval_commands.nudge_due(store)
    [first] = store.take_notices(FENCE)
    assert first.notice == Escalate(approval_id=approval.approval_id, added=(ADA,)) and first.tries == 1
    assert store.take_notices(FENCE) == []  # fenced, and the approval's next waits for it
    clock.advance(seconds=FENCE.total_seconds())
    [again] = store.take_notices(FENCE)  # its taker died: taken again once the fence passed
    assert (again.seq, again.tries) == (first.seq, 2)
    store.notice_sent(again.seq)
    [second] = store.take_notices(FENCE)
    assert second.notice == Remind(approval_id=approval.approval_id, first=True)
    store.notice_failed(second.seq, timedelta(seconds=30), "slack is down")
    assert store.take_notices(FENCE) == []
    clock.advance(seconds=30)
    assert store.take_notices(FENCE, run_id="someone-else") == []
    [retried] = store.take_notices(FENCE, run_id=approval.run_id)
    store.notice_sent(retried.seq)
    [third] = store.take_notices(FENCE)
    assert third.notice == Redraw(approval_id=approval.approval_id)  # its card shows Ada among its approvers


def test_replicas_taking_at_once_say_each_fenced_notice_once_and_draw_each_redraw(store: Store, effects: Path, clock: Any) -> None:
    runner = runner_with(store, effects, NUDGING)
    for _ in range(6):
        paused(runner)
    clock.advance(minutes=9, seconds=30)
    approval_commands.nudge_due(store)  # three notices owed of each of six approvals: two fenced, and a redraw
    taken: list[HeldNotice] = []
    lock, start = threading.Lock(), threading.Barrier(4)

    def replica() -> None:
        start.wait()
        for _ in range(10):
            for held in store.take_notices(FENCE, limit=2):
                with lock:
                    taken.append(held)
                store.notice_sent(held.seq)

    threads = [threading.Thread(target=replica) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    fenced = [held.seq for held in taken if held.notice.fenced]
    assert len(fenced) == len(set(fenced)) == 12  # each said once, whichever replica took it
    assert len({held.seq for held in taken}) == 18  # and each redraw drawn, perhaps twice


class SlowCard(Told):
    """A Slack whose update of a card showing one vote is still on its way while Kim's approve,
    made on another replica, is drawn first: ours lands last."""

    def __init__(self) -> None:
        super().__init__()
        self.runner: Any = None
        self.drawn: list[tuple[str, str]] = []

    def approval_updated(self, run: Any, approval: Any, card: Any) -> None:
        if approval.status == "pending" and not self.drawn:
            self.runner.decide(approval.approval_id, approval.digest, KIM, True)
        self.drawn.append(("approval_updated", approval.status))

    def approval_decided(self, run: Any, approval: Any, card: Any) -> None:
        self.drawn.append(("approval_decided", approval.status))


def test_a_card_update_that_lands_after_a_newer_one_is_drawn_again_so_the_card_ends_as_the_approval_is(
        store: Store, effects: Path) -> None:
    slack = SlowCard()
    runner = runner_with(store, effects, QUORUM_2, notifier=slack)
    slack.runner = runner
    _, approval = paused(runner)
    assert isinstance(runner.decide(approval.approval_id, approval.digest, LEE, True), Counted)
    assert ("approval_updated", "pending") in slack.drawn  # Lee's vote was drawn, and landed after Kim's approve
    assert slack.drawn[-1] == ("approval_decided", "approved")  # so it was drawn again: the card is not left live
    assert store.take_notices(FENCE) == []


def test_a_redraw_is_left_open_to_other_takers_so_a_replica_dying_mid_draw_leaves_nothing_to_wait_for(
        store: Store, effects: Path) -> None:
    runner = runner_with(store, effects, QUORUM_2)  # nobody to tell: the vote's redraw stays owed
    _, approval = paused(runner)
    store.set_approval_message(approval.approval_id, {"channel": "C1", "ts": "1.0"})
    approval_commands.decide(store, approval.approval_id, approved=True, user=LEE, digest=approval.digest)
    [taken] = store.take_notices(FENCE)
    [again] = store.take_notices(FENCE)
    assert taken.notice == again.notice == Redraw(approval_id=approval.approval_id) and again.tries == 2


def test_a_redraw_a_second_taker_finishes_late_leaves_the_notice_owed_after_it(store: Store, effects: Path) -> None:
    # A notice is dropped by its place in the outbox, so a place must never be given again: on
    # SQLite, a table's next rowid was its largest plus one, and a late drop of a sent notice
    # dropped whatever had been owed in its place since (a card nobody posted, a run stuck).
    runner = runner_with(store, effects, QUORUM_2)  # nobody to tell: the redraws stay owed
    _, approval = paused(runner)
    store.set_approval_message(approval.approval_id, {"channel": "C1", "ts": "1.0"})
    approval_commands.decide(store, approval.approval_id, approved=True, user=LEE, digest=approval.digest)
    first, second = store.take_notices(FENCE), store.take_notices(FENCE)  # two replicas draw Lee's vote
    store.notice_sent(first[0].seq)
    approval_commands.decide(store, approval.approval_id, approved=True, user=KIM, digest=approval.digest)
    store.notice_sent(second[0].seq)  # the other replica's draw of Lee's vote lands after Kim's approve
    [owed] = store.take_notices(FENCE)
    assert owed.notice == Redraw(approval_id=approval.approval_id) and owed.seq != first[0].seq
