"""The invariant checker itself: silent on a clean world, and each invariant catches its own breach.

Pure: evidence is built by hand, no processes, no database.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta

import pytest

from scenarios.invariants import Evidence, check
from scenarios.world import Policy
from signoff.bot.slack.blocks import APPROVE_ACTION, DENY_ACTION, RETRY_ACTION
from signoff.runtime.state import call_digest

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
RUN = "run-0123456789"
KEY = f"{RUN}:2"
ARGS = {"to": "ada@example.com", "text": "hello"}
DIGEST = call_digest("send_note", ARGS, KEY)
POLICY = Policy()


def clean() -> Evidence:
    """One run that asked once, was approved by someone else in time, ran once and finished."""
    run = {"run_id": RUN, "status": "done", "requester": "U0ASKER", "pending_key": None, "command": None,
           "lease_owner": None, "lease_expires_at": None, "version": 4, "origin": '{"channel": "C0RUNS"}'}
    approval = {"approval_id": "apr_one", "run_id": RUN, "key": KEY, "tool": "send_note", "args": json.dumps(ARGS),
                "digest": DIGEST, "status": "consumed", "quorum": 1,
                "decided_by": "U0LEAD", "decided_at": T0 + timedelta(seconds=5), "expires_at": T0 + timedelta(minutes=30),
                "consumed_at": T0 + timedelta(seconds=6), "message": {"channel": "C0RUNS", "ts": "1.2"}}
    events = [
        {"seq": 1, "type": "run_created"}, {"seq": 2, "type": "run_started", "step": 0},
        {"seq": 3, "type": "decision", "step": 1}, {"seq": 4, "type": "tool_executed", "key": f"{RUN}:1"},
        {"seq": 5, "type": "decision", "step": 2}, {"seq": 6, "type": "approval_requested", "key": KEY},
        {"seq": 7, "type": "approval_recorded", "approval_id": "apr_one", "key": KEY, "approved": True},
        {"seq": 8, "type": "execution_started", "key": KEY, "approval_id": "apr_one"},
        {"seq": 9, "type": "tool_executed", "key": KEY}, {"seq": 10, "type": "decision", "step": 3},
        {"seq": 11, "type": "finished"},
    ]
    decided = {"ts": "1.2", "channel": "C0RUNS", "blocks": [{"type": "section", "text": {"text": "Approved"}}]}
    return Evidence(
        runs={RUN: run}, approvals={"apr_one": approval}, ledger={KEY: {"key": KEY, "status": "succeeded"}},
        events={RUN: events}, steps={RUN: {1, 2, 3}},
        effects=[{"tool": "send_note", "key": KEY, "digest": DIGEST, "effect": True}],
        messages=[decided], now=T0 + timedelta(minutes=1), votes={"apr_one": [vote("U0LEAD")]},
    )


def vote(user: str, approved: bool = True, seq: int = 1) -> dict:
    return {"approval_id": "apr_one", "user_id": user, "seq": seq, "approved": approved, "note": None,
            "at": T0 + timedelta(seconds=4 + seq)}


def broken(evidence: Evidence) -> dict[str, list[str]]:
    return {name: found for name, found in check(evidence, POLICY).items() if found}


def live_buttons(approval_id: str, digest: str = DIGEST) -> dict:
    return {"ts": "1.9", "channel": "C0RUNS", "blocks": [{"type": "actions", "elements": [
        {"action_id": APPROVE_ACTION, "value": f"{approval_id}:{digest}"},
        {"action_id": DENY_ACTION, "value": f"{approval_id}:{digest}"}]}]}


def test_a_clean_world_breaks_nothing():
    assert broken(clean()) == {}


def mutate(change) -> Evidence:
    evidence = copy.deepcopy(clean())
    change(evidence)
    return evidence


BREACHES = {
    "an effect nobody approved": ("I1", lambda e: e.effects.append(
        {"tool": "send_note", "key": f"{RUN}:7", "digest": "x", "effect": True})),
    "an effect the requester approved": ("I1", lambda e: e.approvals["apr_one"].update(decided_by="U0ASKER")),
    "an effect approved after expiry": ("I1", lambda e: e.approvals["apr_one"].update(
        decided_at=T0 + timedelta(hours=1))),
    "an effect started long after it was approved": ("I1", lambda e: e.approvals["apr_one"].update(
        consumed_at=T0 + timedelta(minutes=20))),
    "an effect with other arguments than approved": ("I1", lambda e: e.effects[0].update(digest="0" * 64)),
    "a non-idempotent effect twice": ("I2", lambda e: e.effects.append(dict(e.effects[0]))),
    "an idempotent effect applied twice": ("I2", lambda e: e.effects.extend(
        [{"tool": "apply_credit", "key": "k9", "effect": True}, {"tool": "apply_credit", "key": "k9", "effect": True}])),
    "an approval decided twice": ("I3", lambda e: e.events[RUN].insert(7, {
        "seq": 7, "type": "approval_recorded", "approval_id": "apr_one", "approved": False})),
    "a consumed approval without a ledger row": ("I3", lambda e: e.ledger.clear()),
    "an approved call dropped while its run finished": ("I3", lambda e: e.approvals["apr_one"].update(
        status="cancelled")),
    "an approval left approved": ("I3", lambda e: e.approvals["apr_one"].update(status="approved")),
    "a run stuck running": ("I4", lambda e: e.runs[RUN].update(status="running")),
    "a run awaiting an approval that is not pending": ("I4", lambda e: e.runs[RUN].update(
        status="awaiting_approval", pending_key=KEY)),
    "a run holding an unapplied command": ("I4", lambda e: e.runs[RUN].update(command='{"op": "cancel"}')),
    "an execution without an outcome": ("I5", lambda e: e.events[RUN].pop(8)),
    "an effect the audit log never saw start": ("I5", lambda e: e.events[RUN].pop(7)),
    "a step without a decision event": ("I5", lambda e: e.steps[RUN].add(4)),
    "live buttons on a consumed approval": ("I6", lambda e: e.messages.append(live_buttons("apr_one"))),
    "a failed run whose buttons Slack never showed": ("I6", lambda e: e.runs[RUN].update(status="failed")),
    "a failed run offered only an older state's buttons": ("I6", lambda e: (e.runs[RUN].update(status="failed"), e.messages.append(
        {"ts": "1.5", "channel": "C0RUNS", "blocks": [{"type": "actions", "elements": [
            {"action_id": RETRY_ACTION, "value": f"{RUN}:3"}]}]}))),
}


@pytest.mark.parametrize("breach", list(BREACHES))
def test_each_breach_is_caught_by_its_invariant(breach):
    invariant, change = BREACHES[breach]
    assert invariant in broken(mutate(change)), breach


def test_a_pending_approval_with_live_buttons_and_its_waiting_run_are_fine():
    def waiting(e: Evidence) -> None:
        e.runs[RUN].update(status="awaiting_approval", pending_key=f"{RUN}:4")
        e.approvals["apr_two"] = {**e.approvals["apr_one"], "approval_id": "apr_two", "key": f"{RUN}:4",
                                  "status": "pending", "decided_by": None, "decided_at": None, "consumed_at": None}
        e.messages.append(live_buttons("apr_two"))
        e.events[RUN] = [ev for ev in e.events[RUN] if ev["type"] != "finished"]

    assert broken(mutate(waiting)) == {}


def test_a_pending_approval_long_past_its_expiry_is_caught():
    def stale(e: Evidence) -> None:
        e.runs[RUN].update(status="awaiting_approval", pending_key=f"{RUN}:4")
        e.approvals["apr_two"] = {**e.approvals["apr_one"], "approval_id": "apr_two", "key": f"{RUN}:4",
                                  "status": "pending", "decided_by": None, "expires_at": T0}
        e.messages.append(live_buttons("apr_two"))

    assert "I3" in broken(mutate(stale))


def test_a_failed_run_offering_retry_is_fine():
    def offered(e: Evidence) -> None:
        e.runs[RUN].update(status="failed")
        e.messages.append({"ts": "1.5", "channel": "C0RUNS", "blocks": [{"type": "actions", "elements": [
            {"action_id": RETRY_ACTION, "value": f"{RUN}:4"}]}]})

    assert "I6" not in broken(mutate(offered))


def test_approvers_and_groups_decide_who_is_allowed():
    policy = Policy(approvers=frozenset({"U0LEAD", "S0ONCALL"}))
    assert policy.refusal("U0ONCALL2", "U0ASKER") is None
    assert policy.refusal("U0STRANGER", "U0ASKER") == "U0STRANGER is not an approver"
    assert policy.refusal("U0LEAD", "U0LEAD") == "U0LEAD approved their own run"
    assert Policy(allow_self=True).refusal("U0LEAD", "U0LEAD") is None


def test_channel_members_decide_where_approvers_is_a_star():
    assert Policy().refusal("U0ONCALL1", "U0ASKER") is None  # in #runs
    assert Policy().refusal("U0ONCALL1", "U0ASKER", "C0PRIVATE") == "U0ONCALL1 is not an approver"
    assert Policy().refusal("U0STRANGER", "U0ASKER") == "U0STRANGER is not an approver"


def recorded_run(evidence: Evidence) -> str:
    """A real run of the scenario tools, as the store keeps it: state row, history, loop events."""
    from scenarios.toolset import TOOLS
    from signoff.runtime.adapters.rows import dump_without_history
    from signoff.runtime.agent import Agent

    events: list[dict] = []
    script = iter([{"tool": "lookup", "args": {"query": "A-1"}}, {"final": "found A-1"}])
    agent = Agent(lambda history: next(script), TOOLS, run_id="run-recorded", on_event=events.append)
    assert agent.start("find A-1") == "done"
    evidence.runs["run-recorded"] = {"run_id": "run-recorded", "status": "done", "requester": "U0ASKER",
                                     "pending_key": None, "command": None, "lease_owner": None,
                                     "lease_expires_at": None, "version": 3, "origin": "{}",
                                     "state": dump_without_history(agent.state)}
    evidence.histories["run-recorded"] = agent.state["history"]
    evidence.events["run-recorded"] = [{"seq": i + 1, **e} for i, e in enumerate(events)]
    evidence.steps["run-recorded"] = {1, 2}
    return "run-recorded"


def test_a_recorded_run_replays_and_a_tampered_record_is_caught():
    evidence = clean()
    run_id = recorded_run(evidence)
    assert broken(evidence) == {}
    for event in evidence.events[run_id]:
        if event["type"] == "decision" and event.get("kind") == "tool":
            event["args"] = {"query": "A-2"}  # the record says the model asked for something else
    assert "I7" in broken(evidence)


RULES = """
rules:
  - name: customer-notes
    tool: send_note
    when: args.to.endsWith("@example.com")
    approvers: [S0ONCALL, U0LEAD]
    quorum: 2
  - name: small-credits
    tool: apply_credit
    when: args.amount <= 10
    decision: allow
  - name: large-credits
    tool: apply_credit
    when: args.amount > 500
    decision: deny
    reason: credits above 500 go through finance
