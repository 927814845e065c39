from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from signoff.bot.slack.blocks import (
    APPROVE_ACTION,
    DENY_MODAL,
    DENY_REASON_BLOCK,
    DENY_REASON_INPUT,
    EXTEND_ACTION,
)
from signoff.bot.slack.payloads import (
    OUTDATED_BUTTON,
    ApprovalClick,
    CancelRun,
    Command,
    DenySubmission,
    ListRuns,
    Malformed,
    RunClick,
    ShowHelp,
    ShowStatus,
    StartRun,
    Where,
    parse_click,
    parse_command,
    parse_deny_submission,
    parse_request,
    run_value,
)

DIGEST = "ab" * 32


def click(action_id=APPROVE_ACTION, value=f"apr_x1:{DIGEST}", **extra):
    body = {
        "type": "block_actions", "user": {"id": "U0LEAD", "name": "lead"}, "trigger_id": "123.456.abc",
        "container": {"type": "message", "channel_id": "C0RUNS", "message_ts": "1700000001.000001"},
        "channel": {"id": "C0RUNS"}, "response_url": "https://hooks.slack.com/actions/T/1/x",
        "actions": [{"action_id": action_id, "value": value, "block_id": "b", "type": "button"}],
    }
    body.update(extra)
    return body


def test_approval_click():
    assert parse_click(click()) == ApprovalClick(
        APPROVE_ACTION, "apr_x1", DIGEST,
        Where(user="U0LEAD", channel="C0RUNS", message_ts="1700000001.000001", trigger_id="123.456.abc",
              response_url="https://hooks.slack.com/actions/T/1/x"),
    )


def test_click_in_app_home_has_no_channel():
    body = click(container={"type": "view", "view_id": "V1"}, view={"type": "home", "id": "V1"})
    del body["channel"], body["response_url"]
    parsed = parse_click(body)
    assert isinstance(parsed, ApprovalClick)
    assert parsed.where.in_home and parsed.where.channel is None and parsed.where.response_url is None


def test_run_click_carries_the_version_it_was_shown_for():
    assert parse_click(click(EXTEND_ACTION, run_value("run-0123456789", 7))) == RunClick(
        EXTEND_ACTION, "run-0123456789", 7, parse_click(click()).where)


def test_a_run_button_without_a_version_is_out_of_date_not_acted_on():
    # As an older Signoff posted them: the bare run id, which would act on whatever state the run is in now.
    assert parse_click(click(EXTEND_ACTION, "run-0123456789")) == Malformed(OUTDATED_BUTTON)
    assert "out of date" in OUTDATED_BUTTON


@pytest.mark.parametrize(
    "body",
    [
        None, [], "x", {}, {"type": "view_submission"},
        click(actions=[]), click(actions=[{}, {}]), click(actions=["x"]),
        click(user={"id": "<!channel>"}), click(user="U0LEAD"), click(user=None),
        click(value=None), click(value=""), click(value="apr_x1"), click(value=f"apr_x1:{DIGEST[:-1]}"),
        click(value=f"run-1:{DIGEST}"), click(value="apr_x1:" + "g" * 64), click(value="apr_" + "a" * 3000),
        click(action_id="other.action"), click(action_id=None),
        click(EXTEND_ACTION, "run 1; drop table"), click(EXTEND_ACTION, ""), click(EXTEND_ACTION, "run-1:"),
        click(EXTEND_ACTION, "run-1:-1"), click(EXTEND_ACTION, "run-1:1.5"), click(EXTEND_ACTION, ":3"),
        click(EXTEND_ACTION, "run-1:" + "9" * 5000),
    ],
)
def test_malformed_clicks_become_values(body):
    assert isinstance(parse_click(body), Malformed)


def test_malformed_channel_and_ts_are_dropped_not_trusted():
    parsed = parse_click(click(container={"type": "message", "channel_id": "#general", "message_ts": "now"},
                               channel={"id": "<!here>"}))
    assert isinstance(parsed, ApprovalClick)
    assert parsed.where.channel is None and parsed.where.message_ts is None


