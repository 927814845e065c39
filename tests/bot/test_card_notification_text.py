"""An approval card's notification line (its `text`, what a phone or the sidebar shows alone) says
what would run, in short, and who asked: the tool, its first arguments, the requester."""

from __future__ import annotations

from bot_fakes import HOSTILE, make_approval, make_run, tool_call

from signoff.bot.slack.messages import approval_message


def test_the_card_posted_for_a_call_says_the_tool_its_arguments_and_who_asked(signoff, slack):
    signoff.script.decisions = [tool_call("issue_refund", order_id="42", amount_usd=19.99)]
    signoff.command("Refund order 42", user="U0ASKER")
    run = signoff.only_run()

    card = signoff.approval_message()

    [approval] = signoff.runner.store.list_approvals()
    assert card["text"] == (f'Approval needed: issue_refund (order_id: "42", amount_usd: 19.99), requested by '
                            f"<@U0ASKER> in run {run.run_id}; expires {approval.expires_at:%H:%M} UTC")


def test_secrets_are_redacted_and_only_the_first_arguments_are_summed_up():
    approval = make_approval(tool="reset_login", args={"user": "ada", "password": "hunter2", "note": "a", "x": 1})

    text = approval_message(make_run(), approval).text

    assert "hunter2" not in text
    assert text == ('Approval needed: reset_login (user: "ada", password: [redacted: 7 chars, #4ddbb67b], 2 more), '
                    "requested by <@U0ASKER> in run run-0123456789; expires 12:30 UTC")


def test_untrusted_words_are_escaped_and_the_requester_stays_a_mention():
    approval = make_approval(args={"order_id": HOSTILE})

    text = approval_message(make_run(), approval).text

    assert "<!channel>" not in text and "&lt;!channel&gt;" in text
    assert "requested by <@U0ASKER>" in text


def test_a_card_of_several_calls_says_how_many_wait_which_tools_and_who_asked(signoff, slack):
    signoff.script.decisions = [{"calls": [{**tool_call("issue_refund", order_id="42", amount_usd=20.0),
                                            "call_id": "c-20"},
                                           {**tool_call("issue_refund", order_id="43", amount_usd=30.0),
                                            "call_id": "c-30"}]}]
    signoff.command("Refund orders 42 and 43", user="U0ASKER")
    run = signoff.only_run()

    card = signoff.approval_message()

    assert card["text"] == f"Approval needed: 2 of 2 calls (issue_refund), requested by <@U0ASKER> in run {run.run_id}"
