"""The store keeps each decision's signed receipt in the decision's own transaction, on every adapter:
one receipt for the decision that won, none for a double click, one for a call a rule let start,
and the ledger's calls and the receipts check against each other."""

from __future__ import annotations

from datetime import timedelta

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from store_harness import APPROVER, LEASE, TTL, ManualClock, create, step
from test_store_approvals import ARGS, WINDOW, await_approval, pending_call

from signoff.canonical import arguments_digest
from signoff.receipts import receipt_problem
from signoff.runtime import approval_commands, starting_calls
from signoff.runtime.adapters.sql import SqlStore
from signoff.runtime.audit import stamp
from signoff.runtime.effects import AskAbout
from signoff.runtime.ports import Store
from signoff.runtime.receipt_check import ExecutionRow, ReceiptRow, receipt_problems
from signoff.runtime.records import AlreadyDecided, Counted, Decided, Fresh
from signoff.runtime.rules import step_write

KEY = Ed25519PrivateKey.generate()


def test_the_decision_that_wins_is_signed_once_and_kept_with_it(store: Store, clock: ManualClock) -> None:
    approval = await_approval(store)

    won = approval_commands.decide(store, approval.approval_id, approved=True, user=APPROVER, signer=KEY, start_within=WINDOW)
    again = approval_commands.decide(store, approval.approval_id, approved=False, user="U0OTHER", signer=KEY, start_within=WINDOW)

    assert isinstance(won, Decided) and isinstance(again, AlreadyDecided)
    assert won.receipt is not None and receipt_problem(won.receipt, [KEY.public_key()]) is None
    fields = won.receipt["receipt"]
    assert (fields["approval_id"], fields["decision"], fields["digest"]) == (
        approval.approval_id, "approved", approval.digest)
    assert fields["arguments_digest"] == arguments_digest("send_email", ARGS)
    assert [voter["user"] for voter in fields["decided_by"]] == [APPROVER]
    assert (fields["decided_at"], fields["start_by"]) == (stamp(clock.now), stamp(clock.now + WINDOW))
    assert store.receipt_of(approval_id=approval.approval_id) == won.receipt
    assert [p for p in store.proofs("run-a") if isinstance(p, ReceiptRow)] == [ReceiptRow(won.receipt)]


def test_a_started_call_checks_against_its_approval_s_receipt(store: Store) -> None:
    approval = await_approval(store)
    approval_commands.decide(store, approval.approval_id, approved=True, user=APPROVER, signer=KEY, start_within=WINDOW)
    store.claim("run-a", "w1", LEASE)

    started = starting_calls.begin_execution(store, "run-a", "send_email", ARGS, "run-a:1", owner="w1", lease=LEASE,
                                    dispatch_window=WINDOW, signer=KEY)

    assert isinstance(started, Fresh)
    proofs = store.proofs("run-a")
    assert ExecutionRow(run_id="run-a", key="run-a:1", tool="send_email", digest=approval.digest, status="started",
                        approval_id=approval.approval_id) in proofs
    assert receipt_problems(proofs, [KEY.public_key()]) == []
    other = Ed25519PrivateKey.generate().public_key()
    assert any("not trusted here" in p for p in receipt_problems(proofs, [other]))


def test_a_call_a_rule_lets_start_gets_its_receipt_in_the_same_transaction(store: Store) -> None:
    create(store, "run-b")
    store.claim("run-b", "w1", LEASE)

    started = starting_calls.begin_execution(store, "run-b", "send_email", ARGS, "run-b:1", owner="w1", lease=LEASE,
                                    dispatch_window=WINDOW, allowed_by="small emails", signer=KEY, policy="abc123")

    assert isinstance(started, Fresh)
    receipt = store.receipt_of(key="run-b:1")
    assert receipt is not None and receipt["receipt"]["decision"] == "allowed"
    assert (receipt["receipt"]["rule"], receipt["receipt"]["policy_digest"]) == ("small emails", "abc123")
    assert receipt_problems(store.proofs("run-b"), [KEY.public_key()]) == []


def test_a_call_started_with_no_receipt_is_named(store: Store) -> None:
    create(store, "run-c")
    store.claim("run-c", "w1", LEASE)
    starting_calls.begin_execution(store, "run-c", "send_email", ARGS, "run-c:1", owner="w1", lease=timedelta(seconds=30),
                          dispatch_window=WINDOW, allowed_by="small emails")  # no signing key then

    [problem] = receipt_problems(store.proofs("run-c"), [KEY.public_key()])

    assert problem.startswith("receipt of call run-c:1 (run run-c) is missing")


