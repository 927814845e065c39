"""The approval policy as people meet it in Slack, over signed HTTP with a real database: the card
names the rule and who decides and fills in as a quorum does, Approve asks "are you sure?" where the
rule says so, clicks from people the rule does not name are refused, App Home and `/signoff list`
show each person what is theirs to decide, and the run's thread says what a rule allowed or refused.
Races run on two replicas sharing one database.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from bot_fakes import NOW, final, make_approval, make_run, tool_call
from slack_harness import Response, Signoff, buttons, find_button

from signoff.bot.arguments import ToolDisplay
from signoff.bot.slack.approval_cards import deciders_line
from signoff.bot.slack.argument_blocks import arguments_modal
from signoff.bot.slack.blocks import (
    APPROVE_ACTION,
    DENY_ACTION,
    EDIT_ACTION,
    MAX_CONFIRM_BUTTON,
    MAX_CONFIRM_TEXT,
    MAX_CONFIRM_TITLE,
)
from signoff.bot.slack.messages import approval_message
from signoff.bot.slack.replies import approval_outcome, decided_text
from signoff.bot.words import people
from signoff.runtime.records import ApprovalRecord, RunRecord, Vote
from tests.fakes.slack import block_kit_problems

FORM = "application/x-www-form-urlencoded"
POLICY = """\
defaults:
  approvers: [U0LEAD]
rules:
  - name: small-refunds
    tool: issue_refund
    when: "args.amount_usd <= 50"
    decision: allow
  - name: no-huge-refunds
    tool: issue_refund
    when: "args.amount_usd > 5000"
    decision: deny
    reason: refunds over $5000 are done by finance, by hand
  - name: big-refunds
    tool: issue_refund
    when: "args.amount_usd > 500"
    approvers: [S0ONCALL, U0SRE]
    quorum: 2
    confirm: true
  - name: refunds
    tool: issue_refund
    approvers: [U0OPS]
