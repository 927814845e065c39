"""Runs under an approval policy, through the runner and every store: a rule allows, asks (whom,
how many) or denies; a quorum counts distinct allowed people once each, on any replica; a policy
changed while an approval waits applies its stricter outcome when the call is about to run."""

from __future__ import annotations

import dataclasses
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from store_harness import APPROVER, LOOKUP, REQUESTER, SEND, Told, build_runner, side_effects

from signoff.runtime.adapters.memory import MemoryStore
from signoff.runtime.approval_policy import ApprovalPolicy
from signoff.runtime.policy_file import parse_policy
from signoff.runtime.ports import Store
from signoff.runtime.records import (
    AlreadyCounted,
    AlreadyDecided,
    AlreadyDone,
    Counted,
    Decided,
    Done,
    NotAllowed,
    Refused,
)
from signoff.runtime.runner import Runner

LEE, KIM, ADA = "U0LEE", "U0KIM", "U0ADA"
FINANCE = (LEE, KIM, ADA)


def policy(text: str) -> ApprovalPolicy:
    return parse_policy(text, source="policy.yaml")


QUORUM_2 = policy(f"""
rules:
  - name: two-people
    tool: send_email
    approvers: [{", ".join(FINANCE)}]
    quorum: 2
""")
LEE_AND_KIM = policy(f"""
rules:
  - name: two-people
    tool: send_email
    approvers: [{LEE}, {KIM}]
    quorum: 2
""")
"""`QUORUM_2` after the file was changed: Ada is no longer one of its approvers."""


def runner_with(store: Store, effects: Path, approval_policy: ApprovalPolicy, **config: Any) -> Runner:
    members = {LEE, KIM, ADA, APPROVER}

    runner = build_runner(store, effects, lease=30.0, approval_policy=approval_policy, **config)

    def may_approve(user: str, run: Any, approvers: tuple[str, ...]) -> str | None:
        named = set(approvers) if approvers else {APPROVER}
        return None if user in named & members else "not one of the approvers"

    runner.may_approve = may_approve
    return runner


def paused(runner: Runner, model: str = "scripted:send", requester: str = REQUESTER) -> tuple[Any, Any]:
    run = runner.start_run("tell Ana her refund is approved", requester, model=model)
    assert runner.execute(run.run_id) == "awaiting_approval"
    approval = runner.pending_approval(run.run_id)
    assert approval is not None
    return run, approval


def tool_entries(runner: Runner, run_id: str) -> list[dict[str, Any]]:
    return [e for e in runner.get_run(run_id).state["history"] if e["role"] == "tool"]


def events_of(runner: Runner, run_id: str, kind: str) -> list[dict[str, Any]]:
    return [e for e in runner.timeline(run_id) if e["type"] == kind]


def test_a_quorum_runs_the_call_once_when_enough_distinct_people_approved(store: Store, effects: Path) -> None:
    runner = runner_with(store, effects, QUORUM_2)
    run, approval = paused(runner)
    assert approval.quorum == 2 and approval.rule == "two-people"
    assert approval.asked["approvers"] == list(FINANCE)

    first = runner.decide(approval.approval_id, approval.digest, LEE, True)
    assert isinstance(first, Counted) and first.approval.approved_by == (LEE,)
    assert runner.execute(run.run_id) == "awaiting_approval"  # one of two: nothing runs
    again = runner.decide(approval.approval_id, approval.digest, LEE, True)
    assert isinstance(again, AlreadyCounted) and again.approval.approved_by == (LEE,)
    assert side_effects(effects) == []

    second = runner.decide(approval.approval_id, approval.digest, KIM, True, "checked the amount")
    assert isinstance(second, Decided) and second.approval.status == "approved"
    assert second.approval.approved_by == (LEE, KIM)
    assert runner.execute(run.run_id) == "done"
    assert side_effects(effects) == [(SEND, f"{run.run_id}:1")]
    late = runner.decide(approval.approval_id, approval.digest, ADA, True)
    assert isinstance(late, AlreadyDecided)
    assert [e["by"] for e in events_of(runner, run.run_id, "approval_vote_recorded")] == [LEE]
    recorded = events_of(runner, run.run_id, "approval_recorded")
    assert [(e["by"], e["approvals"], e["quorum"]) for e in recorded] == [(KIM, 2, 2)]


