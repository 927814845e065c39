"""The approval flow end to end: signed HTTP requests -> the real Bolt app -> FakeSlack and SQLite."""

from __future__ import annotations

import json
import threading

from bot_fakes import HOSTILE, final, tool_call
from slack_harness import buttons

from signoff.bot.slack.blocks import APPROVE_ACTION, DENY_ACTION, EDIT_ACTION, VIEW_ARGS_ACTION


def refund_script(signoff, amount=19.99):
    signoff.script.decisions = [
        tool_call("lookup_order", order_id="42"),
        tool_call("issue_refund", order_id="42", amount_usd=amount),
        final("Refunded order 42."),
    ]


def start(signoff, goal="Refund order 42", user="U0ASKER"):
    response = signoff.command(goal, user=user)
    assert response.status == 200, response.text
    return response


def test_slash_command_acks_with_run_id_and_posts_run_and_approval(signoff, slack, ledger):
    refund_script(signoff)
    response = start(signoff)
    run = signoff.only_run()
    reply = response.json()
    assert run.run_id in reply["text"] and "Budget" in json.dumps(reply["blocks"])
    assert response.elapsed < 3
    assert run.status == "awaiting_approval" and run.requester == "U0ASKER"
    assert run.origin["channel"] == "C0RUNS" and run.origin["ts"]

    announcement = slack.message("C0RUNS", run.origin["ts"])
    assert "Refund order 42" in json.dumps(announcement["blocks"]) and "<@U0ASKER>" in json.dumps(announcement)
    thread = slack.thread("C0RUNS", run.origin["ts"])
    assert any("lookup_order" in m["text"] for m in thread)  # the read-only step, reported in the thread

    card = signoff.approval_message()
    assert buttons(card) == [APPROVE_ACTION, DENY_ACTION, EDIT_ACTION]
    assert f"{run.run_id}:2" in json.dumps(card["blocks"])
    assert ledger.total == 0


def test_approve_executes_exactly_once_and_finishes_in_the_thread(signoff, slack, ledger):
    refund_script(signoff)
    start(signoff)
    run = signoff.only_run()
    response = signoff.click(signoff.approval_message(), APPROVE_ACTION, user="U0LEAD")
    assert response.status == 200

    assert ledger.calls == {f"{run.run_id}:2": 1}
    run = signoff.run(run.run_id)
    assert run.status == "done" and run.answer == "Refunded order 42."
    card = signoff.approval_message()
    assert buttons(card) == []
    assert "Approved* by <@U0LEAD>" in json.dumps(card["blocks"]) and card["text"].startswith("Approved by <@U0LEAD>")
    thread = [m["text"] for m in slack.thread("C0RUNS", run.origin["ts"])]
    assert any("issue_refund returned" in t for t in thread)
    assert thread[-1] == "Answer: Refunded order 42."
    assert "done" in slack.message("C0RUNS", run.origin["ts"])["text"]
    approval = signoff.runner.store.approval_for_key(f"{run.run_id}:2")
    assert (approval.status, approval.decided_by) == ("consumed", "U0LEAD")


def test_an_approved_tool_runs_without_waiting_for_slack_to_show_the_card_decided(signoff, slack, ledger):
    refund_script(signoff)
    start(signoff)
    run = signoff.only_run()
    card = signoff.approval_message()
    hung = slack.hold("chat.update")  # Slack stops answering message updates
    response = signoff.click(card, APPROVE_ACTION, user="U0LEAD", settle=False)
    assert response.status == 200
    slack.wait_for(lambda: ledger.calls == {f"{run.run_id}:2": 1}, timeout=30)
    assert "Approved" not in json.dumps(slack.message(card["channel"], card["ts"])["blocks"])
    hung.set()
    signoff.settle()
    assert ledger.calls == {f"{run.run_id}:2": 1}
    assert "Approved* by <@U0LEAD>" in json.dumps(signoff.approval_message()["blocks"])
    assert signoff.run(run.run_id).status == "done"


