"""Expiry, budget exhaustion, failures, reconciliation, cancellation, /signoff subcommands and App Home."""

from __future__ import annotations

import json
import logging

from bot_fakes import final, tool_call
from slack_harness import buttons, find_button
from sqlalchemy import text as sql

from signoff.bot.slack import blocks, messages
from signoff.bot.slack.blocks import (
    APPROVE_ACTION,
    CLOSE_ACTION,
    DENY_ACTION,
    EDIT_ACTION,
    EXTEND_ACTION,
    RETRY_ACTION,
)
from signoff.bot.slack.scheduler import RECOVER_JOB, JobFailures, expire_approvals, recover_runs
from signoff.runtime import approval_commands
from signoff.runtime.errors import ModelUnavailable


def propose_refund(signoff, user="U0ASKER"):
    signoff.script.decisions = [tool_call("issue_refund", order_id="42", amount_usd=5.0), final("Refunded.")]
    signoff.command("Refund order 42", user=user)
    return signoff.only_run()


def dms_to(slack, user):
    return slack.messages_in(slack.dm_channel(user))


def test_sweep_expires_approval_updates_message_ends_run_and_tells_requester(signoff, slack, ledger):
    run = propose_refund(signoff)
    assert expire_approvals(signoff.runner, signoff.service.workers) == 0
    signoff.clock.advance(minutes=31)
    assert expire_approvals(signoff.runner, signoff.service.workers) == 1
    signoff.settle()

    card = signoff.approval_message()
    assert buttons(card) == [] and "Expired, not executed" in json.dumps(card["blocks"])
    assert signoff.run(run.run_id).status == "expired"
    assert any("expired" in c["text"] and run.run_id in c["text"] for c in dms_to(slack, "U0ASKER"))
    thread = slack.thread("C0RUNS", run.origin["ts"])
    assert any("stopped (expired)" in m["text"] for m in thread)
    assert ledger.total == 0
    assert expire_approvals(signoff.runner, signoff.service.workers) == 0  # a second replica's sweep finds nothing left


def test_click_on_expired_approval_before_the_sweep_is_refused(signoff, slack, ledger):
    run = propose_refund(signoff)
    signoff.clock.advance(minutes=31)
    signoff.click(signoff.approval_message(), APPROVE_ACTION, user="U0LEAD")
    assert ledger.total == 0
    assert any("expired" in t and "nothing was executed" in t for t in signoff.ephemerals())
    assert signoff.run(run.run_id).status == "expired"
    assert buttons(signoff.approval_message()) == []
    signoff.click(signoff.approval_messages()[-1] | {"blocks": card_with_buttons(signoff)}, APPROVE_ACTION,
                  user="U0OPS")  # a stale copy of the buttons, clicked again
    assert ledger.total == 0
    assert len([m for m in dms_to(slack, "U0ASKER") if "expired" in m["text"]]) == 1


def card_with_buttons(signoff):
    approval = signoff.runner.store.list_approvals()[0]
    run = signoff.run(approval.run_id)
    return messages.approval_message(run, approval).blocks


def test_deny_on_expired_approval_opens_no_form(signoff, slack, ledger):
    propose_refund(signoff)
    signoff.clock.advance(minutes=31)
    signoff.click(signoff.approval_message(), DENY_ACTION, user="U0LEAD")
    assert slack.attempts("views.open") == 0
    assert any("expired" in t for t in signoff.ephemerals())


def budget_run(make_signoff):
    signoff = make_signoff(SIGNOFF_MAX_STEPS="2", SIGNOFF_EXTEND_STEPS="3")
    signoff.script.decisions = [tool_call("lookup_order", order_id="42"), tool_call("lookup_order", order_id="43"),
                                final("Both orders are fine.")]
    signoff.command("Check orders 42 and 43")
    return signoff, signoff.only_run()


def test_budget_exhaustion_dms_requester_and_posts_extend_in_thread(make_signoff, slack):
    signoff, run = budget_run(make_signoff)
    assert run.status == "budget_exhausted"
    dm = dms_to(slack, "U0ASKER")[-1]
    assert buttons(dm) == [EXTEND_ACTION, CLOSE_ACTION]
    text = json.dumps(dm["blocks"])
    assert "*Out of budget:* The run used all 2 of its steps." in text and "steps 2/2" in text
    assert "step 2: called lookup_order" in text
    notice = slack.thread("C0RUNS", run.origin["ts"])[-1]
    assert buttons(notice) == [EXTEND_ACTION, CLOSE_ACTION]
    assert "budget exhausted" in json.dumps(slack.message("C0RUNS", run.origin["ts"])["blocks"])


