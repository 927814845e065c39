"""Receipts through the real approval API: a decided approval's answer carries its signed receipt,
and the client's `verify_receipt` accepts it for exactly the call that was approved and refuses it
for other arguments, another tool, another key, a denial or a changed byte; on SQLite and PostgreSQL."""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from scenarios.drive import APPROVER
from signoff.client import InvalidReceipt, Signoff, verify_receipt
from signoff.receipts import private_key_pem, public_key_pem
from tests.approval_server import ApprovalServer, Person, deciding

pytestmark = pytest.mark.slow

POLICY = """
rules:
  - name: small refunds run
    tool: refund
    when: args.amount < 10
    decision: allow
"""


@pytest.fixture(scope="module")
def signing_key() -> Iterator[tuple[Path, bytes]]:
    """A signing key's file, as `signoff keys signing create` makes one, and its public key's PEM."""
    key = Ed25519PrivateKey.generate()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "signing.pem"
        path.write_bytes(private_key_pem(key))
        yield path, public_key_pem(key.public_key())


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def server(request: pytest.FixtureRequest, signing_key: tuple[Path, bytes]) -> Iterator[ApprovalServer]:
    server = ApprovalServer(POLICY, kind=request.param, env={"SIGNOFF_SIGNING_KEY": str(signing_key[0])})
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def signoff(server: ApprovalServer) -> Iterator[Signoff]:
    with Signoff(server.url, server.new_key("receipts")) as client:
        yield client


def test_an_approved_call_s_receipt_verifies_for_exactly_its_arguments(
        server: ApprovalServer, signoff: Signoff, signing_key: tuple[Path, bytes]) -> None:
    public = signing_key[1]
    args = {"order": "R-1", "amount": 20}
    approval = signoff.request("refund", args, key="receipt-1")

    with deciding(Person(server, lambda a: a.run_id == approval.id).approve):
        approval.wait(timeout=120)

    assert approval.status == "approved" and approval.receipt is not None
    fields = verify_receipt(approval.receipt, public, tool="refund", args=args)
    assert (fields["decision"], fields["decided_by"][0]["user"]) == ("approved", APPROVER)
    assert fields["run_id"] == approval.id
    with pytest.raises(InvalidReceipt, match="other arguments"):
        verify_receipt(approval.receipt, public, tool="refund", args={"order": "R-1", "amount": 2000})
    with pytest.raises(InvalidReceipt, match="tool"):
        verify_receipt(approval.receipt, public, tool="delete_account", args=args)
    other = public_key_pem(Ed25519PrivateKey.generate().public_key())
    with pytest.raises(InvalidReceipt, match="not trusted"):
        verify_receipt(approval.receipt, other, tool="refund", args=args)
    changed = copy.deepcopy(approval.receipt)
    changed["receipt"]["decided_by"][0]["user"] = "U0ATTACKER"
    with pytest.raises(InvalidReceipt, match="changed after it was signed"):
        verify_receipt(changed, public, tool="refund", args=args)
    assert approval.start() == args  # the receipt came before the call: it is still startable once


def test_a_denied_call_s_receipt_lets_nothing_run(server: ApprovalServer, signoff: Signoff,
                                                  signing_key: tuple[Path, bytes]) -> None:
    args = {"order": "R-2", "amount": 30}
    approval = signoff.request("refund", args, key="receipt-2")

    with deciding(lambda: Person(server, lambda a: a.run_id == approval.id).deny("not this one")):
        approval.wait(timeout=120)

    assert approval.status == "denied" and approval.receipt is not None
    assert approval.receipt["receipt"]["decision"] == "denied"
    with pytest.raises(InvalidReceipt, match="denied"):
        verify_receipt(approval.receipt, signing_key[1], tool="refund", args=args)


def test_a_call_the_policy_allows_has_its_receipt_once_it_starts(signoff: Signoff,
                                                                   signing_key: tuple[Path, bytes]) -> None:
    args = {"order": "R-3", "amount": 5}
    approval = signoff.request("refund", args, key="receipt-3")
    before = approval.receipt

    approval.start()
    started = signoff.get(approval.id)

    assert before is None and started.receipt is not None
    fields = verify_receipt(started.receipt, signing_key[1], tool="refund", args=args)
    assert (fields["decision"], fields["rule"]) == ("allowed", "small refunds run")
