"""Who sees and decides a run, and whose requests count at all, over signed HTTP.

With `SIGNOFF_APPROVERS=*` the people who decide are the members of the channel where the approval
is posted; a run is seen by its requester, its deciders and the members of its channel. Requests
from another team or enterprise than the installed one are acknowledged and dropped.
"""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import parse_qs, urlencode

from bot_fakes import final, tool_call
from slack_harness import buttons

from signoff.bot.slack.app import NOT_INSTALLED_HERE
from signoff.bot.slack.blocks import APPROVE_ACTION

FORM = "application/x-www-form-urlencoded"


def private_run(signoff):
    """A refund waiting for approval, asked for in #private (members: U0ASKER and U0LEAD only)."""
    signoff.script.decisions = [tool_call("issue_refund", order_id="42", amount_usd=5.0), final("Refunded.")]
    signoff.command("Refund order 42 for the salary review", channel="C0PRIVATE")
    run = signoff.only_run()
    assert run.status == "awaiting_approval" and run.origin["channel"] == "C0PRIVATE"
    return run


def test_a_private_channels_run_is_hidden_from_everyone_outside_it(signoff, slack, ledger):
    run = private_run(signoff)
    outsider = "U0OPS"  # in #runs, not in #private
    status = signoff.command(f"status {run.run_id}", user=outsider).json()
    assert status["text"] == f"There is no run `{run.run_id}` you can see."
    unknown = signoff.command("status run-0000000000", user=outsider).json()  # the same as for no run at all
    assert json.dumps(unknown).replace("run-0000000000", run.run_id) == json.dumps(status)
    listed = json.dumps(signoff.command("list", user=outsider).json())
    assert run.run_id not in listed and "salary review" not in listed and "issue_refund" not in listed
    signoff.home_opened(outsider)
    assert run.run_id not in json.dumps(slack.views[outsider]) and buttons(slack.views[outsider]) == []
    cancel = signoff.command(f"cancel {run.run_id}", user=outsider).json()
    assert cancel["text"] == f"There is no run `{run.run_id}` you can see."

    signoff.click(signoff.approval_message(), APPROVE_ACTION, user=outsider)
    assert ledger.total == 0 and signoff.run(run.run_id).status == "awaiting_approval"
    assert any("not a member of the channel" in t for t in signoff.ephemerals())


def test_the_channels_members_see_and_decide_it(signoff, slack, ledger):
    run = private_run(signoff)
    status = json.dumps(signoff.command(f"status {run.run_id}", user="U0LEAD").json())
    assert "salary review" in status and "awaiting approval" in status
    assert run.run_id in json.dumps(signoff.command("list", user="U0LEAD").json())
    signoff.home_opened("U0LEAD")
    assert run.run_id in json.dumps(slack.views["U0LEAD"]) and buttons(slack.views["U0LEAD"])
    assert "salary review" in json.dumps(signoff.command(f"status {run.run_id}", user="U0ASKER").json())
    signoff.click(signoff.approval_message(), APPROVE_ACTION, user="U0LEAD")
    assert ledger.total == 1 and signoff.run(run.run_id).status == "done"


def test_an_approver_listed_by_id_sees_a_run_outside_their_channels(make_signoff, slack, ledger):
    signoff = make_signoff(SIGNOFF_APPROVERS="U0CFO")
    run = private_run(signoff)
    assert "salary review" in json.dumps(signoff.command(f"status {run.run_id}", user="U0CFO").json())
    assert "salary review" in json.dumps(signoff.command(f"status {run.run_id}", user="U0LEAD").json())  # a member
    assert "you can see" in signoff.command(f"status {run.run_id}", user="U0OPS").json()["text"]


def test_a_failed_member_lookup_shows_and_approves_nothing(signoff, slack, ledger):
    run = private_run(signoff)
    slack.fail("conversations.members", times=10, status=500)
    assert "you can see" in signoff.command(f"status {run.run_id}", user="U0LEAD").json()["text"]
    signoff.click(signoff.approval_message(), APPROVE_ACTION, user="U0LEAD")
    assert ledger.total == 0


# -- requests from another workspace ---------------------------------------------------------------


def foreign(body: str, *, team: str = "T0EVIL", enterprise: str | None = None) -> str:
    """The same request as if another workspace (or enterprise) had sent it."""
    form = {k: v[0] for k, v in parse_qs(body, keep_blank_values=True).items()}
    if "payload" not in form:  # a slash command
        form.update(team_id=team, **({"enterprise_id": enterprise} if enterprise else {}))
        return urlencode(form)
    payload: dict[str, Any] = json.loads(form["payload"])
    payload["team"] = {"id": team, "domain": "elsewhere", **({"enterprise_id": enterprise} if enterprise else {})}
    payload["user"]["team_id"] = team
    return urlencode({"payload": json.dumps(payload)})


def test_a_click_from_another_team_is_acknowledged_and_does_nothing(signoff, slack, ledger, caplog):
    signoff.script.decisions = [tool_call("issue_refund", order_id="42", amount_usd=5.0), final("Refunded.")]
    signoff.command("Refund order 42")
    card = signoff.approval_message()
    with caplog.at_level(logging.WARNING, logger="signoff.bot"):
        response = signoff.post(foreign(signoff.click_body(card, APPROVE_ACTION, user="U0LEAD")), FORM)
    assert response.status == 200 and response.text == ""
    assert ledger.total == 0 and signoff.only_run().status == "awaiting_approval"
    assert buttons(signoff.approval_message()) == buttons(card)
    assert any("T0EVIL" in r.getMessage() for r in caplog.records)
    same_team_other_enterprise = foreign(signoff.click_body(card, APPROVE_ACTION, user="U0LEAD"), team="T0TEST",
                                         enterprise="E0EVIL")
    assert signoff.post(same_team_other_enterprise, FORM).status == 200
    assert ledger.total == 0
    signoff.click(card, APPROVE_ACTION, user="U0LEAD")  # the installed workspace's own click still works
    assert ledger.total == 1


def test_commands_views_and_events_from_another_team_are_dropped(signoff, slack):
    reply = signoff.post(foreign(signoff.command_body("Refund everything")), FORM)
    assert reply.status == 200 and reply.text == NOT_INSTALLED_HERE
    assert signoff.runner.store.list_runs() == []
    event = {"token": "legacy", "team_id": "T0EVIL", "api_app_id": "A0SIGNOFF", "type": "event_callback",
             "event_id": "Ev1", "event_time": 1, "event": {"type": "app_home_opened", "user": "U0LEAD", "tab": "home"}}
    assert signoff.post(json.dumps(event), "application/json").status == 200
    assert "U0LEAD" not in slack.views
    view = {"type": "modal", "callback_id": "signoff.deny_modal", "private_metadata": json.dumps(
        {"approval": "apr_x", "digest": "0" * 64})}
    submission = {"type": "view_submission", "team": {"id": "T0EVIL"}, "user": {"id": "U0LEAD", "team_id": "T0EVIL"},
                  "view": {**view, "id": "V1", "state": {"values": {}}}, "api_app_id": "A0SIGNOFF"}
    assert signoff.post(urlencode({"payload": json.dumps(submission)}), FORM).status == 200