def test_extend_by_an_approver_continues_the_run(make_signoff, slack):
    signoff, run = budget_run(make_signoff)
    notice = slack.thread("C0RUNS", run.origin["ts"])[-1]
    signoff.click(notice, EXTEND_ACTION, user="U0LEAD")
    run = signoff.run(run.run_id)
    assert run.status == "done" and run.answer == "Both orders are fine."
    assert run.budget["max_steps"] == 5
    updated = slack.message("C0RUNS", notice["ts"])
    assert buttons(updated) == [] and "Extended by <@U0LEAD>" in json.dumps(updated["blocks"])


def test_extend_by_the_requester_is_refused(make_signoff, slack):
    signoff, run = budget_run(make_signoff)
    signoff.click(dms_to(slack, "U0ASKER")[-1], EXTEND_ACTION, user="U0ASKER")
    assert signoff.run(run.run_id).status == "budget_exhausted"
    assert any("someone else" in t for t in signoff.ephemerals())


def test_replayed_extend_extends_once(make_signoff, slack):
    signoff, run = budget_run(make_signoff)
    body = signoff.click_body(slack.thread("C0RUNS", run.origin["ts"])[-1], EXTEND_ACTION, user="U0LEAD")
    signoff.post(body, "application/x-www-form-urlencoded")
    signoff.post(body, "application/x-www-form-urlencoded")
    assert signoff.run(run.run_id).budget["max_steps"] == 5
    assert any(t.startswith("Already extended by <@U0LEAD>") and t.endswith("nothing changed.")
               for t in signoff.ephemerals())


def test_close_ends_an_exhausted_run(make_signoff, slack):
    signoff, run = budget_run(make_signoff)
    signoff.click(slack.thread("C0RUNS", run.origin["ts"])[-1], CLOSE_ACTION, user="U0ASKER")
    assert signoff.run(run.run_id).status == "cancelled"


def test_failed_run_offers_retry_and_retry_continues(signoff, slack):
    calls = []

    def flaky(history):
        calls.append(len(history))
        if len(calls) == 1:
            raise ModelUnavailable("503 after 3 retries")
        return {"final": "Recovered."}

    signoff.script = flaky
    signoff.command("Summarise the refund policy")
    run = signoff.only_run()
    assert run.status == "failed"
    notice = slack.thread("C0RUNS", run.origin["ts"])[-1]
    assert buttons(notice) == [RETRY_ACTION, CLOSE_ACTION]
    assert "model unavailable" in json.dumps(notice["blocks"])
    assert buttons(dms_to(slack, "U0ASKER")[-1]) == [RETRY_ACTION, CLOSE_ACTION]
    signoff.click(notice, RETRY_ACTION, user="U0ASKER")  # the requester may retry their own run
    assert signoff.run(run.run_id).status == "done"


def test_unknown_outcome_asks_for_reconciliation_and_mark_done_continues(signoff, slack, ledger):
    signoff.script.decisions = [tool_call("slow_refund", order_id="42", amount_usd=5.0), final("Refund sent.")]
    signoff.command("Refund order 42")
    signoff.click(signoff.approval_message(), APPROVE_ACTION, user="U0LEAD")
    run = signoff.only_run()
    assert run.status == "needs_reconciliation"
    notice = slack.thread("C0RUNS", run.origin["ts"])[-1]
    assert buttons(notice) == [blocks.RECONCILE_DONE_ACTION, blocks.RECONCILE_RETRY_ACTION,
                               blocks.RECONCILE_ABORT_ACTION]
    assert "may or may not have taken effect" in json.dumps(notice["blocks"])
    signoff.click(notice, blocks.RECONCILE_DONE_ACTION, user="U0LEAD")
    run = signoff.run(run.run_id)
    assert run.status == "done" and ledger.total == 1


def test_slash_cancel_closes_the_pending_approval_and_its_buttons(signoff, slack, ledger):
    run = propose_refund(signoff)
    reply = signoff.command(f"cancel {run.run_id}").json()
    assert "Cancelling run" in reply["text"]
    assert signoff.run(run.run_id).status == "cancelled"
    card = signoff.approval_message()
    assert buttons(card) == [] and "Cancelled, not executed" in json.dumps(card["blocks"])
    assert any("stopped (cancelled)" in m["text"] for m in slack.thread("C0RUNS", run.origin["ts"]))
    assert ledger.total == 0


def test_late_click_after_cancel_is_refused(signoff, slack, ledger):
    run = propose_refund(signoff)
    card = signoff.approval_message()
    signoff.command(f"cancel {run.run_id}")
    signoff.click(card, APPROVE_ACTION, user="U0LEAD")
    assert ledger.total == 0
    assert any("cancelled with its run" in t for t in signoff.ephemerals())