"""
BIG, MIDDLING, SMALL, HUGE = 750.0, 120.0, 19.99, 6000.0
"""Amounts each of the rules above decides, in order: big-refunds, refunds, small-refunds, no-huge-refunds."""
ONCALL = "<!subteam^S0ONCALL>"


@pytest.fixture
def policy_env(tmp_path) -> dict[str, str]:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY, encoding="utf-8")
    return {"SIGNOFF_POLICY": str(path)}


@pytest.fixture
def signoff(make_signoff, policy_env) -> Signoff:
    return make_signoff(**policy_env)


@pytest.fixture
def replicas(make_signoff, policy_env, database_url) -> tuple[Signoff, Signoff]:
    """Two replicas of the bot on one database (SQLite file, and PostgreSQL where it answers)."""
    return make_signoff(database_url, **policy_env), make_signoff(database_url, **policy_env)


def propose_refund(*replicas: Signoff, amount: float, user: str = "U0ASKER") -> RunRecord:
    """Start a run on the first replica whose model proposes one refund of `amount`, then answers."""
    for replica in replicas:  # a run goes on on whichever replica took the decision
        replica.script.decisions = [tool_call("issue_refund", order_id="42", amount_usd=amount), final("Refunded.")]
    first = replicas[0]
    assert first.command("Refund order 42", user=user).status == 200
    return first.only_run()


def the_approval(signoff: Signoff, run: RunRecord) -> ApprovalRecord:
    approval = signoff.runner.store.approval_for_key(f"{run.run_id}:1")
    assert approval is not None
    return approval


def card_text(message: dict[str, Any]) -> str:
    return shown(message["blocks"])


def shown(value: Any) -> str:
    """`value` as JSON with its characters as they are (`·`, `—`), to look for what people read."""
    return json.dumps(value, ensure_ascii=False)


def votes(approval: ApprovalRecord) -> list[tuple[str, bool]]:
    return [(vote.user, vote.approved) for vote in approval.votes]


def at_once(*sends: Callable[[], Response], delays: tuple[float, ...] = ()) -> list[Response]:
    """Send each request from its own thread, released together (each after its delay, if given)."""
    barrier = threading.Barrier(len(sends))
    results: list[Response] = []

    def send(request: Callable[[], Response], delay: float) -> None:
        barrier.wait()
        time.sleep(delay)
        results.append(request())

    threads = [threading.Thread(target=send, args=(request, delay))
               for request, delay in zip(sends, delays or (0.0,) * len(sends), strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def click_at_once(clicks: list[tuple[Signoff, dict[str, Any], str, str]]) -> list[Response]:
    """(replica, message, action, user) clicks sent together, each to its replica; then all settle."""
    bodies = [(replica, replica.click_body(message, action, user)) for replica, message, action, user in clicks]
    results = at_once(*(lambda r=replica, b=body: r.post(b, FORM, settle=False) for replica, body in bodies))
    for replica, _ in bodies:
        replica.settle()
    return results


# -- the card --------------------------------------------------------------------------------------


def test_the_card_names_the_rule_and_who_decides_and_fills_in_place_as_people_approve(signoff, slack, ledger):
    run = propose_refund(signoff, amount=BIG)
    card = signoff.approval_message()
    text = card_text(card)
    assert f"*Who decides* 2 approvals from {ONCALL}, <@U0SRE> · rule `big-refunds`" in text
    assert "*Approvals* 0 of 2: none yet" in text
    assert buttons(card) == [APPROVE_ACTION, DENY_ACTION, EDIT_ACTION]

    signoff.click(card, APPROVE_ACTION, user="U0ONCALL1")
    assert ledger.total == 0 and signoff.run(run.run_id).status == "awaiting_approval"
    updated = signoff.slack.message(card["channel"], card["ts"])  # the same message, updated in place
    assert buttons(updated) == [APPROVE_ACTION, DENY_ACTION, EDIT_ACTION]
    assert "*Approvals* 1 of 2: :white_check_mark: <@U0ONCALL1> <!date^" in card_text(updated)
    assert ("Your approval is counted: 1 of 2 approvals: <@U0ONCALL1>. `issue_refund` runs once 1 more person "
            "approves.") in signoff.ephemerals()
    assert len(signoff.approval_messages()) == 1 and len(slack.calls_to("chat.update")) >= 1

    signoff.click(updated, APPROVE_ACTION, user="U0SRE")
    assert ledger.calls == {f"{run.run_id}:1": 1}
    assert signoff.run(run.run_id).status == "done"
    decided = signoff.slack.message(card["channel"], card["ts"])
    assert buttons(decided) == []
    assert ":white_check_mark: *Approved* by <@U0ONCALL1> and <@U0SRE>" in card_text(decided)
    assert decided["text"].startswith("Approved by <@U0ONCALL1> and <@U0SRE>")
    assert "*Approvals*" not in card_text(decided)  # the outcome line names them all now
    assert votes(the_approval(signoff, run)) == [("U0ONCALL1", True), ("U0SRE", True)]


def test_a_quorum_of_one_reads_as_before_with_its_rule_named(signoff, ledger):
    run = propose_refund(signoff, amount=MIDDLING)
    card = signoff.approval_message()
    assert "*Who decides* 1 approval from <@U0OPS> · rule `refunds`" in card_text(card)
    assert "*Approvals*" not in card_text(card)
    signoff.click(card, APPROVE_ACTION, user="U0OPS")
    assert ledger.calls == {f"{run.run_id}:1": 1}
    decided = signoff.approval_message()
    assert ":white_check_mark: *Approved* by <@U0OPS> <!date^" in card_text(decided) and buttons(decided) == []


def test_without_a_policy_file_the_card_says_the_default_policy_applies(make_signoff, ledger):
    signoff = make_signoff()
    propose_refund(signoff, amount=BIG)
    card = signoff.approval_message()
    # The built-in policy names SIGNOFF_APPROVERS (here `*`).
    assert "*Who decides* 1 approval from any member of the approval channel · default policy" in card_text(card)
    assert "confirm" not in find_button(card, APPROVE_ACTION)


# -- confirm ---------------------------------------------------------------------------------------


def test_a_rule_with_confirm_puts_are_you_sure_on_approve_and_the_others_do_not(signoff, slack, ledger):
    run = propose_refund(signoff, amount=BIG)
    approve = find_button(signoff.approval_message(), APPROVE_ACTION)
    dialog = approve["confirm"]
    assert dialog["title"] == {"type": "plain_text", "text": "Approve issue_refund?"}
    assert dialog["text"]["type"] == "plain_text"
    assert "issue_refund" in dialog["text"]["text"] and f"{run.run_id}:1" in dialog["text"]["text"]
    assert "big-refunds" in dialog["text"]["text"]
    assert dialog["confirm"] == {"type": "plain_text", "text": "Approve"}
    assert dialog["deny"] == {"type": "plain_text", "text": "Cancel"}
    assert len(dialog["title"]["text"]) <= MAX_CONFIRM_TITLE and len(dialog["text"]["text"]) <= MAX_CONFIRM_TEXT
    assert all(len(dialog[b]["text"]) <= MAX_CONFIRM_BUTTON for b in ("confirm", "deny"))
    assert "confirm" not in find_button(signoff.approval_message(), DENY_ACTION)

    signoff.home_opened("U0ONCALL1")  # Home offers the same Approve, behind the same dialog
    assert find_button(slack.views["U0ONCALL1"], APPROVE_ACTION)["confirm"] == dialog


def test_a_rule_without_confirm_approves_in_one_click(signoff):
    propose_refund(signoff, amount=MIDDLING)
    assert "confirm" not in find_button(signoff.approval_message(), APPROVE_ACTION)


# -- who may click ---------------------------------------------------------------------------------


def test_a_click_from_someone_the_rule_does_not_name_is_refused_naming_the_rule(signoff, slack, ledger):
    run = propose_refund(signoff, amount=BIG)
    card = signoff.approval_message()
    signoff.click(card, APPROVE_ACTION, user="U0LEAD")  # a default approver, but not this rule's
    refusal = ("Not done: you are not one of the approvers this call's policy rule names "
               "(policy rule big-refunds)")
    assert refusal in signoff.ephemerals()
    signoff.click(card, DENY_ACTION, user="U0LEAD")  # nor may they open the Deny form
    assert slack.attempts("views.open") == 0
    assert signoff.ephemerals().count(refusal) == 2
    approval = the_approval(signoff, run)
    assert approval.status == "pending" and votes(approval) == [] and ledger.total == 0
    assert buttons(signoff.approval_message()) == [APPROVE_ACTION, DENY_ACTION, EDIT_ACTION]


def test_the_requester_is_refused_on_their_own_run_even_when_the_rule_names_them(signoff, slack, ledger):
    run = propose_refund(signoff, amount=BIG, user="U0ONCALL1")  # a member of the rule's group
    card = signoff.approval_message()
    signoff.click(card, APPROVE_ACTION, user="U0ONCALL1")
    signoff.click(card, DENY_ACTION, user="U0ONCALL1")
    told = [t for t in signoff.ephemerals() if "someone else has to approve" in t]
    assert len(told) == 2 and all(t.endswith("(policy rule big-refunds)") for t in told)
    assert slack.attempts("views.open") == 0
    assert votes(the_approval(signoff, run)) == [] and ledger.total == 0


def test_a_deny_from_the_rules_approver_opens_the_form_and_vetoes_the_quorum(signoff, slack, ledger):
    run = propose_refund(signoff, amount=BIG)
    card = signoff.approval_message()
    signoff.click(card, APPROVE_ACTION, user="U0ONCALL1")
    signoff.click(card, DENY_ACTION, user="U0SRE")
    signoff.submit_deny(slack.last("views.open")["view"], "U0SRE", "the order was already refunded")
    assert ledger.total == 0
    history = signoff.run(run.run_id).state["history"]
    assert [e["error"] for e in history if e["role"] == "tool"] == ["denied by human: the order was already refunded"]
    decided = card_text(signoff.approval_message())
    assert ":no_entry: *Denied* by <@U0SRE>" in decided
    assert "(a veto: 1 of 2 approvals had been given, by <@U0ONCALL1>)" in decided
    assert votes(the_approval(signoff, run)) == [("U0ONCALL1", True), ("U0SRE", False)]


def test_a_count_shown_after_the_deciding_approval_does_not_leave_the_card_with_live_buttons(signoff, slack, ledger):
    run = propose_refund(signoff, amount=BIG)
    card = signoff.approval_message()
    slack.slow("chat.update", 0.5)  # the first approval's re-render reaches Slack last
    signoff.click(card, APPROVE_ACTION, user="U0ONCALL1", settle=False)
    slack.wait_for(lambda: the_approval(signoff, run).votes)
    signoff.click(card, APPROVE_ACTION, user="U0SRE")
    assert ledger.calls == {f"{run.run_id}:1": 1}
    decided = signoff.approval_message()
    assert buttons(decided) == [] and "*Approved* by <@U0ONCALL1> and <@U0SRE>" in card_text(decided)


# -- App Home and /signoff list --------------------------------------------------------------------


def test_home_and_list_show_each_person_only_what_they_may_decide_and_have_not(signoff, slack, ledger):
    run = propose_refund(signoff, amount=BIG)
    signoff.click(signoff.approval_message(), APPROVE_ACTION, user="U0ONCALL1")

    for done_or_not_named in ("U0ONCALL1", "U0LEAD", "U0ASKER"):
        signoff.home_opened(done_or_not_named)
        assert buttons(slack.views[done_or_not_named]) == [], done_or_not_named
        listed = signoff.command("list", user=done_or_not_named).json()
        assert "*Waiting on you*\\nnothing" in json.dumps(listed), done_or_not_named

    signoff.home_opened("U0ONCALL2")
    home = slack.views["U0ONCALL2"]
    assert buttons(home) == [APPROVE_ACTION, DENY_ACTION, EDIT_ACTION]
    assert "1 of 2 approvals: <@U0ONCALL1>" in shown(home)
    assert f"2 approvals from {ONCALL}, <@U0SRE> · rule `big-refunds`" in shown(home)
    listed = shown(signoff.command("list", user="U0ONCALL2").json())
    assert run.run_id in listed and "1 of 2 approvals: <@U0ONCALL1>" in listed

    signoff.click(home, APPROVE_ACTION, user="U0ONCALL2")  # the second approval, from Home
    assert ledger.calls == {f"{run.run_id}:1": 1}
    assert buttons(slack.views["U0ONCALL2"]) == []  # republished: nothing waits on them now
    assert ":white_check_mark: *Approved* by <@U0ONCALL1> and <@U0ONCALL2>" in card_text(signoff.approval_message())


# -- the run's thread ------------------------------------------------------------------------------


def test_the_thread_says_which_rule_let_a_call_run_and_which_refused_one(signoff, slack, ledger):
    signoff.script.decisions = [tool_call("issue_refund", order_id="42", amount_usd=SMALL),
                                tool_call("issue_refund", order_id="43", amount_usd=HUGE), final("One refunded.")]
    signoff.command("Refund orders 42 and 43")
    run = signoff.only_run()
    assert run.status == "done" and signoff.approval_messages() == []  # nobody was asked
    assert ledger.calls == {f"{run.run_id}:1": 1}

    thread = [m for m in slack.thread("C0RUNS", run.origin["ts"]) if "issue_refund" in m["text"]]
    allowed, refused = (shown(m["blocks"]) for m in thread)
    assert ":white_check_mark: `issue_refund` (step 1) ran — allowed by rule `small-refunds`:" in allowed
    assert '\\"refunded\\": 19.99' in allowed  # its result, as for any call
    assert (":no_entry: `issue_refund` (step 2) refused by rule `no-huge-refunds`: refunds over $5000 are done "
            "by finance, by hand") in refused
    assert ":x:" not in refused and "denied_by_rule" not in refused  # a refusal by rule, not a tool failure
    assert thread[1]["text"] == "issue_refund refused by rule no-huge-refunds: refunds over $5000 are done by finance, by hand"
    told = [e for e in run.state["history"] if e["role"] == "tool"][-1]
    assert told["error"] == "denied by policy rule no-huge-refunds: refunds over $5000 are done by finance, by hand"


# -- races on two replicas -------------------------------------------------------------------------


def test_two_approvers_at_once_on_two_replicas_complete_the_quorum_and_run_it_once(replicas, slack, ledger):
    first, second = replicas
    run = propose_refund(first, second, amount=BIG)
    card = first.approval_message()
    results = click_at_once([(first, card, APPROVE_ACTION, "U0ONCALL1"), (second, card, APPROVE_ACTION, "U0SRE")])
    assert [r.status for r in results] == [200, 200]

    assert ledger.calls == {f"{run.run_id}:1": 1}
    approval = the_approval(first, run)
    assert approval.status == "consumed" and approval.quorum == 2
    assert sorted(votes(approval)) == [("U0ONCALL1", True), ("U0SRE", True)]
    assert first.run(run.run_id).status == "done"
    events = [e["type"] for e in first.runner.timeline(run.run_id)]
    assert events.count("approval_vote_recorded") == 1 and events.count("approval_recorded") == 1
    counted = [t for t in first.ephemerals() if t.startswith("Your approval is counted: 1 of 2")]
    assert len(counted) == 1  # the other one completed it: its card shows the outcome
    decided = first.approval_message()
    assert buttons(decided) == []  # however the two updates crossed, the card ends decided
    assert all(f"<@{who}>" in card_text(decided) for who in ("U0ONCALL1", "U0SRE"))


def test_one_person_approving_twice_at_once_on_two_replicas_counts_once(replicas, ledger):
    first, second = replicas
    run = propose_refund(first, second, amount=BIG)
    card = first.approval_message()
    click_at_once([(first, card, APPROVE_ACTION, "U0ONCALL1"), (second, card, APPROVE_ACTION, "U0ONCALL1")])
    first.click(card, APPROVE_ACTION, user="U0ONCALL1")  # and once more, later

    approval = the_approval(first, run)
    assert approval.status == "pending" and votes(approval) == [("U0ONCALL1", True)]
    assert ledger.total == 0 and first.run(run.run_id).status == "awaiting_approval"
    told = first.ephemerals()
    assert sum(t.startswith("Your approval is counted: 1 of 2 approvals: <@U0ONCALL1>") for t in told) == 1
    assert sum(t.startswith("You already decided this one; one person counts once (1 of 2 approvals: "
                            "<@U0ONCALL1>)") for t in told) == 2
    shown = first.approval_message()
    assert buttons(shown) == [APPROVE_ACTION, DENY_ACTION, EDIT_ACTION] and "*Approvals* 1 of 2:" in card_text(shown)


@pytest.mark.parametrize("head_start", [None, "deny", "approve"])
def test_an_approve_racing_a_deny_on_two_replicas_is_one_or_the_other(replicas, slack, ledger, head_start):
    """Either wins, never both; a few milliseconds' head start makes each side win some of the time."""
    first, second = replicas
    run = propose_refund(first, second, amount=BIG)
    card = first.approval_message()
    first.click(card, APPROVE_ACTION, user="U0ONCALL1")  # one of two: the next approval completes it
    first.click(card, DENY_ACTION, user="U0SRE")
    form = slack.last("views.open")["view"]

    at_once(lambda: first.post(first.click_body(card, APPROVE_ACTION, "U0ONCALL2"), FORM, settle=False),
            lambda: second.submit_deny(form, "U0SRE", "wrong order", settle=False),
            delays={None: (0.0, 0.0), "deny": (0.05, 0.0), "approve": (0.0, 0.05)}[head_start])
    first.settle()
    second.settle()

    approval = the_approval(first, run)
    history = [e for e in first.run(run.run_id).state["history"] if e["role"] == "tool"]
    told = first.ephemerals()
    assert first.run(run.run_id).status == "done"
    if approval.status == "denied":  # the deny came first: nothing ran, the model heard why
        assert ledger.total == 0
        assert [e.get("error") for e in history] == ["denied by human: wrong order"]
        assert votes(approval) == [("U0ONCALL1", True), ("U0SRE", False)]
        assert any(t.startswith("Already denied by <@U0SRE>") for t in told)
    else:  # the approval completed first: it ran once, and the deny was told so
        assert approval.status == "consumed"
        assert ledger.calls == {f"{run.run_id}:1": 1}
        assert [e.get("result", {}).get("refunded") for e in history] == [BIG]
        assert votes(approval) == [("U0ONCALL1", True), ("U0ONCALL2", True)]
        assert any(t.startswith("Already approved by <@U0ONCALL1> and <@U0ONCALL2>") for t in told)
    assert buttons(first.approval_message()) == []