def test_any_allowed_persons_deny_vetoes_a_quorum(store: Store, effects: Path) -> None:
    runner = runner_with(store, effects, QUORUM_2)
    run, approval = paused(runner)
    assert isinstance(runner.decide(approval.approval_id, approval.digest, LEE, True), Counted)
    denied = runner.decide(approval.approval_id, approval.digest, KIM, False, "wrong customer")
    assert isinstance(denied, Decided) and denied.approval.status == "denied"
    assert isinstance(runner.decide(approval.approval_id, approval.digest, ADA, True), AlreadyDecided)
    assert runner.execute(run.run_id) == "done"
    assert side_effects(effects) == []
    assert tool_entries(runner, run.run_id)[0]["error"] == "denied by human: wrong customer"


def test_only_the_people_a_rule_names_count_and_never_the_requester(store: Store, effects: Path) -> None:
    runner = runner_with(store, effects, QUORUM_2)
    run, approval = paused(runner)
    outsider = runner.decide(approval.approval_id, approval.digest, APPROVER, True)
    assert isinstance(outsider, NotAllowed) and "two-people" in outsider.reason
    mine = runner.decide(approval.approval_id, approval.digest, REQUESTER, True)
    assert isinstance(mine, NotAllowed) and "you started this run" in mine.reason
    assert runner.get_approval(approval.approval_id).votes == ()
    assert [a.approval_id for a in runner.approvals_for(LEE)] == [approval.approval_id]
    assert runner.approvals_for(APPROVER) == []
    runner.decide(approval.approval_id, approval.digest, LEE, True)
    assert runner.approvals_for(LEE) == []  # decided already: nothing left for them to do
    assert [a.approval_id for a in runner.approvals_for(KIM)] == [approval.approval_id]


def test_a_rule_may_let_the_requester_approve_their_own_run(store: Store, effects: Path) -> None:
    runner = runner_with(store, effects, policy("""
rules:
  - name: self-service
    tool: send_email
    approvers: [U0ASKER]
    allow_self_approval: true
"""))
    runner.may_approve = lambda user, run, approvers: None if user in approvers else "no"
    run, approval = paused(runner, requester="U0ASKER")
    assert isinstance(runner.decide(approval.approval_id, approval.digest, "U0ASKER", True), Decided)
    assert runner.execute(run.run_id) == "done"
    assert len(side_effects(effects)) == 1


def test_a_side_effect_a_rule_allows_runs_once_through_the_ledger_without_an_approval(
        store: Store, effects: Path) -> None:
    runner = runner_with(store, effects, policy("""
rules:
  - name: internal-mail
    tool: send_email
    when: "args.to.endsWith('@example.com')"
    decision: allow
"""))
    run = runner.start_run("tell Ana", REQUESTER, model="scripted:send")
    assert runner.execute(run.run_id) == "done"
    key = f"{run.run_id}:1"
    assert side_effects(effects) == [(SEND, key)]
    assert store.list_approvals(run_id=run.run_id) == []
    [ledger] = store.executions(run.run_id)
    assert (ledger["key"], ledger["status"]) == (key, "succeeded")
    assert tool_entries(runner, run.run_id)[0]["rule"] == "internal-mail"
    [allowed] = events_of(runner, run.run_id, "call_allowed_by_rule")
    assert (allowed["rule"], allowed["key"], allowed["policy"]) == ("internal-mail", key, runner.config.policy.digest)
    [started] = events_of(runner, run.run_id, "execution_started")
    assert started["allowed_by"] == "internal-mail"
    # The proposal and the rule that allowed it were committed before the call started.
    assert allowed["seq"] < started["seq"]


def test_a_call_a_rule_denies_never_runs_and_the_model_is_told_why(store: Store, effects: Path) -> None:
    runner = runner_with(store, effects, policy("""
rules:
  - name: no-mail
    tool: "send_*"
    decision: deny
    reason: email goes out from the CRM, not from the agent
"""))
    run = runner.start_run("tell Ana", REQUESTER, model="scripted:send")
    assert runner.execute(run.run_id) == "done"
    assert side_effects(effects) == [] and store.list_approvals(run_id=run.run_id) == []
    [refused] = tool_entries(runner, run.run_id)
    assert refused["error_kind"] == "denied_by_rule" and refused["rule"] == "no-mail"
    assert refused["error"] == "denied by policy rule no-mail: email goes out from the CRM, not from the agent"
    assert runner.get_run(run.run_id).state["steps"] == 2  # a budgeted step like any other