def test_status_list_and_help(signoff, slack):
    run = propose_refund(signoff)
    status = signoff.command(f"status {run.run_id}").json()
    assert "awaiting approval" in status["blocks"][0]["text"]["text"]
    assert "waiting for approval of `issue_refund`" in status["blocks"][0]["text"]["text"]
    assert "There is no run" in signoff.command("status run-nope").json()["text"]

    mine = json.dumps(signoff.command("list", user="U0ASKER").json()["blocks"])
    assert run.run_id in mine and "Waiting on you*\\nnothing" in mine  # the requester cannot approve it
    theirs = json.dumps(signoff.command("list", user="U0LEAD").json()["blocks"])
    assert "`issue_refund` for <@U0ASKER>" in theirs

    for text in ("", "help"):
        assert "/signoff <goal>" in signoff.command(text).json()["blocks"][0]["text"]["text"]


def test_a_run_with_a_damaged_state_is_listed_and_hides_no_other(signoff, caplog):
    damaged = propose_refund(signoff)
    with signoff.engine.begin() as conn:  # as a bad hand edit would leave it
        conn.execute(sql("UPDATE runs SET state = '{\"steps\": 1, \"stat' WHERE run_id = :id"),
                     {"id": damaged.run_id})
    signoff.script.decisions = [final("Nothing to do.")]
    signoff.command("Check order 43", user="U0ASKER")

    listed = json.dumps(signoff.command("list", user="U0ASKER").json()["blocks"])
    assert damaged.run_id in listed and "stored state cannot be read" in listed
    healthy = [r for r in signoff.store.list_runs() if r.run_id != damaged.run_id]
    assert [r.status for r in healthy] == ["done"] and healthy[0].run_id in listed
    assert "There is no run" not in signoff.command(f"status {healthy[0].run_id}").json()["text"]

    with caplog.at_level(logging.ERROR, logger="signoff.bot"):  # what recovery's hand-over to a worker logs
        signoff.service.workers.submit(damaged.run_id)
        signoff.settle()
    [logged] = [r for r in caplog.records if damaged.run_id in r.getMessage()]
    assert "cannot be executed" in logged.getMessage() and "not valid JSON" in logged.getMessage()
    assert logged.exc_info is None, "an operator needs the reason, not a traceback on every pass"


def test_app_home_lists_waiting_approvals_with_working_buttons(signoff, slack, ledger):
    run = propose_refund(signoff)
    signoff.home_opened("U0LEAD")
    home = slack.views["U0LEAD"]
    assert buttons(home) == [APPROVE_ACTION, DENY_ACTION, EDIT_ACTION]
    assert find_button(home, APPROVE_ACTION)["value"] == find_button(signoff.approval_message(), APPROVE_ACTION)["value"]
    signoff.home_opened("U0ASKER")
    assert buttons(slack.views["U0ASKER"]) == []  # the requester's own run waits on someone else
    assert run.run_id in json.dumps(slack.views["U0ASKER"])

    signoff.click(home, APPROVE_ACTION, user="U0LEAD")
    assert ledger.total == 1 and signoff.run(run.run_id).status == "done"
    assert buttons(slack.views["U0LEAD"]) == []  # republished after the decision
    assert buttons(signoff.approval_message()) == []


def test_recovery_job_continues_a_decided_run_nobody_executed(signoff, slack, ledger):
    run = propose_refund(signoff)
    approval = signoff.runner.pending_approval(run.run_id)
    # A decision recorded by a replica that died before handing the run to its workers:
    approval_commands.decide(signoff.runner.store, approval.approval_id, approved=True, user="U0LEAD", digest=approval.digest)
    signoff.clock.advance(seconds=61)
    assert recover_runs(signoff.runner, signoff.service.workers) == [run.run_id]
    signoff.settle()
    assert ledger.total == 1 and signoff.run(run.run_id).status == "done"
    assert recover_runs(signoff.runner, signoff.service.workers) == []


def test_a_failing_job_logs_one_traceback_then_one_line_per_failure_until_it_works(signoff, caplog):
    failures = JobFailures(RECOVER_JOB)
    with signoff.engine.begin() as conn:  # the database loses a table: every pass fails the same way
        conn.exec_driver_sql("ALTER TABLE approvals RENAME TO approvals_gone")
    with caplog.at_level(logging.INFO, logger="signoff.bot.slack.scheduler"):
        for _ in range(3):
            assert recover_runs(signoff.runner, signoff.service.workers, failures) == []
        with signoff.engine.begin() as conn:
            conn.exec_driver_sql("ALTER TABLE approvals_gone RENAME TO approvals")
        recover_runs(signoff.runner, signoff.service.workers, failures)

    records = [r for r in caplog.records if r.name == "signoff.bot.slack.scheduler"]
    assert [r.exc_info is not None for r in records] == [True, False, False, False]
    assert records[1].getMessage().startswith("recover-runs failed again (2 in a row): OperationalError: ")
    assert "\n" not in records[2].getMessage()
    assert records[3].getMessage() == "recover-runs works again after 3 failure(s)"