def test_deny_with_reason_reaches_the_model(signoff, slack, ledger):
    refund_script(signoff)
    start(signoff)
    card = signoff.approval_message()
    signoff.click(card, DENY_ACTION, user="U0LEAD")
    modal = slack.last("views.open")["view"]
    assert modal["title"]["text"].startswith("Deny")
    assert ledger.total == 0 and signoff.only_run().status == "awaiting_approval"  # opening the form decides nothing

    signoff.submit_deny(modal, "U0LEAD", "wrong customer <!channel>")
    run = signoff.only_run()
    assert ledger.total == 0
    observation = [e for e in run.state["history"] if e["role"] == "tool"][-1]
    assert observation["error"] == "denied by human: wrong customer <!channel>"
    assert any(e[-1]["role"] == "tool" and "wrong customer" in e[-1].get("error", "")
               for e in signoff.script.histories)
    assert run.status == "done"
    card = signoff.approval_message()
    text = json.dumps(card["blocks"])
    assert "Denied* by <@U0LEAD>" in text and "wrong customer &lt;!channel&gt;" in text
    assert buttons(card) == []


def test_deny_without_reason(signoff, slack, ledger):
    refund_script(signoff)
    start(signoff)
    signoff.click(signoff.approval_message(), DENY_ACTION, user="U0LEAD")
    signoff.submit_deny(slack.last("views.open")["view"], "U0LEAD", None)
    observation = [e for e in signoff.only_run().state["history"] if e["role"] == "tool"][-1]
    assert observation["error"] == "denied by human: no reason given"


def test_requester_cannot_approve_own_run(signoff, slack, ledger):
    refund_script(signoff)
    start(signoff, user="U0ASKER")
    signoff.click(signoff.approval_message(), APPROVE_ACTION, user="U0ASKER")
    assert ledger.total == 0
    assert signoff.only_run().status == "awaiting_approval"
    assert buttons(signoff.approval_message()) == [APPROVE_ACTION, DENY_ACTION, EDIT_ACTION]
    assert any("someone else has to approve" in t for t in signoff.ephemerals())


def test_requester_cannot_even_open_the_deny_form_on_own_run(signoff, slack, ledger):
    refund_script(signoff)
    start(signoff, user="U0ASKER")
    signoff.click(signoff.approval_message(), DENY_ACTION, user="U0ASKER")
    assert slack.attempts("views.open") == 0
    assert any("someone else has to approve" in t for t in signoff.ephemerals())


def test_self_approval_when_allowed(make_signoff, ledger):
    signoff = make_signoff(SIGNOFF_ALLOW_SELF_APPROVAL="true")
    refund_script(signoff)
    start(signoff, user="U0ASKER")
    signoff.click(signoff.approval_message(), APPROVE_ACTION, user="U0ASKER")
    assert ledger.total == 1 and signoff.only_run().status == "done"


def test_only_listed_approvers_and_group_members_may_approve(make_signoff, slack, ledger):
    signoff = make_signoff(SIGNOFF_APPROVERS="U0LEAD,S0ONCALL")
    refund_script(signoff)
    start(signoff)
    card = signoff.approval_message()
    signoff.click(card, APPROVE_ACTION, user="U0INTERN")
    assert ledger.total == 0 and signoff.only_run().status == "awaiting_approval"
    assert any("not one of this workspace's Signoff approvers" in t for t in signoff.ephemerals())
    assert buttons(signoff.approval_message()) == [APPROVE_ACTION, DENY_ACTION, EDIT_ACTION]

    signoff.click(card, APPROVE_ACTION, user="U0ONCALL2")  # a member of the S0ONCALL user group
    assert ledger.total == 1 and signoff.only_run().status == "done"
    assert slack.calls_to("usergroups.users.list") == [{"usergroup": "S0ONCALL"}]


def test_double_click_decides_once_and_tells_who_decided(signoff, slack, ledger):
    refund_script(signoff)
    start(signoff)
    card = signoff.approval_message()
    signoff.click(card, APPROVE_ACTION, user="U0LEAD")
    signoff.click(card, APPROVE_ACTION, user="U0LEAD")
    assert ledger.total == 1
    assert any(t.startswith("Already approved by <@U0LEAD>") for t in signoff.ephemerals())