def test_a_read_only_call_a_rule_asks_about_waits_and_runs_once_approved(store: Store, effects: Path) -> None:
    runner = runner_with(store, effects, policy("""
rules:
  - name: customer-records
    tool: lookup
    decision: ask
"""))
    run, approval = paused(runner, model="scripted:lookup-then-send")
    assert (approval.tool, approval.rule) == (LOOKUP, "customer-records")
    assert isinstance(runner.decide(approval.approval_id, approval.digest, APPROVER, True), Decided)
    assert runner.execute(run.run_id) == "awaiting_approval"  # now the email, asked by the defaults
    assert runner.get_approval(approval.approval_id).status == "consumed"
    assert tool_entries(runner, run.run_id)[0]["result"]["q"] == "orders"
    [ledger] = store.executions(run.run_id)
    assert (ledger["key"], ledger["status"]) == (f"{run.run_id}:1", "succeeded")


def test_a_rule_the_policy_now_denies_refuses_an_approved_call_at_dispatch(store: Store, effects: Path) -> None:
    before = runner_with(store, effects, QUORUM_2)
    run, approval = paused(before)
    before.decide(approval.approval_id, approval.digest, LEE, True)
    assert isinstance(before.decide(approval.approval_id, approval.digest, KIM, True), Decided)
    after = runner_with(store, effects, policy("""
rules:
  - name: mail-freeze
    tool: send_email
    decision: deny
    reason: no customer email during the incident
"""))
    assert after.execute(run.run_id) == "done"  # the model is told and answers
    assert side_effects(effects) == []
    assert after.get_approval(approval.approval_id).status == "cancelled"
    [refused] = tool_entries(after, run.run_id)
    assert refused["error_kind"] == "denied_by_rule" and "the policy changed after it was approved" in refused["error"]
    [denied] = events_of(after, run.run_id, "call_denied_by_rule")
    assert denied["at_dispatch"] is True and denied["rule"] == "mail-freeze"


def test_a_larger_quorum_in_the_policy_now_waits_for_more_approvals(store: Store, effects: Path) -> None:
    before = runner_with(store, effects, QUORUM_2)
    run, approval = paused(before)
    before.decide(approval.approval_id, approval.digest, LEE, True)
    before.decide(approval.approval_id, approval.digest, KIM, True)
    stricter = runner_with(store, effects, policy(f"""
rules:
  - name: three-people
    tool: send_email
    approvers: [{", ".join(FINANCE)}]
    quorum: 3
"""))
    assert stricter.execute(run.run_id) == "awaiting_approval"
    reopened = stricter.get_approval(approval.approval_id)
    assert (reopened.status, reopened.quorum, reopened.approved_by) == ("pending", 3, (LEE, KIM))
    assert side_effects(effects) == []
    assert isinstance(stricter.decide(approval.approval_id, approval.digest, KIM, True), AlreadyCounted)
    assert isinstance(stricter.decide(approval.approval_id, approval.digest, ADA, True), Decided)
    assert stricter.execute(run.run_id) == "done"
    assert side_effects(effects) == [(SEND, f"{run.run_id}:1")]
    assert [e["quorum"] for e in events_of(stricter, run.run_id, "approval_reopened")] == [3]


def test_an_expression_that_cannot_be_evaluated_never_allows_and_is_audited(store: Store, effects: Path) -> None:
    runner = runner_with(store, effects, policy("""
rules:
  - name: small-refunds
    tool: send_email
    when: "args.amount_usd <= 50"
    decision: allow
"""))
    run, approval = paused(runner)  # send_email has no amount: the allow rule is passed over
    assert approval.rule is None and approval.quorum == 1
    [asked] = events_of(runner, run.run_id, "approval_requested")
    assert any("small-refunds" in error for error in asked["errors"])