"""
TWO_PEOPLE = Policy(approvers=frozenset({"U0LEAD"}), file=RULES)
"""Notes to customers need two of on-call and the lead; small credits run unasked, large ones never."""


def quorum_broken(votes: list[dict], policy: Policy = TWO_PEOPLE, quorum: int = 2,
                  requester: str = "U0ASKER") -> dict[str, list[str]]:
    """What breaks when the clean run's note ran after these votes, asked with this quorum."""
    evidence = clean()
    evidence.runs[RUN]["requester"] = requester
    evidence.approvals["apr_one"]["quorum"] = quorum
    evidence.votes["apr_one"] = votes
    return {name: found for name, found in check(evidence, policy).items() if found}


def test_a_note_two_distinct_allowed_people_approved_breaks_nothing():
    assert quorum_broken([vote("U0ONCALL1", seq=1), vote("U0LEAD", seq=2)]) == {}


@pytest.mark.parametrize("votes, why", [
    ([vote("U0LEAD")], "one approval where the rule requires two"),
    ([vote("U0LEAD", seq=1), vote("U0LEAD", seq=2)], "the same person counted twice"),
    ([vote("U0STRANGER", seq=1), vote("U0LEAD", seq=2)], "a person the rule does not name"),
    ([vote("U0ASKER", seq=1), vote("U0LEAD", seq=2)], "the requester approving their own run"),
    ([vote("U0ONCALL1", seq=1), vote("U0LEAD", seq=2), vote("U0ONCALL2", approved=False, seq=3)],
     "an approval someone allowed denied"),
])
def test_a_note_that_ran_short_of_its_quorum_is_caught(votes, why):
    assert "I8" in quorum_broken(votes), why