def test_two_approvers_racing_give_one_decision_and_one_execution(make_signoff, database_url, slack, ledger):
    signoff = make_signoff(database_url)
    refund_script(signoff)
    start(signoff)
    card = signoff.approval_message()
    deciders = [("U0LEAD", APPROVE_ACTION), ("U0OPS", APPROVE_ACTION), ("U0SRE", DENY_ACTION),
                ("U0CFO", APPROVE_ACTION)]
    bodies = [signoff.click_body(card, action, user) for user, action in deciders]
    barrier = threading.Barrier(len(bodies))
    results = []

    def send(body):
        barrier.wait()
        results.append(signoff.post(body, "application/x-www-form-urlencoded", settle=False))

    threads = [threading.Thread(target=send, args=(b,)) for b in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    signoff.settle()
    assert [r.status for r in results] == [200] * 4
    run = signoff.only_run()
    approval = signoff.runner.store.approval_for_key(f"{run.run_id}:2")
    winner = approval.decided_by
    assert winner in {u for u, a in deciders if a == APPROVE_ACTION}  # Deny only opens a form
    assert ledger.total == 1 and approval.status == "consumed"
    losers = [t for t in signoff.ephemerals() if t.startswith("Already")]
    forms = slack.attempts("views.open")  # a Deny that came first opened its form; a later one was told
    assert len(losers) + forms == 3
    assert all(t.startswith(f"Already approved by <@{winner}>") for t in losers)
    events = [e for e in signoff.runner.timeline(run.run_id) if e["type"] == "approval_recorded"]
    assert len(events) == 1


def test_replayed_click_has_no_second_effect(signoff, ledger):
    refund_script(signoff)
    start(signoff)
    body = signoff.click_body(signoff.approval_message(), APPROVE_ACTION, user="U0LEAD")
    first = signoff.post(body, "application/x-www-form-urlencoded")
    again = signoff.post(body, "application/x-www-form-urlencoded")
    assert (first.status, again.status) == (200, 200)
    assert ledger.total == 1


def test_replayed_slash_command_starts_one_run(signoff, ledger):
    refund_script(signoff)
    body = signoff.command_body("Refund order 42")
    first = signoff.post(body, "application/x-www-form-urlencoded")
    again = signoff.post(body, "application/x-www-form-urlencoded")
    run = signoff.only_run()
    assert run.run_id in first.json()["text"]
    assert run.run_id in again.json()["text"] and "Already started" in again.json()["text"]


def test_forged_signature_is_refused_with_401(signoff):
    refund_script(signoff)
    body = signoff.command_body("Refund order 42")
    response = signoff.post(body, "application/x-www-form-urlencoded", signature="v0=" + "0" * 64)
    assert response.status == 401
    assert signoff.runner.store.list_runs() == []


def test_body_changed_after_signing_is_refused(signoff):
    body = signoff.command_body("Refund order 42")
    ts = str(int(__import__("time").time()))
    signature = signoff.verifier.generate_signature(timestamp=ts, body=body)
    response = signoff.post(body.replace("42", "43"), "application/x-www-form-urlencoded", timestamp=int(ts),
                            signature=signature)
    assert response.status == 401 and signoff.runner.store.list_runs() == []


def test_expired_timestamp_is_refused_with_401(signoff):
    import time

    body = signoff.command_body("Refund order 42")
    response = signoff.post(body, "application/x-www-form-urlencoded", timestamp=int(time.time()) - 6 * 60)
    assert response.status == 401
    assert signoff.runner.store.list_runs() == []


def test_click_with_tampered_digest_is_refused(signoff, slack, ledger):
    refund_script(signoff)
    start(signoff)
    card = signoff.approval_message()
    approve = next(e for b in card["blocks"] if b["type"] == "actions" for e in b["elements"])
    approval_id = approve["value"].split(":")[0]
    approve["value"] = f"{approval_id}:{'0' * 64}"
    signoff.click(card, APPROVE_ACTION, user="U0LEAD")
    assert ledger.total == 0 and signoff.only_run().status == "awaiting_approval"
    assert any("no longer matches" in t for t in signoff.ephemerals())


def test_click_on_unknown_approval_is_refused(signoff, slack, ledger):
    refund_script(signoff)
    start(signoff)
    card = signoff.approval_message()
    approve = next(e for b in card["blocks"] if b["type"] == "actions" for e in b["elements"])
    approve["value"] = "apr_doesnotexist:" + approve["value"].split(":")[1]
    signoff.click(card, APPROVE_ACTION, user="U0LEAD")
    assert ledger.total == 0
    assert any("no longer exists" in t for t in signoff.ephemerals())


def test_ack_is_fast_when_slack_is_slow(signoff, slack, ledger):
    refund_script(signoff)
    slack.slow("chat.postMessage", 1.5, times=1)  # the run message, posted by a worker
    response = signoff.command("Refund order 42", settle=False)
    assert response.status == 200 and response.elapsed < 1.0
    signoff.settle()
    slack.slow("chat.update", 1.5, times=1)  # the decided approval message, updated after the ack
    response = signoff.click(signoff.approval_message(), APPROVE_ACTION, user="U0LEAD", settle=False)
    assert response.status == 200 and response.elapsed < 1.0
    signoff.settle()
    assert ledger.total == 1


def test_hostile_huge_goal_and_arguments_reach_slack_within_block_kit_limits(signoff, slack, ledger):
    goal = (HOSTILE * 40)[:3990]
    huge = {"order_id": HOSTILE * 300, "amount_usd": 1.0}
    signoff.script.decisions = [tool_call("issue_refund", **huge, api_key="sk-live-secret"),  # undeclared: refused
                                tool_call("issue_refund", **huge), final(HOSTILE * 100)]
    signoff.command(goal)
    # Too long for the card, so Approve is in the full-arguments modal.
    signoff.click(signoff.approval_message(), VIEW_ARGS_ACTION, user="U0LEAD")
    signoff.click(slack.modal(), APPROVE_ACTION, user="U0LEAD")
    run = signoff.only_run()
    assert run.status == "done" and ledger.total == 1 and ledger.args == [huge]
    [refused] = [e for e in run.state["history"] if e.get("error_kind") == "invalid_args"]
    assert "api_key: Extra inputs are not permitted" in refused["error"]
    chat = [c for c in slack.calls if c.method.startswith(("chat.", "views."))]
    assert chat and all(c.ok for c in chat), [c.response for c in chat if not c.ok]
    sent = json.dumps([c.body for c in chat])
    assert "<!channel>" not in sent and "<!here>" not in sent and "<@U0BOSS>" not in sent
    assert "<https://evil.example" not in sent
    assert "sk-live-secret" not in sent


def test_goal_over_the_limit_is_refused_in_the_ack(signoff):
    reply = signoff.command("x" * 5000).json()
    assert "Could not start a run" in reply["text"] and "4000" in reply["text"]
    assert signoff.runner.store.list_runs() == []


def test_a_click_that_fails_on_the_database_tells_the_clicker_and_executes_nothing(signoff, slack, ledger):
    refund_script(signoff)
    start(signoff)
    card = signoff.approval_message()
    with signoff.runner.store.engine.begin() as conn:  # the database loses the table mid-flight
        conn.exec_driver_sql("ALTER TABLE approvals RENAME TO approvals_gone")
    for _ in range(5):  # Bolt used to lose the ack of a listener that failed just after it (a 404 after 3 s)
        assert signoff.click(card, APPROVE_ACTION, user="U0LEAD").status == 200
    signoff.settle()
    assert any("could not finish handling that" in text for text in signoff.ephemerals("U0LEAD"))
    assert ledger.total == 0
    with signoff.runner.store.engine.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE approvals_gone RENAME TO approvals")
    signoff.click(card, APPROVE_ACTION, user="U0LEAD")  # clicking again works once the database is back
    signoff.settle()
    assert ledger.total == 1