# -- the same pieces, pure: limits and hostile names -------------------------------------------------


def asked(**overrides: Any) -> dict[str, Any]:
    return {"rule": "big-refunds", "policy": "0123456789abcdef", "approvers": ["S0ONCALL", "U0SRE"], "quorum": 2,
            "ttl_seconds": 1800, "allow_self_approval": False, "confirm": True, **overrides}


def test_a_long_list_of_approvers_is_counted_not_cut_and_a_hostile_rule_name_is_escaped():
    many = [f"U0PERSON{i:02d}" for i in range(40)]
    approval = make_approval(asked=asked(approvers=many, rule="<!channel> `x`"), quorum=2)
    line = deciders_line(approval)
    assert line is not None and line.endswith("and 28 more · rule `&lt;!channel&gt; ˋxˋ`")
    assert line.count("<@U0PERSON") == 12
    message = approval_message(make_run(), approval)
    assert block_kit_problems(message.blocks) == []
    assert "<!channel>" not in shown(message.blocks)


def test_every_approve_of_a_confirm_rule_asks_first_even_in_the_full_arguments_modal():
    approval = make_approval(asked=asked(), quorum=2)
    modal = arguments_modal(make_run(), approval, ToolDisplay.of(None))
    assert modal is not None and find_button(modal, APPROVE_ACTION)["confirm"]["confirm"]["text"] == "Approve"
    without = make_approval(asked=asked(confirm=False), quorum=2)
    assert "confirm" not in find_button({"blocks": approval_message(make_run(), without).blocks}, APPROVE_ACTION)