def test_the_approvals_own_quorum_counts_even_where_the_policy_asks_fewer():
    assert "I8" in quorum_broken([vote("U0LEAD")], policy=POLICY, quorum=2)
    assert quorum_broken([vote("U0LEAD")], policy=POLICY, quorum=1) == {}


def test_self_approval_counts_where_the_rule_allows_it():
    selfish = Policy(approvers=frozenset({"U0LEAD"}), file=RULES.replace("quorum: 2", "quorum: 2\n"
                                                                         "    allow_self_approval: true"))
    votes = [vote("U0ONCALL1", seq=1), vote("U0LEAD", seq=2)]
    assert quorum_broken(votes, policy=selfish, requester="U0ONCALL1") == {}
    assert "I8" in quorum_broken(votes, requester="U0ONCALL1")


def with_credit(amount: int, rule: str | None) -> Evidence:
    """The clean run, with its first call a credit that ran unasked (`allowed_by` the rule named)."""
    evidence = clean()
    key, args = f"{RUN}:1", {"account": "A-1", "amount": amount}
    evidence.histories[RUN] = [{"role": "assistant", "step": 1, "tool": "apply_credit", "args": args,
                                "call_id": "call-1"}]
    at = next(i for i, e in enumerate(evidence.events[RUN]) if e["type"] == "tool_executed")
    started = {"seq": 0, "type": "execution_started", "key": key, "tool": "apply_credit",
               **({"allowed_by": rule} if rule else {})}
    evidence.events[RUN][at:at] = [started]
    for seq, event in enumerate(evidence.events[RUN], start=1):
        event["seq"] = seq
    evidence.ledger[key] = {"key": key, "status": "succeeded"}
    evidence.effects.insert(0, {"tool": "apply_credit", "key": key, "effect": True,
                                "digest": call_digest("apply_credit", args, key)})
    evidence.votes["apr_one"] = [vote("U0ONCALL1", seq=1), vote("U0LEAD", seq=2)]
    evidence.approvals["apr_one"]["quorum"] = 2
    return evidence