@pytest.mark.parametrize("racers", [2, 3])
def test_approvers_clicking_at_once_complete_a_quorum_exactly_once(store: Store, effects: Path, racers: int) -> None:
    if isinstance(store, MemoryStore):
        pytest.skip("one process: the memory store's lock is the whole story")
    runner = runner_with(store, effects, QUORUM_2)
    run, approval = paused(runner)
    outcomes: list[Any] = []
    barrier = threading.Barrier(racers)

    def click(user: str) -> None:
        barrier.wait()
        outcomes.append(runner.decide(approval.approval_id, approval.digest, user, True))

    threads = [threading.Thread(target=click, args=(user,)) for user in FINANCE[:racers]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    kinds = sorted(type(o).__name__ for o in outcomes)
    assert kinds == (["Counted", "Decided"] if racers == 2 else ["AlreadyDecided", "Counted", "Decided"])
    assert len(runner.get_approval(approval.approval_id).approved_by) == 2
    assert runner.execute(run.run_id) == "done"
    assert len(side_effects(effects)) == 1


def test_someone_the_policy_no_longer_names_cannot_decide_what_was_asked_before(store: Store, effects: Path) -> None:
    before = runner_with(store, effects, QUORUM_2)
    run, approval = paused(before)
    after = runner_with(store, effects, LEE_AND_KIM)
    refused = after.decide(approval.approval_id, approval.digest, ADA, True)
    assert isinstance(refused, NotAllowed) and "two-people" in refused.reason
    frozen = runner_with(store, effects, policy("""
rules:
  - name: mail-freeze
    tool: send_email
    decision: deny
"""))
    now_denied = frozen.decide(approval.approval_id, approval.digest, LEE, True)
    assert isinstance(now_denied, NotAllowed) and "now refuses this call (policy rule mail-freeze)" in now_denied.reason
    assert after.get_approval(approval.approval_id).votes == ()


def test_a_decision_asks_who_is_among_the_approvers_once_when_the_rule_then_and_now_name_the_same(
        store: Store, effects: Path) -> None:
    runner = runner_with(store, effects, QUORUM_2)
    run, approval = paused(runner)
    asked: list[tuple[str, tuple[str, ...]]] = []
    directory = runner.may_approve

    def counted(user: str, of_run: Any, approvers: tuple[str, ...]) -> str | None:
        asked.append((user, approvers))
        return directory(user, of_run, approvers)

    runner.may_approve = counted
    assert isinstance(runner.decide(approval.approval_id, approval.digest, LEE, True), Counted)
    assert asked == [(LEE, FINANCE)]  # the rule then and the rule now: the same people, asked once
    fewer = runner_with(store, effects, LEE_AND_KIM)
    fewer.may_approve = counted
    assert isinstance(fewer.decide(approval.approval_id, approval.digest, KIM, True), Decided)
    assert asked[1:] == [(KIM, FINANCE), (KIM, (LEE, KIM))]  # the file changed: each rule asked


def test_a_counted_vote_whose_card_update_was_lost_is_shown_by_recovery(store: Store, effects: Path,
                                                                       clock: Any) -> None:
    runner = runner_with(store, effects, QUORUM_2)
    run, approval = paused(runner)
    store.set_approval_message(approval.approval_id, {"channel": "C1", "ts": "1.0"})
    slack = DownSlack()
    runner.teller.notifier = slack  # Slack is down while Lee approves: the card still shows no votes
    assert isinstance(runner.decide(approval.approval_id, approval.digest, LEE, True), Counted)
    assert slack.drawn == []
    slack.down = False
    clock.advance(seconds=10)
    runner.recover()
    [(drawn, approved_by)] = slack.drawn
    assert (drawn, approved_by) == (approval.approval_id, (LEE,))


class DownSlack(Told):
    """Draws a pending card's update only while Slack is up."""

    def __init__(self) -> None:
        super().__init__()
        self.down = True
        self.drawn: list[tuple[str, tuple[str, ...]]] = []

    def approval_updated(self, run: Any, approval: Any, card: Any) -> None:
        if self.down:
            raise ConnectionError("slack is down")
        self.drawn.append((approval.approval_id, approval.approved_by))


@pytest.mark.parametrize("on_expiry", ["end", "continue"])
def test_nobody_deciding_in_time_is_a_timeout_never_a_denial(store: Store, effects: Path, clock: Any,
                                                              on_expiry: str) -> None:
    runner = runner_with(store, effects, policy(f"""
rules:
  - name: quick
    tool: send_email
    ttl: 2m
    on_expiry: {on_expiry}
"""))
    run, approval = paused(runner)
    assert approval.asked["on_expiry"] == on_expiry
    clock.advance(minutes=3)
    assert [a.approval_id for a in runner.expire_due()] == [approval.approval_id]
    ended = runner.get_run(run.run_id)
    assert side_effects(effects) == []
    if on_expiry == "end":
        assert ended.status == "expired"
        return
    assert ended.status == "done"  # the model was told, and answered
    [told] = tool_entries(runner, run.run_id)
    assert told["error_kind"] == "unanswered"
    assert told["error"] == "no one decided within 2 min; the call was not made"
    assert "denied" not in told["error"]
    [timed_out] = events_of(runner, run.run_id, "approval_timed_out")
    assert (timed_out["rule"], timed_out["waited"]) == ("quick", "2 min")


# -- edit, then approve -----------------------------------------------------------------------------


def test_an_edited_call_is_asked_about_afresh_and_runs_as_edited_once_approved(store: Store, effects: Path) -> None:
    runner = runner_with(store, effects, QUORUM_2)
    run, approval = paused(runner)
    assert isinstance(runner.decide(approval.approval_id, approval.digest, LEE, True), Counted)
    edited_args = {"to": "ana@example.com", "body": "refund approved: $50 of the $500 asked"}
    assert isinstance(runner.edit(approval.approval_id, approval.digest, KIM, edited_args), Done)
    assert runner.get_approval(approval.approval_id).status == "superseded"
    assert runner.execute(run.run_id) == "awaiting_approval"
    fresh = runner.pending_approval(run.run_id)
    assert fresh is not None and fresh.approval_id != approval.approval_id
    assert (fresh.key, fresh.args) == (approval.key, edited_args) and fresh.digest != approval.digest
    assert fresh.votes == ()  # Lee approved the old arguments: that does not carry over
    [edited] = events_of(runner, run.run_id, "call_edited")
    assert edited["by"] == KIM and edited["changes"] == [
        'body: "refund approved" -> "refund approved: $50 of the $500 asked"']
    assert isinstance(runner.decide(fresh.approval_id, fresh.digest, KIM, True), Counted)  # the editor approves too
    assert isinstance(runner.decide(fresh.approval_id, fresh.digest, LEE, True), Decided)
    assert runner.execute(run.run_id) == "done"
    assert side_effects(effects) == [(SEND, f"{run.run_id}:1")]
    history = runner.get_run(run.run_id).state["history"]
    [proposed] = [e for e in history if e.get("role") == "assistant" and e.get("tool") == SEND]
    assert proposed["args"] == {"to": "ana@example.com", "body": "refund approved"}  # what the model said
    [result] = tool_entries(runner, run.run_id)
    assert result["edited"].startswith(f"{KIM} changed this call before it ran (body:")
    assert "do not propose the original again" in result["edited"]


def test_an_edit_after_the_approval_was_decided_changes_nothing(store: Store, effects: Path) -> None:
    runner = runner_with(store, effects, policy("rules:\n  - name: one\n    tool: send_email\n"
                                                f"    approvers: [{LEE}, {KIM}]\n"))
    run, approval = paused(runner)
    assert isinstance(runner.decide(approval.approval_id, approval.digest, LEE, True), Decided)
    late = runner.edit(approval.approval_id, approval.digest, KIM, {"to": "bo@example.com"})
    assert isinstance(late, Refused) and "decided before your change arrived" in late.reason
    assert runner.get_approval(approval.approval_id).status == "approved"
    assert runner.execute(run.run_id) == "done"
    assert len(side_effects(effects)) == 1 and events_of(runner, run.run_id, "call_edited") == []


@pytest.mark.parametrize(("user", "args", "refusal"), [
    (LEE, {"to": 5}, "to"),  # not arguments the tool takes: its own message names the field
    (LEE, {"to": "ana@example.com", "body": "refund approved"}, "nothing was changed"),
    (APPROVER, {"to": "bo@example.com"}, "two-people"),  # not one of the rule's approvers
])
def test_an_edit_the_tool_or_the_rule_would_not_take_is_refused(store: Store, effects: Path, user: str,
                                                                  args: dict[str, Any], refusal: str) -> None:
    runner = runner_with(store, effects, QUORUM_2)
    run, approval = paused(runner)
    outcome = runner.edit(approval.approval_id, approval.digest, user, args)
    assert isinstance(outcome, Refused | NotAllowed) and refusal in outcome.reason
    assert runner.get_approval(approval.approval_id).status == "pending"
    assert runner.get_run(run.run_id).command is None


def test_an_edit_into_a_call_the_policy_denies_is_refused(store: Store, effects: Path) -> None:
    runner = runner_with(store, effects, policy(f"""
rules:
  - name: no-outside-mail
    tool: send_email
    when: "!args.to.endsWith('@example.com')"
    decision: deny
    reason: mail leaves the company only from the CRM
  - name: two-people
    tool: send_email
    approvers: [{", ".join(FINANCE)}]
"""))
    run, approval = paused(runner)
    outcome = runner.edit(approval.approval_id, approval.digest, LEE, {"to": "eve@elsewhere.example"})
    assert isinstance(outcome, Refused) and "no-outside-mail" in outcome.reason
    assert runner.get_approval(approval.approval_id).status == "pending"


# -- approve and allow similar ----------------------------------------------------------------------

GRANTING = policy(f"""
rules:
  - name: mail-ana
    tool: send_email
    approvers: [{LEE}, {KIM}]
    grant: {{for: 30m, same: [to], scope: run}}
""")


def test_approve_and_allow_similar_lets_the_same_kind_of_call_run_unasked_in_its_run(
        store: Store, effects: Path) -> None:
    runner = runner_with(store, effects, GRANTING)
    run, approval = paused(runner, model="scripted:send-twice")
    assert approval.asked["grant"] == {"for_seconds": 1800, "same": ["to"], "scope": "run"}
    decided = runner.decide(approval.approval_id, approval.digest, LEE, True, grant=True)
    assert isinstance(decided, Decided) and decided.grant is not None
    assert (decided.grant.same, decided.grant.scope, decided.grant.created_by) == ({"to": "ana@example.com"}, "run", LEE)
    # The first call runs on the approval, the second (same `to`) under the grant; the third asks.
    assert runner.execute(run.run_id) == "awaiting_approval"
    assert side_effects(effects) == [(SEND, f"{run.run_id}:1"), (SEND, f"{run.run_id}:2")]
    third = runner.pending_approval(run.run_id)
    assert third is not None and third.args["to"] == "bo@example.com"
    [allowed] = events_of(runner, run.run_id, "call_allowed_by_grant")
    assert (allowed["key"], allowed["grant_id"], allowed["granted_by"]) == (
        f"{run.run_id}:2", decided.grant.grant_id, LEE)
    started = [e for e in events_of(runner, run.run_id, "execution_started") if e.get("granted_by")]
    assert [(e["key"], e["grant_use"]) for e in started] == [(f"{run.run_id}:2", 1)]
    assert tool_entries(runner, run.run_id)[1]["grant"] == decided.grant.grant_id
    assert store.get_grant(decided.grant.grant_id).uses == 1


def test_a_revoked_grant_asks_again_even_for_a_call_it_was_about_to_cover(store: Store, effects: Path) -> None:
    runner = runner_with(store, effects, GRANTING)
    run, approval = paused(runner, model="scripted:send-twice")
    decided = runner.decide(approval.approval_id, approval.digest, LEE, True, grant=True)
    assert isinstance(decided, Decided) and decided.grant is not None
    real_send = runner.tools[SEND].fn

    def send_then_revoke(args: dict[str, Any], key: str) -> Any:
        # The grant is taken back while the worker is busy: it loaded the grant as in force.
        runner.revoke_grant(decided.grant.grant_id, LEE)
        return real_send(args, key)

    runner.tools[SEND] = dataclasses.replace(runner.tools[SEND], fn=send_then_revoke)
    assert runner.execute(run.run_id) == "awaiting_approval"
    assert side_effects(effects) == [(SEND, f"{run.run_id}:1")]  # the second waits for a person
    second = runner.pending_approval(run.run_id)
    assert second is not None and second.key == f"{run.run_id}:2"
    assert "revoked" in events_of(runner, run.run_id, "approval_requested")[-1]["reason"]
    assert store.get_grant(decided.grant.grant_id).uses == 0


def test_a_grant_is_only_what_its_rule_offers_and_only_its_maker_or_deciders_revoke_it(
        store: Store, effects: Path) -> None:
    runner = runner_with(store, effects, QUORUM_2)
    run, approval = paused(runner)
    refused = runner.decide(approval.approval_id, approval.digest, LEE, True, grant=True)
    assert isinstance(refused, NotAllowed) and "offers no grant" in refused.reason
    granting = runner_with(store, effects, GRANTING)
    run, approval = paused(granting, model="scripted:send-twice")
    decided = granting.decide(approval.approval_id, approval.digest, LEE, True, grant=True)
    assert isinstance(decided, Decided) and decided.grant is not None
    assert isinstance(granting.revoke_grant(decided.grant.grant_id, APPROVER), NotAllowed)
    assert isinstance(granting.revoke_grant(decided.grant.grant_id, KIM), Done)
    assert isinstance(granting.revoke_grant(decided.grant.grant_id, LEE), AlreadyDone)
    assert granting.grants_for(LEE) == []


# -- reminders and escalation -----------------------------------------------------------------------

NUDGING = policy(f"""
rules:
  - name: nudged
    tool: send_email
    approvers: [{LEE}]
    ttl: 10m
    remind: [50%, 90%]
    escalate: {{after: 6m, to: [{ADA}]}}
""")


def test_reminders_and_an_escalation_come_once_each_when_due(store: Store, effects: Path, clock: Any) -> None:
    told = Told()
    runner = runner_with(store, effects, NUDGING, notifier=told)
    run, approval = paused(runner)
    assert runner.nudge_due() == []
    refused = runner.decide(approval.approval_id, approval.digest, ADA, True)
    assert isinstance(refused, NotAllowed)  # not one of the rule's approvers, yet
    clock.advance(minutes=5)
    [half_way] = runner.nudge_due()
    assert half_way.kinds == ("remind",) and runner.nudge_due() == []  # made once, however often swept
    clock.advance(minutes=1)
    [escalated] = runner.nudge_due()
    assert escalated.kinds == ("escalate",) and escalated.added == (ADA,)
    assert told.of("approval_escalated") == [ADA]
    clock.advance(minutes=3)
    assert [n.kinds for n in runner.nudge_due()] == [("remind",)]
    assert told.of("approval_reminded") == [approval.approval_id] * 2
    assert [e["type"] for e in runner.timeline(run.run_id) if e["type"].startswith("approval_")
            and e["type"] in ("approval_reminded", "approval_escalated")] == [
        "approval_reminded", "approval_escalated", "approval_reminded"]
    assert isinstance(runner.decide(approval.approval_id, approval.digest, ADA, True), Decided)  # added: may decide
    assert runner.execute(run.run_id) == "done"


def test_a_sweep_after_a_restart_says_what_is_due_once_not_every_nudge_it_missed(
        store: Store, effects: Path, clock: Any) -> None:
    runner = runner_with(store, effects, NUDGING, notifier=Told())
    run, approval = paused(runner)
    clock.advance(minutes=9, seconds=30)  # every nudge's moment passed while no replica was up
    [caught_up] = runner.nudge_due()
    assert caught_up.kinds == ("escalate", "remind") and caught_up.added == (ADA,)
    assert runner.get_approval(approval.approval_id).nudge_at is None
    assert runner.nudge_due() == []


# -- request again --------------------------------------------------------------------------------

QUICK = policy("""
rules:
  - name: quick
    tool: send_email
    ttl: 2m
""")


def expired_run(runner: Runner, clock: Any) -> tuple[Any, Any]:
    """A run that ended `expired`, nobody having decided its call, and the approval that expired."""
    run, approval = paused(runner)
    clock.advance(minutes=3)
    assert [a.approval_id for a in runner.expire_due()] == [approval.approval_id]
    assert runner.get_run(run.run_id).status == "expired"
    return run, approval


def test_an_expired_run_requested_again_asks_afresh_and_runs_the_call_once_approved(
        store: Store, effects: Path, clock: Any) -> None:
    runner = runner_with(store, effects, QUICK)
    run, expired = expired_run(runner, clock)
    kept = runner.get_run(run.run_id).state["pending"]
    assert (kept["key"], kept["args"]) == (expired.key, expired.args)  # the ending keeps the call

    assert isinstance(runner.request_again(run.run_id, REQUESTER), Done)
    assert runner.execute(run.run_id) == "awaiting_approval"
    fresh = runner.pending_approval(run.run_id)
    assert fresh is not None and fresh.approval_id != expired.approval_id
    assert (fresh.key, fresh.args, fresh.digest, fresh.rule) == (expired.key, expired.args, expired.digest, "quick")
    assert fresh.expires_at - fresh.requested_at == expired.expires_at - expired.requested_at  # a fresh 2 minutes
    assert fresh.requested_at >= expired.expires_at
    assert runner.get_approval(expired.approval_id).status == "expired"  # the old one stays as it ended
    [again] = events_of(runner, run.run_id, "requested_again")
    assert (again["by"], again["key"], again["tool"]) == (REQUESTER, expired.key, SEND)

    assert side_effects(effects) == []
    assert isinstance(runner.decide(fresh.approval_id, fresh.digest, APPROVER, True), Decided)
    assert runner.execute(run.run_id) == "done"
    assert side_effects(effects) == [(SEND, expired.key)]  # once, with the same key
    # The model saw the call run, once; nothing in its history says it was ever refused.
    [result] = tool_entries(runner, run.run_id)
    assert "result" in result and result["call_id"] == kept["call_id"]


def test_request_again_is_its_requesters_alone_and_only_for_a_run_that_expired_on_a_call(
        store: Store, effects: Path, clock: Any) -> None:
    runner = runner_with(store, effects, QUICK)
    run, approval = paused(runner)
    waiting = runner.request_again(run.run_id, REQUESTER)
    assert isinstance(waiting, Refused) and "awaiting_approval" in waiting.reason  # nothing expired yet
    clock.advance(minutes=3)
    runner.expire_due()
    refused = runner.request_again(run.run_id, APPROVER)
    assert isinstance(refused, NotAllowed) and "only the person who started this run" in refused.reason
    assert runner.get_run(run.run_id).command is None
    assert isinstance(runner.request_again(run.run_id, REQUESTER), Done)
    twice = runner.request_again(run.run_id, REQUESTER)  # a double click before the worker took the first
    assert isinstance(twice, Refused) and "already waiting" in twice.reason
    assert runner.execute(run.run_id) == "awaiting_approval"
    assert len(runner.store.list_approvals(status="pending", run_id=run.run_id)) == 1


def test_a_replayed_request_again_from_the_expiry_notice_asks_once(store: Store, effects: Path, clock: Any) -> None:
    runner = runner_with(store, effects, QUICK)
    run, _ = expired_run(runner, clock)
    shown = runner.get_run(run.run_id).version  # the notice's button carries the version it showed
    assert isinstance(runner.request_again(run.run_id, REQUESTER, shown_version=shown), Done)
    assert runner.execute(run.run_id) == "awaiting_approval"
    replayed = runner.request_again(run.run_id, REQUESTER, shown_version=shown)
    assert isinstance(replayed, AlreadyDone) and (replayed.what, replayed.by) == ("request_again", REQUESTER)
    assert runner.execute(run.run_id) == "awaiting_approval"
    assert len([a for a in runner.store.list_approvals(run_id=run.run_id) if a.status == "pending"]) == 1


def test_request_again_goes_by_the_policy_as_it_is_now(store: Store, effects: Path, clock: Any) -> None:
    runner = runner_with(store, effects, QUICK)
    run, _ = expired_run(runner, clock)
    denying = runner_with(store, effects, policy("""
rules:
  - name: no-mail
    tool: send_email
    decision: deny
    reason: mail is frozen
"""))
    refused = denying.request_again(run.run_id, REQUESTER)
    assert isinstance(refused, Refused) and "no-mail" in refused.reason and "mail is frozen" in refused.reason
    assert denying.get_run(run.run_id).status == "expired" and denying.get_run(run.run_id).command is None

    allowing = runner_with(store, effects, policy("""
rules:
  - name: mail-ok
    tool: send_email
    decision: allow
"""))
    assert isinstance(allowing.request_again(run.run_id, REQUESTER), Done)
    assert allowing.execute(run.run_id) == "done"  # allowed now: it runs without asking, once
    assert len(side_effects(effects)) == 1
    [allowed] = events_of(allowing, run.run_id, "call_allowed_by_rule")
    assert allowed["rule"] == "mail-ok"


def test_a_run_whose_approved_call_could_not_start_in_time_keeps_no_call_to_request(
        store: Store, effects: Path, clock: Any) -> None:
    runner = runner_with(store, effects, QUICK)
    run, approval = paused(runner)
    assert isinstance(runner.decide(approval.approval_id, approval.digest, APPROVER, True), Decided)
    clock.advance(minutes=40)  # past the dispatch window: the approval is no longer acted on
    assert runner.execute(run.run_id) == "expired"
    refused = runner.request_again(run.run_id, REQUESTER)
    assert isinstance(refused, Refused) and "kept no call" in refused.reason
    assert side_effects(effects) == []


def test_an_ended_run_is_never_claimed_again_without_a_request(store: Store, effects: Path, clock: Any) -> None:
    runner = runner_with(store, effects, QUICK)
    run, _ = expired_run(runner, clock)
    assert runner.execute(run.run_id) is None
    assert run.run_id not in runner.recover(min_age=timedelta(0))