def test_an_approval_recorded_before_policies_shows_its_card_as_it_was():
    approval = make_approval()  # no `asked`: recorded before Signoff had policies
    assert deciders_line(approval) is None
    assert "Who decides" not in shown(approval_message(make_run(), approval).blocks)


def test_outcomes_name_every_approver_of_a_quorum_and_only_when_it_was_met():
    two = (Vote("U0ONCALL1", True, NOW), Vote("U0SRE", True, NOW))
    done = make_approval(status="consumed", quorum=2, votes=two, decided_by="U0SRE", decided_at=NOW, asked=asked())
    assert approval_outcome(done)[1] == "Approved by U0ONCALL1 and U0SRE"
    assert decided_text(done).startswith("Already approved by <@U0ONCALL1> and <@U0SRE> <!date^")
    late = make_approval(status="expired", quorum=2, votes=two, decided_by="U0SRE", decided_at=NOW, asked=asked())
    assert approval_outcome(late)[1] == "Approved by U0ONCALL1 and U0SRE but not started in time; not executed"
    half = make_approval(status="expired", quorum=3, votes=two, decided_at=NOW, asked=asked(quorum=3))
    assert approval_outcome(half) == (":hourglass: *Expired, not executed.*", "Expired, not executed")
    assert people(["a", "b", "c"]) == "a, b and c" and people(["a"]) == "a" and people([]) == ""