def test_a_credit_the_policy_allows_by_the_rule_its_execution_names_breaks_nothing():
    assert {name: found for name, found in check(with_credit(5, "small-credits"), TWO_PEOPLE).items() if found} == {}


@pytest.mark.parametrize("amount, rule, policy, why", [
    (50, "small-credits", TWO_PEOPLE, "no rule allows a credit of 50: it should have been asked"),
    (900, "small-credits", TWO_PEOPLE, "the policy denies a credit of 900"),
    (5, "large-credits", TWO_PEOPLE, "the rule its execution names is not the one that allows it"),
    (5, "small-credits", POLICY, "the built-in policy allows no side effect unasked"),
    (5, None, TWO_PEOPLE, "an execution that names no rule needs an approval"),
])
def test_an_unasked_credit_the_policy_does_not_allow_so_is_caught(amount, rule, policy, why):
    assert "I1" in broken_under(with_credit(amount, rule), policy), why


def test_an_unasked_credit_with_other_arguments_than_its_run_proposed_is_caught():
    evidence = with_credit(5, "small-credits")
    evidence.histories[RUN][0]["args"] = {"account": "A-1", "amount": 4}
    assert "I1" in broken_under(evidence, TWO_PEOPLE)


def test_an_approved_call_the_policy_denies_is_caught():
    evidence = clean()
    args = {"account": "A-1", "amount": 900}
    evidence.approvals["apr_one"].update(tool="apply_credit", args=json.dumps(args),
                                         digest=call_digest("apply_credit", args, KEY))
    evidence.effects[0].update(tool="apply_credit", digest=call_digest("apply_credit", args, KEY))
    assert broken_under(evidence, POLICY) == {}
    assert "I1" in broken_under(evidence, TWO_PEOPLE)


def broken_under(evidence: Evidence, policy: Policy) -> dict[str, list[str]]:
    return {name: found for name, found in check(evidence, policy).items() if found}


