"""On-call approvers through the real bot (signed HTTP, a real database, FakeSlack and a local
PagerDuty): the person on call approves with a click; when the schedule changes mid-approval the
new person may decide and the old one no longer, once the minute's cache has passed; and with
PagerDuty down, the rule's other approver decides and nobody from the schedule can."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from bot_fakes import final, tool_call
from slack_harness import Signoff

from signoff.bot.slack.blocks import APPROVE_ACTION
from tests.fakes.oncall import FakePagerDuty

POLICY = """\
defaults:
  approvers: [U0LEAD]
rules:
  - name: refunds
    tool: issue_refund
    approvers: [pagerduty:PPRIMRY, U0OTHER]
"""
REFUSED = "Not done: you are not one of the approvers this call's policy rule names (policy rule refunds)"


@pytest.fixture
def pagerduty() -> Iterator[FakePagerDuty]:
    fake = FakePagerDuty(schedules={"PPRIMRY": ["ana@example.com"]})
    fake.start()
    yield fake
    fake.stop()


@pytest.fixture
def signoff(make_signoff, slack, pagerduty, tmp_path) -> Signoff:
    slack.emails.update({"ana@example.com": "U0ANA", "bo@example.com": "U0BO"})
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY, encoding="utf-8")
    return make_signoff(SIGNOFF_POLICY=str(path), PAGERDUTY_TOKEN=pagerduty.token,
                        SIGNOFF_PAGERDUTY_URL=pagerduty.url)


def propose_refund(signoff: Signoff) -> str:
    signoff.script.decisions = [tool_call("issue_refund", order_id="42", amount_usd=120.0), final("Refunded.")]
    assert signoff.command("Refund order 42").status == 200
    return signoff.only_run().run_id


def status_of(signoff: Signoff, run_id: str) -> str:
    approval = signoff.runner.store.approval_for_key(f"{run_id}:1")
    assert approval is not None
    return approval.status


def test_the_person_on_call_approves_with_a_click(signoff, ledger):
    run_id = propose_refund(signoff)
    card = signoff.approval_message()
    assert "on call in pagerduty:PPRIMRY (<@U0ANA>)" in str(card["blocks"]), "the card names who is on call"
    signoff.click(card, APPROVE_ACTION, user="U0ANA")
    assert status_of(signoff, run_id) != "pending" and ledger.total == 1
    assert signoff.run(run_id).status == "done"


def test_when_the_schedule_changes_the_new_person_decides_and_the_old_one_no_longer(signoff, pagerduty, ledger):
    run_id = propose_refund(signoff)
    card = signoff.approval_message()
    signoff.click(card, APPROVE_ACTION, user="U0BO")  # not on call yet
    assert signoff.ephemerals().count(REFUSED) == 1
    pagerduty.set_on_call("PPRIMRY", ["bo@example.com"])
    signoff.click(card, APPROVE_ACTION, user="U0BO")  # the minute's answer still stands
    assert signoff.ephemerals().count(REFUSED) == 2
    signoff.clock.advance(seconds=61)
    signoff.click(card, APPROVE_ACTION, user="U0ANA")  # off call now
    assert signoff.ephemerals().count(REFUSED) == 3 and status_of(signoff, run_id) == "pending"
    signoff.click(card, APPROVE_ACTION, user="U0BO")
    approval = signoff.runner.store.approval_for_key(f"{run_id}:1")
    assert approval is not None and approval.approved_by == ("U0BO",) and ledger.total == 1


def test_with_the_schedule_down_the_rules_other_approver_decides_and_nobody_from_it(signoff, pagerduty, ledger):
    pagerduty.fail(500)
    run_id = propose_refund(signoff)
    card = signoff.approval_message()
    assert "the schedule cannot be read now: nobody from it may decide" in str(card["blocks"])
    for user in ("U0ANA", "U0BO", "U0LEAD"):
        signoff.click(card, APPROVE_ACTION, user=user)
    assert signoff.ephemerals().count(REFUSED) == 3 and status_of(signoff, run_id) == "pending"
    signoff.click(card, APPROVE_ACTION, user="U0OTHER")
    assert status_of(signoff, run_id) != "pending" and ledger.total == 1
