"""On-call schedules as approvers, in `Approvers` against FakeSlack and local PagerDuty and Opsgenie
servers: whoever is on call now may approve, a minute's cache later the next person instead, and a
schedule that cannot be read adds nobody (the rule's other approvers stand), said once per outage."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from bot_fakes import make_approval, make_run
from slack_sdk import WebClient

from signoff.bot.oncall import OnCallReader, OnCallServices
from signoff.bot.settings import Settings
from signoff.bot.slack.approval_cards import deciders_line
from signoff.bot.slack.approvers import NOT_NAMED, Approvers
from signoff.runtime.approval_policy import PolicyError
from signoff.runtime.people import Schedule, approver_kind, schedule_of
from signoff.runtime.policy_file import parse_policy
from tests.fakes.oncall import FakeOpsgenie, FakePagerDuty
from tests.fakes.slack import FakeSlack

EMAILS = {"ana@example.com": "U0ANA", "bo@example.com": "U0BO", "cy@example.com": "U0CY"}
RUN = make_run()


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    with FakeSlack(emails=EMAILS) as fake:
        yield fake


@pytest.fixture
def pagerduty() -> Iterator[FakePagerDuty]:
    fake = FakePagerDuty(schedules={"PPRIMRY": ["ana@example.com"]})
    fake.start()
    yield fake
    fake.stop()


@pytest.fixture
def opsgenie() -> Iterator[FakeOpsgenie]:
    fake = FakeOpsgenie(schedules={"Ops": ["cy@example.com", "nobody-in-slack@example.com"]})
    fake.start()
    yield fake
    fake.stop()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def approvers(slack, pagerduty, opsgenie, clock) -> Approvers:
    reader = OnCallReader(OnCallServices(pagerduty_token=pagerduty.token, pagerduty_url=pagerduty.url,
                                         opsgenie_key=opsgenie.key, opsgenie_url=opsgenie.url, timeout=1.0))
    return Approvers(frozenset({"U0LEAD"}), WebClient(token=slack.token, base_url=slack.url), clock=clock,
                     schedules=reader)


RULE = ("pagerduty:PPRIMRY", "U0OTHER")


def test_whoever_is_on_call_may_approve_and_nobody_else_from_the_schedule(approvers):
    assert approvers.may_approve("U0ANA", RUN, RULE) is None
    assert approvers.may_approve("U0OTHER", RUN, RULE) is None
    assert approvers.may_approve("U0BO", RUN, RULE) == NOT_NAMED


def test_a_new_person_on_call_may_decide_once_the_minute_passes_and_the_old_one_no_longer(approvers, pagerduty,
                                                                                          clock):
    assert approvers.may_approve("U0ANA", RUN, RULE) is None
    pagerduty.set_on_call("PPRIMRY", ["bo@example.com"])
    clock.now += 59  # still the minute's answer
    assert approvers.may_approve("U0ANA", RUN, RULE) is None
    assert approvers.may_approve("U0BO", RUN, RULE) == NOT_NAMED
    clock.now += 2
    assert approvers.may_approve("U0BO", RUN, RULE) is None
    assert approvers.may_approve("U0ANA", RUN, RULE) == NOT_NAMED
    assert pagerduty.reads() == 2


def test_an_opsgenie_schedule_names_its_people_who_have_slack_accounts(approvers, slack):
    rule = ("opsgenie:Ops",)
    assert approvers.may_approve("U0CY", RUN, rule) is None
    assert approvers.on_call(Schedule("opsgenie", "Ops")).users == ("U0CY",)
    assert [c["email"] for c in slack.calls_to("users.lookupByEmail", ok_only=False)] == [
        "cy@example.com", "nobody-in-slack@example.com"]


@pytest.mark.parametrize("status", [401, 404, 429, 500])
def test_an_unreadable_schedule_adds_nobody_and_the_rules_others_stand(approvers, pagerduty, status):
    pagerduty.fail(status)
    assert approvers.may_approve("U0ANA", RUN, RULE) == NOT_NAMED
    assert approvers.may_approve("U0OTHER", RUN, RULE) is None
    assert not approvers.on_call(Schedule("pagerduty", "PPRIMRY")).readable


def test_a_schedule_alone_that_cannot_be_read_lets_nobody_approve_never_anyone(approvers, pagerduty):
    pagerduty.fail(500)
    for user in ("U0ANA", "U0LEAD", "U0OTHER", "U0BO"):
        assert approvers.may_approve(user, RUN, ("pagerduty:PPRIMRY",)) == NOT_NAMED


def test_no_key_configured_means_nobody_from_the_schedule(slack, clock):
    approvers = Approvers(frozenset({"U0LEAD"}), WebClient(token=slack.token, base_url=slack.url), clock=clock)
    assert approvers.may_approve("U0ANA", RUN, RULE) == NOT_NAMED
    assert approvers.may_approve("U0OTHER", RUN, RULE) is None


def test_an_outage_is_logged_once_naming_the_schedule_and_its_end_once(approvers, pagerduty, clock, caplog):
    caplog.set_level(logging.INFO, logger="signoff.bot.slack.on_call")
    pagerduty.fail(429)
    for _ in range(3):
        approvers.may_approve("U0ANA", RUN, RULE)
        clock.now += 10  # past the retry: each click looks again
    pagerduty.recover()
    assert approvers.may_approve("U0ANA", RUN, RULE) is None
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2 and pagerduty.reads() == 4
    assert said[0].startswith("on-call schedule pagerduty:PPRIMRY cannot be read (HTTP 429: Rate Limit Exceeded")
    assert said[1] == "on-call schedule pagerduty:PPRIMRY can be read again"


def test_an_unreadable_schedule_is_not_asked_again_at_every_click(approvers, pagerduty, clock):
    pagerduty.fail(500)
    for _ in range(5):
        approvers.may_approve("U0ANA", RUN, RULE)
    assert pagerduty.reads() == 1


def test_slack_failing_to_look_people_up_adds_nobody(approvers, slack):
    slack.fail("users.lookupByEmail", times=5, status=500)
    assert approvers.may_approve("U0ANA", RUN, RULE) == NOT_NAMED
    assert not approvers.on_call(Schedule("pagerduty", "PPRIMRY")).readable


def test_the_card_names_who_is_on_call_or_that_the_schedule_cannot_be_read(approvers, pagerduty, clock):
    approval = make_approval(asked={"approvers": list(RULE), "quorum": 1, "ttl_seconds": 1800,
                                    "allow_self_approval": False})
    assert deciders_line(approval) == "1 approval from on call in pagerduty:PPRIMRY, <@U0OTHER> · default policy"
    assert deciders_line(approval, approvers.on_call) == (
        "1 approval from on call in pagerduty:PPRIMRY (<@U0ANA>), <@U0OTHER> · default policy")
    pagerduty.fail(500)
    clock.now += 61
    assert deciders_line(approval, approvers.on_call) == (
        "1 approval from on call in pagerduty:PPRIMRY (the schedule cannot be read now: nobody from it may "
        "decide), <@U0OTHER> · default policy")


# -- the entries, where they are written -------------------------------------------------------------


@pytest.mark.parametrize(("entry", "kind"), [
    ("pagerduty:P1ABCDE", "schedule"), ("opsgenie:Ops Team_1", "schedule"), ("U0ANA", "user"),
    ("S0OPS", "group"), ("*", "channel"), ("pagerduty:", None), ("pagerduty:p1abcde", None),
    ("opsgenie:a/b", None), ("victorops:X", None), ("PAGERDUTY:P1", None),
])
def test_one_function_says_what_an_approver_entry_is(entry, kind):
    assert approver_kind(entry) == kind
    assert (schedule_of(entry) is not None) == (kind == "schedule")


def test_settings_take_schedules_among_the_approvers_and_the_services_keys():
    settings = Settings.from_env({"SIGNOFF_APPROVERS": "U0LEAD, pagerduty:P1ABCDE,opsgenie:Ops",
                                  "PAGERDUTY_TOKEN": "pd-secret", "SIGNOFF_OPSGENIE_URL": "https://api.eu.opsgenie.com"})
    assert settings.approvers == {"U0LEAD", "pagerduty:P1ABCDE", "opsgenie:Ops"}
    assert settings.pagerduty_url == "https://api.pagerduty.com" and settings.opsgenie_api_key is None
    assert settings.opsgenie_url == "https://api.eu.opsgenie.com"
    assert "pd-secret" not in repr(settings)


def test_a_policy_names_schedules_as_approvers_and_in_escalations_and_refuses_lookalikes():
    text = ("rules:\n  - name: deploys\n    tool: deploy\n    approvers: [pagerduty:P1ABCDE, U0OTHER]\n"
            "    quorum: 2\n    escalate: {after: 5m, to: [opsgenie:Ops Leads]}\n")
    policy = parse_policy(text, source="policy.yaml")
    rule = policy.rules[0]
    assert rule.approvers == ("pagerduty:P1ABCDE", "U0OTHER")
    assert rule.escalate is not None and rule.escalate.to == ("opsgenie:Ops Leads",)
    with pytest.raises(PolicyError, match="approver 'pagerduty:oops' is not"):
        parse_policy(text.replace("P1ABCDE", "oops"), source="policy.yaml")
