"""Stopped-run buttons are bound to the run as shown: replays, second presses and old copies change
nothing and say who acted; cancelling says what is true about a call already running."""

from __future__ import annotations

import json
import threading
from typing import Any

from bot_fakes import Ledger, RefundArgs, final, tool_call
from slack_harness import Signoff, buttons, find_button

from signoff.bot.slack import blocks
from signoff.bot.slack.blocks import APPROVE_ACTION, CLOSE_ACTION, EXTEND_ACTION, RETRY_ACTION
from signoff.runtime.errors import ModelUnavailable
from signoff.tools.base import Tool

FORM = "application/x-www-form-urlencoded"


def lookups(count: int) -> list[dict[str, Any]]:
    return [tool_call("lookup_order", order_id=str(n)) for n in range(count)]


def model_calls(signoff: Signoff) -> int:
    return len(signoff.script.histories)


def exhausted_run(make_signoff):
    """A run that ran out of its one step, with Extend in its thread and in the requester's DM."""
    signoff = make_signoff(SIGNOFF_MAX_STEPS="1", SIGNOFF_EXTEND_STEPS="4")
    signoff.script.decisions = lookups(50)  # it would look things up for as long as it is let
    signoff.command("Check every order")
    run = signoff.only_run()
    assert run.status == "budget_exhausted" and model_calls(signoff) == 1
    return signoff, run


def test_extend_replayed_three_times_extends_once(make_signoff, slack):
    signoff, run = exhausted_run(make_signoff)
    body = signoff.click_body(slack.thread("C0RUNS", run.origin["ts"])[-1], EXTEND_ACTION, user="U0LEAD")
    for _ in range(4):  # the press, then three replays of the same signed request
        assert signoff.post(body, FORM).status == 200
    run = signoff.run(run.run_id)
    assert run.status == "budget_exhausted" and run.budget["max_steps"] == 5
    assert model_calls(signoff) == 5  # 1 + the 4 steps of one extension
    told = [t for t in signoff.ephemerals() if t.startswith("Already extended by <@U0LEAD>")]
    assert len(told) == 3 and all(t.endswith("; nothing changed.") and "<!date^" in t for t in told)