# -- a call run under a grant ("Approve + allow similar") ------------------------------------------------

GRANTING = Policy(approvers=frozenset({"U0LEAD"}), file="""
rules:
  - name: notes
    tool: send_note
    approvers: [U0LEAD]
    grant: {for: 30m, same: [to], scope: run}
""")
GRANTED_KEY = f"{RUN}:3"
GRANTED_ARGS = {"to": "ada@example.com", "text": "and again"}


def with_granted_note(**grant_changes) -> Evidence:
    """The clean run, then a second note (same `to`) run under the grant its approval made."""
    evidence = clean()
    evidence.histories[RUN] = [{"role": "assistant", "step": 3, "tool": "send_note", "args": GRANTED_ARGS,
                                "call_id": "call-3"}]
    started = T0 + timedelta(seconds=20)
    evidence.events[RUN].append({"seq": 12, "type": "execution_started", "key": GRANTED_KEY, "tool": "send_note",
                                 "granted_by": "grt_1", "at": started})
    evidence.effects.append({"tool": "send_note", "key": GRANTED_KEY, "effect": True,
                             "digest": call_digest("send_note", GRANTED_ARGS, GRANTED_KEY)})
    evidence.grants["grt_1"] = {
        "grant_id": "grt_1", "approval_id": "apr_one", "run_id": RUN, "requester": "U0ASKER", "tool": "send_note",
        "rule": "notes", "same": json.dumps({"to": "ada@example.com"}), "scope": "run", "created_by": "U0LEAD",
        "created_at": T0 + timedelta(seconds=5), "expires_at": T0 + timedelta(minutes=30), "revoked_at": None,
        **grant_changes}
    return evidence


def test_a_call_a_live_grant_covered_needs_no_approval_of_its_own():
    assert check(with_granted_note(), GRANTING)["I1"] == []


@pytest.mark.parametrize("changes, why", [
    ({"revoked_at": T0 + timedelta(seconds=10)}, "revoked before the call started"),
    ({"expires_at": T0 + timedelta(seconds=15)}, "expired before the call started"),
    ({"same": json.dumps({"to": "bob@example.com"})}, "made for another recipient"),
    ({"created_by": "U0STRANGER"}, "made by someone not allowed to approve the call"),
    ({"scope": "run", "run_id": "run-other"}, "made in another run"),
])
def test_a_call_run_under_a_grant_that_did_not_cover_it_is_caught(changes, why):
    assert check(with_granted_note(**changes), GRANTING)["I1"], why


def test_a_grant_the_policy_never_offered_covers_nothing():
    assert check(with_granted_note(), TWO_PEOPLE)["I1"]


def requested_again(evidence: Evidence) -> None:
    """The call first expired with nobody deciding, then its requester asked again and it was approved."""
    first = {**evidence.approvals["apr_one"], "approval_id": "apr_old", "status": "expired", "decided_by": None,
             "decided_at": None, "consumed_at": None, "requested_at": T0 - timedelta(minutes=40),
             "expires_at": T0 - timedelta(minutes=10)}
    evidence.approvals["apr_one"]["requested_at"] = T0
    evidence.approvals["apr_old"] = first
    evidence.events[RUN][6:6] = [{"seq": 6, "type": "approval_expired", "approval_id": "apr_old", "key": KEY},
                                 {"seq": 6, "type": "requested_again", "key": KEY}]


def test_a_call_run_on_the_approval_that_asked_again_for_it_breaks_nothing():
    assert broken(mutate(requested_again)) == {}


def test_a_call_run_on_an_approval_that_expired_is_caught_even_beside_a_later_one():
    def ran_on_the_expired_one(evidence: Evidence) -> None:
        requested_again(evidence)
        evidence.approvals["apr_one"].update(status="pending", decided_by=None, decided_at=None, consumed_at=None)
        evidence.runs[RUN].update(status="awaiting_approval", pending_key=KEY)
        evidence.votes = {}

    found = broken(mutate(ran_on_the_expired_one))
    assert "not approved by an allowed person" in found["I1"][0]
    assert found["I3"] == [f"apr_one ({KEY}) is pending but its call is in the ledger"]
