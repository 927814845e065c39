"""A decided card shows its decision's signed receipt in short, the same fingerprint the stored receipt
has; without a signing key there is no receipt, and the card says nothing of one."""

from __future__ import annotations

import json

from bot_fakes import final, tool_call
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from signoff.bot.slack.blocks import APPROVE_ACTION, DENY_ACTION
from signoff.receipts import fingerprint, key_id, private_key_pem, receipt_problem


def refund(signoff) -> str:
    signoff.script.decisions = [tool_call("issue_refund", order_id="42", amount_usd=19.99), final("Refunded.")]
    assert signoff.command("Refund order 42", user="U0ASKER").status == 200
    return signoff.only_run().run_id


def signing_key(tmp_path) -> tuple[str, Ed25519PrivateKey]:
    key = Ed25519PrivateKey.generate()
    path = tmp_path / "signing.pem"
    path.write_bytes(private_key_pem(key))
    return str(path), key


def test_an_approved_card_shows_its_receipt_s_fingerprint(make_signoff, tmp_path, ledger):
    path, key = signing_key(tmp_path)
    signoff = make_signoff(SIGNOFF_SIGNING_KEY=path)
    run_id = refund(signoff)

    assert signoff.click(signoff.approval_message(), APPROVE_ACTION, user="U0LEAD").status == 200

    approval = signoff.runner.store.approval_for_key(f"{run_id}:1")
    receipt = signoff.runner.store.receipt_of(approval_id=approval.approval_id)
    assert receipt is not None and receipt_problem(receipt, [key.public_key()]) is None
    assert receipt["receipt"]["decided_by"][0]["user"] == "U0LEAD"
    card = json.dumps(signoff.approval_message()["blocks"])
    assert f"receipt {fingerprint(receipt)}" in card and key_id(key.public_key()) in card
    assert ledger.calls == {f"{run_id}:1": 1}


def test_a_denied_card_shows_its_receipt_too(make_signoff, slack, tmp_path, ledger):
    path, _ = signing_key(tmp_path)
    signoff = make_signoff(SIGNOFF_SIGNING_KEY=path)
    run_id = refund(signoff)

    signoff.click(signoff.approval_message(), DENY_ACTION, user="U0LEAD")
    signoff.submit_deny(slack.last("views.open")["view"], "U0LEAD", "wrong customer")

    approval = signoff.runner.store.approval_for_key(f"{run_id}:1")
    receipt = signoff.runner.store.receipt_of(approval_id=approval.approval_id)
    assert approval.status == "denied" and receipt is not None
    assert (receipt["receipt"]["decision"], receipt["receipt"]["start_by"]) == ("denied", None)
    assert f"receipt {fingerprint(receipt)}" in json.dumps(signoff.approval_message()["blocks"])
    assert ledger.total == 0


def test_without_a_signing_key_no_receipt_is_made_or_shown(signoff):
    run_id = refund(signoff)

    signoff.click(signoff.approval_message(), APPROVE_ACTION, user="U0LEAD")

    approval = signoff.runner.store.approval_for_key(f"{run_id}:1")
    assert approval.status == "consumed"
    assert signoff.runner.store.receipt_of(approval_id=approval.approval_id) is None
    assert "receipt" not in json.dumps(signoff.approval_message()["blocks"])