def test_a_replay_racing_the_first_press_still_extends_once(make_signoff, slack):
    signoff, run = exhausted_run(make_signoff)
    body = signoff.click_body(slack.thread("C0RUNS", run.origin["ts"])[-1], EXTEND_ACTION, user="U0LEAD")
    threads = [threading.Thread(target=signoff.post, args=(body, FORM), kwargs={"settle": False}) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    signoff.settle()
    assert signoff.run(run.run_id).budget["max_steps"] == 5 and model_calls(signoff) == 5


def test_an_old_copy_of_the_message_does_nothing_and_loses_its_buttons(make_signoff, slack):
    signoff, run = exhausted_run(make_signoff)
    in_thread = slack.thread("C0RUNS", run.origin["ts"])[-1]
    in_dm = slack.messages_in(slack.dm_channel("U0ASKER"))[-1]  # the same buttons, posted twice
    assert find_button(in_dm, EXTEND_ACTION)["value"] == find_button(in_thread, EXTEND_ACTION)["value"]
    signoff.click(in_thread, EXTEND_ACTION, user="U0LEAD")
    assert signoff.run(run.run_id).budget["max_steps"] == 5

    signoff.click(in_dm, EXTEND_ACTION, user="U0OPS")  # someone else, later, on the other copy
    signoff.click(in_dm, CLOSE_ACTION, user="U0ASKER")  # and the requester closing what was already extended
    run = signoff.run(run.run_id)
    assert run.status == "budget_exhausted" and run.budget["max_steps"] == 5 and model_calls(signoff) == 5
    assert sum(t.startswith("Already extended by <@U0LEAD>") for t in signoff.ephemerals()) == 2
    assert buttons(slack.message(in_dm["channel"], in_dm["ts"])) == []
    assert "Extended by <@U0LEAD>" in json.dumps(slack.message(in_dm["channel"], in_dm["ts"])["blocks"])
    newest = slack.thread("C0RUNS", run.origin["ts"])[-1]  # the run ran out again: this one is live
    assert buttons(newest) == [EXTEND_ACTION, CLOSE_ACTION]
    assert find_button(newest, EXTEND_ACTION)["value"] == f"{run.run_id}:{run.version}"


def test_a_button_from_an_older_signoff_without_a_version_is_refused(make_signoff, slack):
    signoff, run = exhausted_run(make_signoff)
    notice = slack.thread("C0RUNS", run.origin["ts"])[-1]
    legacy = {**notice, "blocks": [{"type": "actions", "elements": [
        {**find_button(notice, EXTEND_ACTION), "value": run.run_id}]}]}
    signoff.click(legacy, EXTEND_ACTION, user="U0LEAD")
    assert signoff.run(run.run_id).budget["max_steps"] == 1 and model_calls(signoff) == 1
    told = [m["text"] for m in slack.messages_in(slack.dm_channel("U0LEAD"))]
    assert any("this message is out of date" in t and "nothing was done" in t for t in told)


def test_retry_replayed_continues_the_failed_run_once(signoff, slack):
    def unavailable(history):
        signoff.script.histories.append(history)
        raise ModelUnavailable("503 after 3 retries")

    signoff.script = unavailable
    signoff.script.histories = []
    signoff.command("Summarise the refund policy")
    run = signoff.only_run()
    assert run.status == "failed"
    body = signoff.click_body(slack.thread("C0RUNS", run.origin["ts"])[-1], RETRY_ACTION, user="U0ASKER")
    for _ in range(4):
        signoff.post(body, FORM)
    assert signoff.run(run.run_id).status == "failed" and len(signoff.script.histories) == 2
    assert sum(t.startswith("Already retried by <@U0ASKER>") for t in signoff.ephemerals()) == 3


def test_reconcile_retry_replayed_runs_the_side_effect_once_more(signoff, slack, ledger):
    signoff.script.decisions = [tool_call("slow_refund", order_id="42", amount_usd=5.0), final("Refund sent.")]
    signoff.command("Refund order 42")
    signoff.click(signoff.approval_message(), APPROVE_ACTION, user="U0LEAD")
    run = signoff.only_run()
    assert run.status == "needs_reconciliation" and ledger.total == 1
    notice = slack.thread("C0RUNS", run.origin["ts"])[-1]
    body = signoff.click_body(notice, blocks.RECONCILE_RETRY_ACTION, user="U0LEAD")
    for _ in range(4):
        signoff.post(body, FORM)
    assert ledger.total == 2  # the first attempt and the one retry asked for; the replays ran nothing
    assert signoff.run(run.run_id).status == "needs_reconciliation"  # the retry timed out again
    assert sum("retried by <@U0LEAD>" in t and "nothing changed" in t for t in signoff.ephemerals()) == 3
    done = signoff.click_body(notice, blocks.RECONCILE_DONE_ACTION, user="U0LEAD")  # the old message, again
    signoff.post(done, FORM)
    assert signoff.run(run.run_id).status == "needs_reconciliation" and ledger.total == 2


# -- cancelling while an approved call runs ------------------------------------------------------------


class GatedLedger(Ledger):
    """The test ledger plus `gated_refund`, which runs until the test opens its gate."""

    def __init__(self) -> None:
        super().__init__()
        self.entered, self.gate = threading.Event(), threading.Event()

    def gated_refund(self, args: dict[str, Any], key: str) -> dict[str, Any]:
        self.entered.set()
        assert self.gate.wait(10), "the test never opened the gate"
        return self.refund(args, key)

    def tools(self) -> dict[str, Tool]:
        gated = Tool("gated_refund", self.gated_refund, side_effect=True, args_model=RefundArgs,
                     description="A refund that takes as long as the test says.", timeout_s=20)
        return {**super().tools(), gated.name: gated}


def test_cancel_while_an_approved_call_runs_says_it_will_finish_and_nothing_after(slack, sqlite_url):
    ledger = GatedLedger()
    signoff = Signoff(slack, sqlite_url, ledger, {})
    try:
        signoff.script.decisions = [tool_call("gated_refund", order_id="42", amount_usd=5.0),
                                    tool_call("issue_refund", order_id="43", amount_usd=5.0), final("Done.")]
        signoff.command("Refund orders 42 and 43")
        run = signoff.only_run()
        signoff.click(signoff.approval_message(), APPROVE_ACTION, user="U0LEAD", settle=False)
        assert ledger.entered.wait(10)
        reply = signoff.command(f"cancel {run.run_id}", settle=False).json()["text"]
        assert "nothing pending will be executed" not in reply
        assert f"`gated_refund` (key `{run.run_id}:1`) is already running and will finish" in reply
        assert "nothing after it will run" in reply
        ledger.gate.set()
        signoff.settle()
        assert signoff.run(run.run_id).status == "cancelled"
        assert ledger.calls == {f"{run.run_id}:1": 1}  # it finished, and the next refund never ran
    finally:
        ledger.gate.set()
        signoff.close()


def test_cancel_with_nothing_running_says_nothing_pending_runs(signoff, slack, ledger):
    signoff.script.decisions = [tool_call("issue_refund", order_id="42", amount_usd=5.0), final("Refunded.")]
    signoff.command("Refund order 42")
    run = signoff.only_run()
    reply = signoff.command(f"cancel {run.run_id}").json()["text"]
    assert reply == f"Cancelling run `{run.run_id}`; nothing pending will be executed."
    assert ledger.total == 0 and signoff.run(run.run_id).status == "cancelled"
