"""Deciding better in Slack, end to end over signed HTTP with a real database: Edit opens a form of
the call's arguments whose refusals stand beside the inputs, and an edit is asked about afresh;
"Approve + allow similar" makes a grant that a later call uses on another replica, App Home lists
it with Revoke; reminders and escalations come once, after a restart too; and a rule that goes on
after nobody decided says so on the card and to the requester.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any
from urllib.parse import parse_qsl, urlencode

import pytest
from bot_fakes import Ledger, final, make_approval, make_run, tool_call
from pydantic import BaseModel, Field
from slack_harness import Response, Signoff, buttons, find_button

from signoff.bot.arguments import ToolDisplay
from signoff.bot.slack.blocks import (
    APPROVE_ACTION,
    APPROVE_SIMILAR_ACTION,
    DENY_ACTION,
    EDIT_ACTION,
    REQUEST_AGAIN_ACTION,
    REVOKE_GRANT_ACTION,
)
from signoff.bot.slack.edit_form import (
    EDIT_INPUT,
    FieldErrors,
    edit_block,
    edit_errors,
    edit_fields,
    read_edit,
)
from signoff.bot.slack.messages import approval_message
from signoff.runtime.records import ApprovalRecord, RunRecord
from signoff.tools.base import Tool
from tests.fakes.slack import block_kit_problems, view_problems

FORM = "application/x-www-form-urlencoded"
SECRET = "sk-live-123456"


class NoticeArgs(BaseModel):
    to: str = Field(pattern=r"^\S+@\S+$", description="Who gets it.")
    subject: str = Field(min_length=3)
    urgent: bool = False
    copies: int = Field(default=1, ge=1, le=5)
    tags: list[str] = Field(default_factory=list)
    api_key: str = ""


class NoticeLedger(Ledger):
    """The Slack edge's test tools, and `send_notice`, whose arguments take every kind of input."""

    def notice(self, args: dict[str, Any], key: str) -> dict[str, Any]:
        with self._lock:
            self.calls[key] += 1
            self.args.append(args)
        return {"sent": args["to"]}

    def tools(self) -> dict[str, Tool]:
        notice = Tool("send_notice", self.notice, side_effect=True, args_model=NoticeArgs,
                      description="Send one notice.")
        return {**super().tools(), notice.name: notice}


@pytest.fixture
def ledger() -> NoticeLedger:
    return NoticeLedger()


def policy_env(tmp_path, text: str) -> dict[str, str]:
    path = tmp_path / "policy.yaml"
    path.write_text(text, encoding="utf-8")
    return {"SIGNOFF_POLICY": str(path)}


NOTICES = """\
rules:
  - name: no-strangers
    tool: send_notice
    when: "!args.to.endsWith('@example.com')"
    decision: deny
    reason: notices go to our own people only
  - name: notices
    tool: send_notice
    approvers: [U0LEAD, U0OPS]
"""
PROPOSED = {"to": "ana@example.com", "subject": "Refund", "api_key": SECRET}


def propose_notice(*replicas: Signoff) -> RunRecord:
    for replica in replicas:
        replica.script.decisions = [tool_call("send_notice", **PROPOSED), final("Sent.")]
    assert replicas[0].command("Tell Ana about her refund").status == 200
    return replicas[0].only_run()


def card_text(message: dict[str, Any]) -> str:
    return json.dumps(message["blocks"], ensure_ascii=False)


