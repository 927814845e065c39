"""What a card shows besides its approval is read by the runner, from the store, for the notifier
(which reads nothing): a decided call's grant and receipt, however many grants were made since, on
memory, SQLite and PostgreSQL alike."""

from __future__ import annotations

from store_harness import APPROVER, LEASE, Told
from test_store_approvals import WINDOW, await_approval
from test_store_receipts import KEY, await_quorum

from signoff.runtime import approval_commands
from signoff.runtime.cards import ALONE
from signoff.runtime.failpoints import Failpoints
from signoff.runtime.ports import Store
from signoff.runtime.records import Decided
from signoff.runtime.telling import GRANTS_LOOKED_AT, Teller

GRANTING = {"rule": "similar emails", "quorum": 1, "step_up_seconds": None,
            "grant": {"for_seconds": 600, "same": ["to"], "scope": "run"}}


def teller(store: Store) -> Teller:
    return Teller(store, Told(), failpoints=Failpoints(), worker_id="w1", lease=LEASE)


def granted(store: Store, run_id: str) -> Decided:
    approval_id = await_quorum(store, run_id, **GRANTING)
    decided = approval_commands.decide(store, approval_id, approved=True, user=APPROVER, grant=True, signer=KEY, start_within=WINDOW)
    assert isinstance(decided, Decided) and decided.grant is not None
    return decided


def test_a_decided_card_shows_the_grant_it_made_however_many_were_made_since(store: Store) -> None:
    decided = granted(store, "run-first")
    for n in range(GRANTS_LOOKED_AT + 1):  # more than a search of the newest grants would look at
        granted(store, f"run-{n}")
    run = store.get_run("run-first", history=False)

    card = teller(store).card_of(run, store.get_approval(decided.approval.approval_id))

    assert card.grant is not None and card.grant.grant_id == decided.grant.grant_id
    assert card.receipt is not None and card.receipt == store.receipt_of(approval_id=decided.approval.approval_id)
    assert card.calls == ()


def test_a_pending_call_of_its_own_needs_nothing_read(store: Store) -> None:
    approval = await_approval(store)
    assert teller(store).card_of(store.get_run(approval.run_id, history=False), approval) is ALONE
