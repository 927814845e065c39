""""see the run" on an approval card opens the run's own message, whose thread tells the run, where
Slack's permalink can be made: the run's origin names its workspace's domain."""

from __future__ import annotations

import json

from bot_fakes import make_approval, make_run

from signoff.bot.slack.messages import approval_message

ORIGIN = {"channel": "C0RUNS", "ts": "1700000000.000001", "team": "T0TEST"}


def link_in(run) -> str:
    head = json.dumps(approval_message(run, make_approval()).blocks)
    start = head.index("<https://")
    return head[start:head.index(">", start) + 1]


def test_see_the_run_is_a_permalink_to_the_run_message_when_the_workspace_domain_is_known():
    run = make_run(origin={**ORIGIN, "domain": "signoff-test"})

    assert link_in(run) == "<https://signoff-test.slack.com/archives/C0RUNS/p1700000000000001|see the run>"


def test_without_a_domain_it_opens_the_run_channel():
    assert link_in(make_run(origin=ORIGIN)) == (
        "<https://slack.com/app_redirect?channel=C0RUNS&amp;team=T0TEST|see the run>")


def test_a_domain_that_is_not_one_is_not_put_in_a_link():
    run = make_run(origin={**ORIGIN, "domain": "evil.example/x?"})

    assert "evil" not in link_in(run)


def test_a_run_started_with_the_slash_command_links_its_own_message_from_its_card(signoff):
    from test_approval_flow import refund_script, start

    refund_script(signoff)
    start(signoff)  # the command's body names the workspace's domain, as Slack's does
    run = signoff.only_run()
    card = json.dumps(signoff.approval_message()["blocks"])
    permalink = f"https://signoff-test.slack.com/archives/C0RUNS/p{run.origin['ts'].replace('.', '')}"
    assert f"<{permalink}|see the run>" in card