def inputs(view: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The modal's input blocks by label."""
    return {block["label"]["text"]: block for block in view["blocks"] if block["type"] == "input"}


def submit_edit(signoff: Signoff, view: dict[str, Any], user: str, settle: bool = True,
                **typed: str | bool | None) -> Response:
    """Submit the edit modal as Slack would: each input as it was filled in, but for `typed`."""
    values: dict[str, Any] = {}
    for label, block in inputs(view).items():
        element = block["element"]
        if element["type"] == "static_select":
            chosen = element.get("initial_option")
            if label in typed:
                chosen = {"text": {"type": "plain_text", "text": str(typed[label]).lower()},
                          "value": str(typed[label]).lower()}
            state = {"type": "static_select", "selected_option": chosen}
        else:
            state = {"type": element["type"], "value": typed.get(label, element.get("initial_value"))}
        values[block["block_id"]] = {EDIT_INPUT: state}
    payload = {"type": "view_submission", "team": {"id": "T0TEST"}, "user": {"id": user}, "api_app_id": "A0SIGNOFF",
               "token": "legacy", "trigger_id": f"{time.monotonic_ns()}.4.trigger", "response_urls": [],
               "view": {**view, "state": {"values": values}}}
    return signoff.post(urlencode({"payload": json.dumps(payload)}), FORM, settle=settle)


def errors_of(response: Response, view: dict[str, Any]) -> dict[str, str]:
    """The errors an edit's ack shows, by the label of the input they stand beside."""
    answer = response.json()
    assert answer["response_action"] == "errors", answer
    labels = {block["block_id"]: label for label, block in inputs(view).items()}
    return {labels[block]: text for block, text in answer["errors"].items()}


def events(signoff: Signoff, run_id: str, kind: str) -> list[dict[str, Any]]:
    return [e for e in signoff.runner.timeline(run_id) if e["type"] == kind]


# -- Edit ---------------------------------------------------------------------------------------------


def test_edit_opens_a_form_of_the_arguments_one_input_each_and_no_secret_in_it(make_signoff, tmp_path, slack):
    signoff = make_signoff(**policy_env(tmp_path, NOTICES))
    propose_notice(signoff)
    card = signoff.approval_message()
    assert buttons(card) == [APPROVE_ACTION, DENY_ACTION, EDIT_ACTION]
    signoff.click(card, EDIT_ACTION, user="U0LEAD")
    view = slack.modal()
    assert view_problems(view) == [] and SECRET not in json.dumps(view)
    fields = inputs(view)
    assert list(fields) == ["to", "subject", "urgent", "copies", "tags", "api_key"]  # the args model's order
    kinds = {label: block["element"]["type"] for label, block in fields.items()}
    assert kinds == {"to": "plain_text_input", "subject": "plain_text_input", "urgent": "static_select",
                     "copies": "number_input", "tags": "plain_text_input", "api_key": "plain_text_input"}
    assert fields["to"]["element"]["initial_value"] == "ana@example.com"
    assert fields["urgent"]["element"]["initial_option"]["value"] == "false"
    assert fields["copies"]["element"] == {**fields["copies"]["element"], "initial_value": "1",
                                           "is_decimal_allowed": False}
    assert fields["tags"]["element"]["initial_value"] == "[]" and fields["tags"]["element"]["multiline"]
    assert "initial_value" not in fields["api_key"]["element"] and fields["api_key"]["optional"]
    assert "leave it empty to keep it" in fields["api_key"]["hint"]["text"].lower()

    signoff.click(card, EDIT_ACTION, user="U0ASKER")  # the requester may not decide it, so not edit it either
    assert slack.attempts("views.open") == 1
    assert any("someone else" in text for text in signoff.ephemerals())


def test_an_edit_the_tool_or_the_policy_refuses_is_shown_beside_the_inputs_and_changes_nothing(
        make_signoff, tmp_path, slack, ledger):
    signoff = make_signoff(**policy_env(tmp_path, NOTICES))
    run = propose_notice(signoff)
    signoff.click(signoff.approval_message(), EDIT_ACTION, user="U0LEAD")
    view = slack.modal()

    refused = submit_edit(signoff, view, "U0LEAD", to="not an address", copies="9")
    assert refused.elapsed < 3
    told = errors_of(refused, view)
    assert set(told) == {"to", "copies"}
    assert "String should match pattern" in told["to"] and "less than or equal to 5" in told["copies"]

    outside = errors_of(submit_edit(signoff, view, "U0LEAD", to="eve@elsewhere.test"), view)
    assert list(outside) == ["to"] and "no-strangers" in outside["to"] and "our own people" in outside["to"]
    assert errors_of(submit_edit(signoff, view, "U0LEAD"), view) == {"to": "Nothing was changed"}
    assert errors_of(submit_edit(signoff, view, "U0LEAD", tags="[urgent"), view) == {
        "tags": 'Not valid JSON: quote text, e.g. "like this".'}

    approval = signoff.runner.store.approval_for_key(f"{run.run_id}:1")
    assert approval is not None and approval.status == "pending" and approval.args["to"] == "ana@example.com"
    assert events(signoff, run.run_id, "call_edited") == [] and ledger.total == 0
    assert buttons(signoff.approval_message()) == [APPROVE_ACTION, DENY_ACTION, EDIT_ACTION]


def test_a_valid_edit_closes_the_form_replaces_the_card_and_runs_as_edited_once_approved(
        make_signoff, tmp_path, slack, ledger):
    signoff = make_signoff(**policy_env(tmp_path, NOTICES))
    run = propose_notice(signoff)
    old = signoff.approval_message()
    signoff.click(old, EDIT_ACTION, user="U0LEAD")
    view = slack.modal()

    saved = submit_edit(signoff, view, "U0LEAD", subject="Your refund is on its way", copies="2")
    assert saved.status == 200 and saved.text == ""  # an empty ack: Slack closes the form
    replaced = slack.message(old["channel"], old["ts"])
    assert buttons(replaced) == []
    assert ":pencil2: *Edited* by <@U0LEAD>" in card_text(replaced) and "a new request follows" in card_text(replaced)
    assert replaced["text"].startswith("Edited by <@U0LEAD>; a new request follows")
    fresh = signoff.approval_message()
    assert (fresh["channel"], fresh["ts"]) != (old["channel"], old["ts"])
    assert buttons(fresh) == [APPROVE_ACTION, DENY_ACTION, EDIT_ACTION]
    shown = card_text(fresh)
    assert "*Edited* by <@U0LEAD> before anyone approved it. Changed from what the model proposed:" in shown
    assert 'copies: 1 -&gt; 2\\nsubject: \\"Refund\\" -&gt; \\"Your refund is on its way\\"' in shown
    assert SECRET not in shown and "edited by <@U0LEAD>" in fresh["text"]
    assert any(t.startswith("Your edit of `send_notice` is saved") for t in signoff.ephemerals("U0LEAD"))

    signoff.click(fresh, APPROVE_ACTION, user="U0OPS")
    assert ledger.args == [{**NoticeArgs.model_validate(PROPOSED).model_dump(), "subject": "Your refund is on its way",
                            "copies": 2}]
    assert ledger.calls == {f"{run.run_id}:1": 1}
    [told] = [e for e in signoff.run(run.run_id).state["history"] if e["role"] == "tool"]
    assert told["edited"].startswith("U0LEAD changed this call before it ran")
    [result] = [m for m in slack.thread("C0RUNS", run.origin["ts"]) if "send_notice" in m["text"]]
    assert "`send_notice` (step 1) returned (with the arguments a person edited):" in card_text(result)
    assert signoff.run(run.run_id).status == "done"


@pytest.mark.parametrize("head_start", [None, "edit", "approve"])
def test_an_edit_racing_an_approve_on_two_replicas_is_one_or_the_other(make_signoff, tmp_path, database_url, slack,
                                                                       ledger, head_start):
    env = policy_env(tmp_path, NOTICES)
    first, second = make_signoff(database_url, **env), make_signoff(database_url, **env)
    run = propose_notice(first, second)
    card = first.approval_message()
    first.click(card, EDIT_ACTION, user="U0LEAD")
    view = slack.modal()
    responses: dict[str, Response] = {}
    barrier = threading.Barrier(2)
    delays = {None: (0.0, 0.0), "edit": (0.05, 0.0), "approve": (0.0, 0.05)}[head_start]

    def approve() -> None:
        barrier.wait()
        time.sleep(delays[0])
        responses["approve"] = first.post(first.click_body(card, APPROVE_ACTION, "U0OPS"), FORM, settle=False)

    def edit() -> None:
        barrier.wait()
        time.sleep(delays[1])
        responses["edit"] = submit_edit(second, view, "U0LEAD", settle=False, subject="Changed at the last moment")

    threads = [threading.Thread(target=approve), threading.Thread(target=edit)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    first.settle()
    second.settle()

    original = _card_approval(first, card)
    if original.status == "consumed":  # the approve won: the call ran as proposed, the edit was told so
        assert ledger.calls == {f"{run.run_id}:1": 1} and ledger.args[0]["subject"] == "Refund"
        assert events(first, run.run_id, "call_edited") == []
        answer = responses["edit"].json()
        assert answer["response_action"] == "update" and "Already approved by <@U0OPS>" in json.dumps(answer)
    else:  # the edit won: nothing ran, and the approve was told of the edit; the new request waits
        assert original.status == "superseded" and ledger.total == 0
        assert any("This request was edited by <@U0LEAD>" in t for t in first.ephemerals())
        fresh = first.runner.pending_approval(run.run_id)
        assert fresh is not None and fresh.args["subject"] == "Changed at the last moment" and fresh.votes == ()
    assert buttons(slack.message(card["channel"], card["ts"])) == []


def _card_approval(signoff: Signoff, card: dict[str, Any]) -> ApprovalRecord:
    approval_id = find_button(card, APPROVE_ACTION)["value"].split(":")[0]
    approval = signoff.runner.get_approval(approval_id)
    assert approval is not None
    return approval


# -- Approve + allow similar, and Revoke --------------------------------------------------------------

GRANTING = """\
rules:
  - name: refunds
    tool: issue_refund
    approvers: [U0LEAD, U0OPS]
    grant: {for: 30m, same: [order_id], scope: requester}
"""


def refund_run(signoff: Signoff, amount: float) -> RunRecord:
    """A run of U0ASKER's on `signoff` whose model proposes one refund of order 42, then answers."""
    signoff.script.decisions = [tool_call("issue_refund", order_id="42", amount_usd=amount), final("Refunded.")]
    before = {r.run_id for r in signoff.runner.store.list_runs(limit=50)}
    # Each harness numbers its triggers from 1: on a second replica the same trigger id would be a replay.
    body = dict(parse_qsl(signoff.command_body(f"Refund ${amount} of order 42")))
    body["trigger_id"] = f"{time.monotonic_ns()}.1.trigger"
    assert signoff.post(urlencode(body), FORM).status == 200
    [run] = [r for r in signoff.runner.store.list_runs(limit=50) if r.run_id not in before]
    return signoff.run(run.run_id)


def test_approve_and_allow_similar_lets_a_later_call_run_on_another_replica_until_revoked(
        make_signoff, tmp_path, database_url, slack, ledger):
    env = policy_env(tmp_path, GRANTING)
    first, second = make_signoff(database_url, **env), make_signoff(database_url, **env)
    run = refund_run(first, 20.0)
    card = first.approval_message()
    assert buttons(card) == [APPROVE_ACTION, APPROVE_SIMILAR_ACTION, DENY_ACTION, EDIT_ACTION]
    assert find_button(card, APPROVE_SIMILAR_ACTION)["text"]["text"] == "Approve + allow similar for 30 min"

    first.click(card, APPROVE_SIMILAR_ACTION, user="U0LEAD")
    assert ledger.calls == {f"{run.run_id}:1": 1}
    decided = slack.message(card["channel"], card["ts"])
    assert buttons(decided) == []
    assert ", allowing similar calls for 30 min" in card_text(decided)
    assert ":white_check_mark: *Approved* by <@U0LEAD> <!date^" in card_text(decided)
    assert decided["text"].startswith("Approved by <@U0LEAD>, allowing similar calls for 30 min")
    # Drawn once with its grant (the runner reads it with the decision), never first without it.
    redrawn = [u for u in slack.calls_to("chat.update") if u.get("ts") == card["ts"]]
    assert redrawn and all(u["text"].startswith("Approved by <@U0LEAD>, allowing similar") for u in redrawn), redrawn
    assert len(redrawn) == 1, redrawn

    later = refund_run(second, 30.0)  # the same requester and order, on the other replica: nobody is asked
    assert later.status == "done" and ledger.calls[f"{later.run_id}:1"] == 1
    assert first.runner.store.approval_for_key(f"{later.run_id}:1") is None
    [used] = [m for m in slack.thread("C0RUNS", later.origin["ts"]) if "issue_refund" in m["text"]]
    assert "`issue_refund` (step 1) ran — allowed by <@U0LEAD>'s grant, <!date^" in card_text(used)
    assert "^{time}|" in card_text(used) and ", its first use:" in card_text(used)

    first.home_opened("U0LEAD")
    home = slack.views["U0LEAD"]
    assert buttons(home) == [REVOKE_GRANT_ACTION] and view_problems(home) == []
    listed = card_text(home)
    assert "*issue_refund* under rule `refunds`: calls in any run of <@U0ASKER> with the same order_id" in listed
    assert '`order_id: \\"42\\"`' in listed and "used 1 time" in listed and "made by <@U0LEAD>" in listed
    first.home_opened("U0ASKER")  # it covers their runs: they see it too
    assert buttons(slack.views["U0ASKER"]) == [REVOKE_GRANT_ACTION]

    first.click(home, REVOKE_GRANT_ACTION, user="U0LEAD")
    assert told_in_dm(slack, "U0LEAD") == ["Revoked: from now on, the calls it covered are asked about again."]
    assert buttons(slack.views["U0LEAD"]) == []  # republished: the grant is gone
    first.click(home, REVOKE_GRANT_ACTION, user="U0OPS")  # another of its deciders, from a stale tab
    [already] = told_in_dm(slack, "U0OPS")
    assert already.startswith("Already revoked by <@U0LEAD> <!date^") and already.endswith("; nothing changed.")

    asked = refund_run(second, 25.0)  # covered before, asked about now
    assert asked.status == "awaiting_approval" and f"{asked.run_id}:1" not in ledger.calls
    pending = second.runner.pending_approval(asked.run_id)
    assert pending is not None and pending.message is not None
    assert buttons(slack.message(pending.message["channel"], pending.message["ts"])) == [
        APPROVE_ACTION, APPROVE_SIMILAR_ACTION, DENY_ACTION, EDIT_ACTION]


def told_in_dm(slack, user: str) -> list[str]:
    """What a person was told as a DM (Slack delivers a message to a user id there)."""
    return [c["text"] for c in slack.calls_to("chat.postMessage") if c.get("channel") == user]


def test_only_the_makers_and_deciders_may_revoke_and_a_rule_without_a_grant_offers_none(
        make_signoff, tmp_path, slack, ledger):
    signoff = make_signoff(**policy_env(tmp_path, GRANTING))
    refund_run(signoff, 20.0)
    signoff.click(signoff.approval_message(), APPROVE_SIMILAR_ACTION, user="U0OPS")
    signoff.home_opened("U0ASKER")
    signoff.click(slack.views["U0ASKER"], REVOKE_GRANT_ACTION, user="U0ASKER")
    assert any(t.startswith("Not done: you started this run") for t in told_in_dm(slack, "U0ASKER"))
    assert len(signoff.runner.grants_for("U0OPS")) == 1

    card = approval_message(make_run(), make_approval(asked={"rule": "r", "policy": "0" * 16, "approvers": ["U0OPS"],
                                                              "quorum": 1, "ttl_seconds": 600,
                                                              "allow_self_approval": False}))
    assert APPROVE_SIMILAR_ACTION not in buttons({"blocks": card.blocks})


# -- reminders and escalation ------------------------------------------------------------------------

NUDGING = """\
rules:
  - name: refunds
    tool: issue_refund
    approvers: [U0LEAD, U0OPS]
    ttl: 10m
    remind: [50%]
    escalate: {after: 6m, to: [U0SRE, S0ONCALL]}
"""


def dms(slack, user: str) -> list[str]:
    return [m["text"] for m in slack.messages_in(slack.dm_channel(user))]


def test_a_reminder_after_a_restart_is_posted_once_and_an_escalation_tells_only_the_people_added(
        make_signoff, tmp_path, database_url, slack, ledger):
    env = policy_env(tmp_path, NUDGING)
    before = make_signoff(database_url, **env)
    run = refund_run(before, 120.0)
    card = before.approval_message()
    thread = (card["channel"], card["ts"])

    after = make_signoff(database_url, **env)  # a restart: a new process on the same database
    after.clock.advance(minutes=5, seconds=1)
    [nudged] = after.runner.nudge_due()
    assert nudged.kinds == ("remind",)
    assert after.runner.nudge_due() == [] and before.runner.nudge_due() == []  # once, whoever sweeps
    [reminder] = slack.thread(*thread)
    assert reminder["text"] == "Reminder: issue_refund still waits for a decision"
    assert "*Reminder:* this request still waits for 1 approval from <@U0LEAD>, <@U0OPS>" in card_text(reminder)
    assert [len(dms(slack, who)) for who in ("U0LEAD", "U0OPS", "U0ASKER")] == [1, 1, 0]
    assert dms(slack, "U0LEAD") == ["Reminder: issue_refund waits for your decision"]

    after.clock.advance(minutes=1)
    [escalated] = after.runner.nudge_due()
    assert escalated.kinds == ("escalate",) and escalated.added == ("U0SRE", "S0ONCALL")
    told = slack.thread(*thread)[-1]
    assert "*Escalated:* nobody decided within 6 min, so <@U0SRE> and <!subteam^S0ONCALL> may decide it now" in (
        card_text(told))
    assert dms(slack, "U0SRE") == ["You may now decide issue_refund"]
    assert dms(slack, "U0ONCALL1") == [] and len(dms(slack, "U0LEAD")) == 1  # a group is told in the thread only
    shown = slack.message(*thread)
    assert "<@U0SRE>" in card_text(shown) and buttons(shown) == [APPROVE_ACTION, DENY_ACTION, EDIT_ACTION]

    after.click(shown, APPROVE_ACTION, user="U0SRE")  # added: may decide it now
    assert ledger.calls == {f"{run.run_id}:1": 1}


def test_a_reminder_tells_directly_only_the_people_who_may_still_decide_by_the_policy_now(
        make_signoff, tmp_path, database_url, slack, ledger):
    before = make_signoff(database_url, **policy_env(tmp_path, NUDGING))
    refund_run(before, 120.0)
    changed = tmp_path / "changed.yaml"  # U0OPS is taken off the rule while the request waits
    changed.write_text(NUDGING.replace("[U0LEAD, U0OPS]", "[U0LEAD]"), encoding="utf-8")
    after = make_signoff(database_url, SIGNOFF_POLICY=str(changed))
    after.clock.advance(minutes=5, seconds=1)
    [nudged] = after.runner.nudge_due()
    assert nudged.kinds == ("remind",) and nudged.first_reminder
    # Told directly only whom a click would not refuse: U0OPS's Approve now would be.
    assert [len(dms(slack, who)) for who in ("U0LEAD", "U0OPS", "U0ASKER")] == [1, 0, 0]


def test_a_restart_that_catches_up_on_two_reminders_at_once_still_tells_each_approver_once(
        make_signoff, tmp_path, database_url, slack, ledger):
    env = policy_env(tmp_path, NUDGING.replace("remind: [50%]", "remind: [50%, 90%]"))
    before = make_signoff(database_url, **env)
    refund_run(before, 120.0)
    after = make_signoff(database_url, **env)  # down through both reminders, then back
    after.clock.advance(minutes=9, seconds=30)
    made = after.runner.nudge_due()
    assert [n.kinds for n in made] == [("escalate", "remind")] and made[0].first_reminder
    assert [len(dms(slack, who)) for who in ("U0LEAD", "U0OPS")] == [1, 1]
    assert after.runner.nudge_due() == []
    assert [len(dms(slack, who)) for who in ("U0LEAD", "U0OPS")] == [1, 1]


# -- nobody decided in time ------------------------------------------------------------------------------


@pytest.mark.parametrize("on_expiry", ["end", "continue"])
def test_an_expired_request_says_whether_the_run_ended_or_goes_on(make_signoff, tmp_path, slack, ledger, on_expiry):
    signoff = make_signoff(**policy_env(tmp_path, f"""\
rules:
  - name: quick
    tool: issue_refund
    approvers: [U0LEAD]
    ttl: 2m
    on_expiry: {on_expiry}
"""))
    run = refund_run(signoff, 120.0)
    card = signoff.approval_message()
    signoff.clock.advance(minutes=3)
    signoff.runner.expire_due()
    signoff.settle()
    expired = card_text(slack.message(card["channel"], card["ts"]))
    [told] = dms(slack, "U0ASKER")
    assert ledger.total == 0
    if on_expiry == "end":  # the one DM is the ending's notice, which offers to ask again
        assert ":hourglass: *Expired, not executed.*" in expired
        assert "stopped (expired)" in told and signoff.run(run.run_id).status == "expired"
        [notice] = [m for m in slack.messages_in(slack.dm_channel("U0ASKER"))]
        assert buttons(notice) == [REQUEST_AGAIN_ACTION]
        return
    assert (":hourglass: *Expired, not executed:* no one decided within 2 min; the call was not made. The model "
            "was told, and the run goes on without it.") in expired
    assert "ended" not in told and "denied" not in told
    assert told.endswith("Nothing was executed: the model was told no one decided within 2 min; the call was not "
                         "made, and the run goes on without it.")
    assert signoff.run(run.run_id).status == "done"


def test_an_expired_run_is_requested_again_from_its_notice_once_and_runs_once_approved(
        make_signoff, tmp_path, database_url, slack, ledger):
    env = policy_env(tmp_path, """\
rules:
  - name: quick
    tool: issue_refund
    approvers: [U0LEAD]
    ttl: 2m
""")
    first, second = make_signoff(database_url, **env), make_signoff(database_url, **env)  # two replicas
    second.script.decisions = [tool_call("issue_refund", order_id="42", amount_usd=120.0), final("Refunded.")]
    run = refund_run(first, 120.0)
    expired_card = first.approval_message()
    first.clock.advance(minutes=3)
    second.clock.advance(minutes=3)
    first.runner.expire_due()
    first.settle()
    assert first.run(run.run_id).status == "expired"
    [notice] = [m for m in slack.messages_in(slack.dm_channel("U0ASKER")) if REQUEST_AGAIN_ACTION in buttons(m)]
    assert "Nobody decided `issue_refund`" in card_text(notice) and "can request it again" in card_text(notice)

    assert first.click(notice, REQUEST_AGAIN_ACTION, "U0LEAD").status == 200  # not theirs to ask
    assert "only the person who started this run" in first.ephemerals()[-1]
    assert first.run(run.run_id).status == "expired"

    body = first.click_body(notice, REQUEST_AGAIN_ACTION, "U0ASKER")
    assert first.post(body, FORM).status == 200
    assert second.post(body, FORM).status == 200  # the same click, delivered again to the other replica
    second.settle()
    first.settle()
    assert "Already requested again by <@U0ASKER>" in second.ephemerals()[-1]
    assert first.run(run.run_id).status == "awaiting_approval"
    fresh = first.approval_message()
    assert (fresh["channel"], fresh["ts"]) != (expired_card["channel"], expired_card["ts"])  # a new card
    pending = first.runner.store.list_approvals(status="pending", run_id=run.run_id)
    assert len(pending) == 1 and pending[0].key == f"{run.run_id}:1"
    again = slack.message(notice["channel"], notice["ts"])
    assert REQUEST_AGAIN_ACTION not in buttons(again) and "Requested again by <@U0ASKER>" in card_text(again)

    assert second.click(fresh, APPROVE_ACTION, "U0LEAD").status == 200
    second.settle()
    assert second.run(run.run_id).status == "done"
    assert dict(ledger.calls) == {f"{run.run_id}:1": 1}  # ran once, with the key it was first asked with
    [asked_again] = events(first, run.run_id, "requested_again")
    assert asked_again["by"] == "U0ASKER"


# -- the edit form, pure ---------------------------------------------------------------------------------


NOTICE = NoticeLedger().tools()["send_notice"]


def notice_approval(**args: Any) -> ApprovalRecord:
    return make_approval(tool="send_notice", args=NOTICE.validate({**PROPOSED, **args}))


def as_submitted(fields, **typed: Any) -> dict[str, Any]:
    """The state Slack sends for inputs left as they were filled in, but for `typed` (raw input text)."""
    values: dict[str, Any] = {}
    for index, field in enumerate(fields):
        if field.kind == "boolean":
            chosen = typed.get(field.name, json.dumps(field.value))
            values[edit_block(index)] = {EDIT_INPUT: {"selected_option": {"value": chosen}}}
        else:
            text = None if field.secret else field.value if field.kind == "text" else json.dumps(field.value)
            values[edit_block(index)] = {EDIT_INPUT: {"value": typed.get(field.name, text)}}
    return values


def test_the_form_reads_back_the_call_it_was_filled_with_keeping_the_secret_it_never_showed():
    approval, display = notice_approval(tags=["vip"]), ToolDisplay.of(NOTICE)
    fields = edit_fields(approval, NOTICE, display)
    assert fields is not None
    assert [(f.name, f.kind, f.secret) for f in fields] == [
        ("to", "text", False), ("subject", "text", False), ("urgent", "boolean", False),
        ("copies", "integer", False), ("tags", "json", False), ("api_key", "text", True)]
    assert read_edit(fields, as_submitted(fields)) == approval.args
    assert read_edit(fields, as_submitted(fields, copies="3", tags='["vip", "refund"]', urgent="true")) == {
        **approval.args, "copies": 3, "tags": ["vip", "refund"], "urgent": True}
    assert read_edit(fields, as_submitted(fields, api_key="sk-new")) == {**approval.args, "api_key": "sk-new"}
    assert read_edit(fields, as_submitted(fields, copies="three")) == FieldErrors({edit_block(3): "Not a number."})


def test_refusals_stand_beside_the_arguments_they_name_and_anything_else_beside_the_first():
    fields = edit_fields(notice_approval(), NOTICE, ToolDisplay.of(NOTICE))
    assert fields is not None
    refusal = "invalid arguments: copies: Input should be less than or equal to 5; to: String should match pattern"
    assert edit_errors(fields, refusal) == FieldErrors({edit_block(3): "Input should be less than or equal to 5",
                                                        edit_block(0): "String should match pattern"})
    assert edit_errors(fields, "the approval policy refuses the edited call") == FieldErrors(
        {edit_block(0): "The approval policy refuses the edited call"})


def test_edit_is_offered_only_where_slacks_inputs_hold_every_value():
    display = ToolDisplay.of(NOTICE)
    long = notice_approval(subject="x" * 3001)
    assert EDIT_ACTION not in buttons({"blocks": approval_message(make_run(), long, display=display).blocks})
    assert edit_fields(long, NOTICE, display) is None
    secret = notice_approval(api_key="k" * 5000)  # never filled in, so its size does not matter
    message = approval_message(make_run(), secret, display=display)
    assert buttons({"blocks": message.blocks})[-1] == EDIT_ACTION and block_kit_problems(message.blocks) == []
    decided = make_approval(tool="send_notice", args=secret.args, status="denied", decided_by="U0LEAD")
    assert EDIT_ACTION not in buttons({"blocks": approval_message(make_run(), decided, display=display).blocks})


def test_a_tool_that_declares_no_arguments_is_edited_as_one_json_object():
    loose = Tool("loose", lambda args, key: None, side_effect=True)
    approval = make_approval(tool="loose", args={"a": 1, "b": [2]})
    [field] = edit_fields(approval, loose, ToolDisplay.of(loose)) or []
    assert (field.name, field.kind) == (None, "json")
    assert read_edit([field], {edit_block(0): {EDIT_INPUT: {"value": '{"a": 2}'}}}) == {"a": 2}
    assert read_edit([field], {edit_block(0): {EDIT_INPUT: {"value": "[1]"}}}) == FieldErrors(
        {edit_block(0): "The arguments must be one JSON object, {...}."})