def submission(reason="wrong customer", metadata=None, **extra):
    metadata = metadata if metadata is not None else json.dumps(
        {"approval": "apr_x1", "digest": DIGEST, "channel": "C0RUNS"})
    body = {
        "type": "view_submission", "user": {"id": "U0LEAD"},
        "view": {"callback_id": DENY_MODAL, "private_metadata": metadata,
                 "state": {"values": {DENY_REASON_BLOCK: {DENY_REASON_INPUT: {"type": "plain_text_input",
                                                                              "value": reason}}}}},
    }
    body.update(extra)
    return body


def test_deny_submission_with_reason():
    assert parse_deny_submission(submission("  wrong customer \n")) == DenySubmission(
        "apr_x1", DIGEST, "wrong customer", Where(user="U0LEAD", channel="C0RUNS"))


def test_deny_submission_without_reason():
    parsed = parse_deny_submission(submission(None))
    assert isinstance(parsed, DenySubmission) and parsed.reason == ""


def test_deny_reason_is_bounded():
    parsed = parse_deny_submission(submission("x" * 10_000))
    assert isinstance(parsed, DenySubmission) and len(parsed.reason) == 500


@pytest.mark.parametrize(
    "body",
    [
        None, submission(metadata="not json"), submission(metadata="[]"), submission(metadata="{}"),
        submission(metadata=json.dumps({"approval": "apr_x1", "digest": "short"})),
        submission(user={"id": "nobody"}), submission(view={"callback_id": "other"}),
        {"type": "block_actions"},
    ],
)
def test_malformed_submissions_become_values(body):
    assert isinstance(parse_deny_submission(body), Malformed)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ShowHelp()), ("   ", ShowHelp()), ("help", ShowHelp()), ("HELP", ShowHelp()),
        ("status", ShowHelp()), ("cancel", ShowHelp()), ("status <!channel>", ShowHelp()),
        ("list", ListRuns()), ("status run-0123456789", ShowStatus("run-0123456789")),
        ("cancel run-0123456789", CancelRun("run-0123456789")),
        ("list the orders of customer 7", StartRun("list the orders of customer 7")),
        ("  refund order 42  ", StartRun("refund order 42")),
        ("status of order 42 please", StartRun("status of order 42 please")),
    ],
)
def test_parse_request(text, expected):
    assert parse_request(text) == expected


def test_parse_command():
    body = {"command": "/signoff", "text": "refund order 42", "user_id": "U0ASKER", "channel_id": "C0RUNS",
            "team_id": "T0TEST", "trigger_id": "1.2.3", "response_url": "https://hooks.slack.com/commands/1"}
    assert parse_command(body) == Command(
        StartRun("refund order 42"),
        Where(user="U0ASKER", channel="C0RUNS", trigger_id="1.2.3", response_url="https://hooks.slack.com/commands/1"),
        team="T0TEST")
    assert isinstance(parse_command({**body, "user_id": None}), Malformed)
    assert isinstance(parse_command({**body, "channel_id": "general"}), Malformed)
    assert parse_command({**body, "text": None}).request == ShowHelp()


known_keys = st.sampled_from(["type", "user", "actions", "container", "channel", "view", "value", "action_id",
                              "id", "private_metadata", "callback_id", "state", "text", "user_id", "channel_id"])
leaves = st.none() | st.booleans() | st.integers() | st.text(max_size=30)
shallow = leaves | st.lists(leaves, max_size=3) | st.dictionaries(known_keys | st.text(max_size=8), leaves, max_size=4)
json_values = shallow | st.lists(shallow, max_size=2) | st.dictionaries(known_keys, shallow, max_size=4)
bodies = st.dictionaries(known_keys, json_values, max_size=8)


@given(st.one_of(json_values, bodies, bodies.map(lambda b: {**b, "type": "block_actions"}),
                 bodies.map(lambda b: {**b, "type": "view_submission"})))
@settings(max_examples=150, deadline=None)
def test_parsers_never_raise(body):
    for parse in (parse_click, parse_deny_submission, parse_command):
        result = parse(body)
        assert isinstance(result, ApprovalClick | RunClick | DenySubmission | Command | Malformed)


@given(st.text(max_size=200))
@settings(max_examples=150, deadline=None)
def test_parse_request_never_raises_and_keeps_goals(text):
    request = parse_request(text)
    if isinstance(request, StartRun):
        assert request.goal == text.strip() and request.goal