def await_quorum(store: Store, run_id: str = "run-q", **asked: object) -> str:
    """A run whose call a rule asks two people to approve, with a fresh sign-in (or as `asked`
    says); its approval's id."""
    create(store, run_id)
    store.claim(run_id, "w1", LEASE)
    pending = {**pending_call(run_id, 1), "asked": {
        "rule": "two people", "policy": "abc123", "approvers": [], "quorum": 2, "ttl_seconds": 600,
        "allow_self_approval": False, "step_up_seconds": 300, **asked}}
    checkpoint = step(store.get_run(run_id).state,
                      {"role": "assistant", "step": 1, "tool": "send_email", "args": ARGS, "call_id": "c1"},
                      events=[{"type": "approval_requested", "key": pending["key"]}], effects=(AskAbout(pending["key"]),),
                      status="awaiting_approval", pending=pending)
    saved = store.save_step(run_id, owner="w1", version=1, checkpoint=checkpoint, write=step_write(checkpoint, TTL),
                            lease=LEASE)
    store.release(run_id, "w1")
    return saved.approvals[0].approval_id


def test_a_quorum_s_receipt_names_each_voter_the_rule_and_the_step_up(store: Store, clock: ManualClock) -> None:
    approval_id = await_quorum(store)
    signed_in = {"issuer": "https://id.example.com", "signed_in_at": stamp(clock.now), "max_age_seconds": 300}

    first = approval_commands.decide(store, approval_id, approved=True, user="U0FIRST", signer=KEY, start_within=WINDOW,
                         step_up=signed_in)
    counted_only = store.receipt_of(approval_id=approval_id)
    clock.advance(seconds=5)
    second = approval_commands.decide(store, approval_id, approved=True, user="U0SECOND", signer=KEY, start_within=WINDOW,
                          step_up=signed_in)

    assert isinstance(first, Counted) and counted_only is None  # a vote short of the quorum decides nothing
    assert isinstance(second, Decided) and second.receipt is not None
    assert store.receipt_of(approval_id=approval_id) == second.receipt
    fields = second.receipt["receipt"]
    assert [voter["user"] for voter in fields["decided_by"]] == ["U0FIRST", "U0SECOND"]
    assert (fields["rule"], fields["policy_digest"]) == ("two people", "abc123")
    assert fields["step_up"] == {"stepped_up": True, "signed_in_at": signed_in["signed_in_at"],
                                 "issuer": "https://id.example.com"}
    assert len([p for p in store.proofs("run-q") if isinstance(p, ReceiptRow)]) == 1


def test_an_approve_that_makes_a_grant_and_each_use_of_it_are_signed(store: Store) -> None:
    approval_id = await_quorum(store, "run-g", rule="similar emails", quorum=1, step_up_seconds=None,
                               grant={"for_seconds": 600, "same": ["to"], "scope": "run"})
    decided = approval_commands.decide(store, approval_id, approved=True, user=APPROVER, grant=True, signer=KEY, start_within=WINDOW)
    assert isinstance(decided, Decided) and decided.grant is not None and decided.receipt is not None
    store.claim("run-g", "w1", LEASE)

    used = starting_calls.begin_execution(store, "run-g", "send_email", {**ARGS, "body": "again"}, "run-g:2", owner="w1",
                                 lease=LEASE, dispatch_window=WINDOW, granted_by=decided.grant.grant_id, signer=KEY)

    assert isinstance(used, Fresh)
    assert decided.receipt["receipt"]["grant_id"] == decided.grant.grant_id
    receipt = store.receipt_of(key="run-g:2")
    assert receipt is not None and receipt_problem(receipt, [KEY.public_key()]) is None
    assert (receipt["receipt"]["decision"], receipt["receipt"]["grant_id"]) == ("granted", decided.grant.grant_id)
    assert receipt_problems(store.proofs("run-g"), [KEY.public_key()]) == []


def test_a_decision_whose_receipt_cannot_be_kept_is_not_kept_either(sql_store: SqlStore) -> None:
    approval = await_approval(sql_store)
    with sql_store.engine.begin() as conn:  # the receipts' table gone from under the store
        conn.execute(text("DROP TABLE receipts"))

    with pytest.raises(DBAPIError):
        approval_commands.decide(sql_store, approval.approval_id, approved=True, user=APPROVER, signer=KEY, start_within=WINDOW)

    kept = sql_store.get_approval(approval.approval_id)
    assert kept is not None and (kept.status, kept.votes, kept.decided_by) == ("pending", (), None)
    assert "approval_recorded" not in [event["type"] for event in sql_store.timeline("run-a")]
