"""Reading who is on call from PagerDuty and Opsgenie, against local servers speaking their APIs:
the requests they document (auth header, query, pages), and every way a read fails said, never guessed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from signoff.bot.oncall import OnCallReader, OnCallServices, ScheduleUnreadable
from signoff.runtime.people import Schedule
from tests.fakes.oncall import FakeOpsgenie, FakePagerDuty

PRIMARY = Schedule("pagerduty", "PPRIMRY")
OPS = Schedule("opsgenie", "Ops Team_1")


@pytest.fixture
def pagerduty() -> Iterator[FakePagerDuty]:
    fake = FakePagerDuty(schedules={"PPRIMRY": ["ana@example.com", "bo@example.com"]})
    fake.start()
    yield fake
    fake.stop()


@pytest.fixture
def opsgenie() -> Iterator[FakeOpsgenie]:
    fake = FakeOpsgenie(schedules={"Ops Team_1": ["cy@example.com"]})
    fake.start()
    yield fake
    fake.stop()


def reader(pagerduty: FakePagerDuty | None = None, opsgenie: FakeOpsgenie | None = None,
           timeout: float = 3.0) -> OnCallReader:
    return OnCallReader(OnCallServices(
        pagerduty_token=pagerduty.token if pagerduty else None, pagerduty_url=pagerduty.url if pagerduty else "",
        opsgenie_key=opsgenie.key if opsgenie else None, opsgenie_url=opsgenie.url if opsgenie else "",
        timeout=timeout))


def test_pagerduty_is_asked_for_who_is_on_call_now_with_their_emails(pagerduty):
    assert reader(pagerduty).emails(PRIMARY) == ("ana@example.com", "bo@example.com")
    path, query, authorization = pagerduty.requests[-1]
    assert path == "/oncalls" and authorization == "Token token=pd-test-token"
    assert query["schedule_ids[]"] == ["PPRIMRY"] and query["earliest"] == ["true"]
    assert query["include[]"] == ["users"]


def test_pagerduty_pages_are_turned_until_there_are_no_more(pagerduty):
    pagerduty.page_limit = 2
    pagerduty.set_on_call("PPRIMRY", [f"p{i}@example.com" for i in range(5)] + ["p0@example.com"])
    assert reader(pagerduty).emails(PRIMARY) == tuple(f"p{i}@example.com" for i in range(5))
    assert [q["offset"] for _, q, _ in pagerduty.requests] == [["0"], ["2"], ["4"]]


@pytest.mark.parametrize(("status", "said"), [
    (401, "HTTP 401: Unauthorized (code 2006)"),
    (404, "HTTP 404: Not Found (code 2100)"),
    (429, "HTTP 429: Rate Limit Exceeded (code 2020)"),
    (500, "HTTP 500: Internal Server Error (code 2001)"),
])
def test_pagerduty_errors_are_said_in_its_words(pagerduty, status, said):
    pagerduty.fail(status)
    with pytest.raises(ScheduleUnreadable, match=said.replace("(", r"\(").replace(")", r"\)")):
        reader(pagerduty).emails(PRIMARY)


def test_a_wrong_pagerduty_token_and_an_unknown_schedule_are_refused_by_the_service(pagerduty):
    wrong = OnCallReader(OnCallServices(pagerduty_token="nope", pagerduty_url=pagerduty.url))
    with pytest.raises(ScheduleUnreadable, match="HTTP 401"):
        wrong.emails(PRIMARY)
    with pytest.raises(ScheduleUnreadable, match="HTTP 404"):
        reader(pagerduty).emails(Schedule("pagerduty", "PNOSUCH"))


def test_without_a_key_no_request_is_made(pagerduty, opsgenie):
    nothing = OnCallReader(OnCallServices(pagerduty_url=pagerduty.url, opsgenie_url=opsgenie.url))
    with pytest.raises(ScheduleUnreadable, match="PAGERDUTY_TOKEN is not set"):
        nothing.emails(PRIMARY)
    with pytest.raises(ScheduleUnreadable, match="OPSGENIE_API_KEY is not set"):
        nothing.emails(OPS)
    assert pagerduty.reads() == opsgenie.reads() == 0


def test_a_service_slower_than_the_timeout_is_unreadable(pagerduty):
    pagerduty.delay = 1.0
    with pytest.raises(ScheduleUnreadable, match="Timeout"):
        reader(pagerduty, timeout=0.2).emails(PRIMARY)


def test_a_service_that_is_not_there_is_unreadable():
    gone = FakePagerDuty().start()
    gone.stop()  # its port is closed now
    with pytest.raises(ScheduleUnreadable, match="ConnectError"):
        reader(gone).emails(PRIMARY)


def test_opsgenie_is_asked_by_schedule_name_for_a_flat_list(opsgenie):
    assert reader(opsgenie=opsgenie).emails(OPS) == ("cy@example.com",)
    path, query, authorization = opsgenie.requests[-1]
    assert path == "/v2/schedules/Ops%20Team_1/on-calls" and authorization == "GenieKey og-test-key"
    assert query == {"scheduleIdentifierType": ["name"], "flat": ["true"]}


@pytest.mark.parametrize(("status", "said"), [
    (401, "HTTP 401: Could not authenticate"),
    (404, "HTTP 404: No schedule exists with the given name"),
    (422, "HTTP 422: Schedule identifier type is not valid"),
    (429, "HTTP 429: You are making too many requests"),
])
def test_opsgenie_errors_are_said_in_its_words(opsgenie, status, said):
    opsgenie.fail(status)
    with pytest.raises(ScheduleUnreadable, match=said):
        reader(opsgenie=opsgenie).emails(OPS)


def test_an_unknown_opsgenie_schedule_is_unreadable(opsgenie):
    with pytest.raises(ScheduleUnreadable, match="HTTP 404"):
        reader(opsgenie=opsgenie).emails(Schedule("opsgenie", "Nobody's"))