@given(st.text(max_size=300), st.text(max_size=100))
@settings(max_examples=150, deadline=None)
def test_fuzzed_button_values_never_parse_into_wrong_ids(value, action_id):
    parsed = parse_click(click(action_id=action_id, value=value))
    if isinstance(parsed, ApprovalClick):
        assert value == f"{parsed.approval_id}:{parsed.digest}"
    if isinstance(parsed, RunClick):
        assert value == run_value(parsed.run_id, parsed.shown_version)


# -- screening bodies before Bolt parses them ------------------------------------------------------

from urllib.parse import urlencode  # noqa: E402

from signoff.bot.slack.screening import screen_body, screen_request  # noqa: E402


def _form(payload: object) -> bytes:
    return urlencode({"payload": json.dumps(payload)}).encode()


@pytest.mark.parametrize("body, content_type", [
    (b"0", "application/json"),
    (b":", "application/json"),
    (b"[1, 2]", "application/json"),
    (b'{"type": "event_callback", "event": null}', "application/json"),
    (b'{"type": 7}', "application/json"),
    (_form([1]), "application/x-www-form-urlencoded"),
    (_form({"type": "block_actions", "actions": "approve", "user": {"id": "U1"}}), "application/x-www-form-urlencoded"),
    (_form({"type": "block_actions", "actions": [1], "user": {"id": "U1"}}), "application/x-www-form-urlencoded"),
    (_form({"type": "block_actions", "actions": [], "user": {"id": "U1"}}), "application/x-www-form-urlencoded"),
    (_form({"type": "view_submission", "user": {"id": "U1"}}), "application/x-www-form-urlencoded"),
    (_form({"type": "view_submission", "user": {"id": "U1"}, "view": {"type": "modal"}}),
     "application/x-www-form-urlencoded"),
    (_form({"type": "block_actions", "actions": [{"value": "x"}], "user": {"id": "U1"}}),
     "application/x-www-form-urlencoded"),
    (b'{"type": "event_callback", "event": {}}', "application/json"),
    (urlencode({"payload": "{not json"}).encode(), "application/x-www-form-urlencoded"),
    (b"\xff\xfe", "application/x-www-form-urlencoded"),
])
def test_bodies_slack_never_sends_are_refused_before_bolt(body, content_type):
    assert screen_body(body, content_type)


@pytest.mark.parametrize("body, content_type", [
    (b'{"type": "event_callback", "n": ' + b"7" * 5000 + b"}", "application/json"),
    (_form({"type": "block_actions"}).replace(b"%7D", b"%2C%22n%22%3A" + b"7" * 5000 + b"%7D"),
     "application/x-www-form-urlencoded"),
    (b"[" * 100_000, "application/json"),
    (_form({"type": "block_actions", "actions": [{"action_id": "signoff.approve"}], "user": {"id": "U1"}})
     + b"&payload=%7Bnot+json", "application/x-www-form-urlencoded"),
])
def test_bodies_python_cannot_read_as_json_are_refused_not_raised(body, content_type):
    # A 5,000-digit integer is over Python's int-string limit: ValueError, not JSONDecodeError.
    assert screen_body(body, content_type)


def test_a_timestamp_that_is_not_a_number_is_refused_as_unsigned():
    form = urlencode({"command": "/signoff", "text": "help"}).encode()
    assert screen_request(form, "application/x-www-form-urlencoded", "1700000000") is None
    for stamp in ("abc", "9" * 5000, "-1", ""):
        problem = screen_request(form, "application/x-www-form-urlencoded", stamp)
        assert problem is not None and problem.status.startswith("401"), stamp


@pytest.mark.parametrize("body, content_type", [
    (urlencode({"command": "/signoff", "text": "help", "user_id": "U1"}).encode(), "application/x-www-form-urlencoded"),
    (_form({"type": "block_actions", "actions": [{"action_id": "signoff.approve"}], "user": {"id": "U1"},
            "enterprise": None, "channel": None}), "application/x-www-form-urlencoded"),
    (b'{"type": "event_callback", "event": {"type": "app_home_opened"}}', "application/json"),
    (b'{"type": "url_verification", "challenge": "abc"}', "application/json"),
])
def test_slack_shaped_bodies_pass_the_screen(body, content_type):
    assert screen_body(body, content_type) is None
