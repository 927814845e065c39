"""Signed receipts as an operator meets them: a signing key made once and never overwritten, each
decision's receipt in the export, checked later without the database against the public key given;
a receipt changed by one byte, one dropped, or one signed by a key not given is named, exit 1."""

from __future__ import annotations

import json
import stat

import pytest


@pytest.fixture
def signed(signoff):
    """A run whose refund a person approved at the keyboard, with SIGNOFF_SIGNING_KEY set; its export."""
    made = signoff.here("keys", "signing", "create", "signing.pem")
    assert made.code == 0, made.err
    signoff.env["SIGNOFF_SIGNING_KEY"] = "signing.pem"
    ran = signoff.here("run", "--quiet", "refund order 1042", answers="a\n")
    assert ran.code in (0, 3), ran.err
    exported = signoff("audit", "export")  # a real process, as an operator runs it
    assert exported.code == 0, exported.err
    (signoff.cwd / "export.jsonl").write_text(exported.out)
    public = signoff.here("receipts", "public-key")
    assert public.code == 0, public.err
    (signoff.cwd / "public.pem").write_text(public.out)
    return exported.out.splitlines()


def receipts_in(lines: list[str]) -> list[int]:
    return [n for n, line in enumerate(lines) if json.loads(line)["record"] == "receipt"]


def test_a_signing_key_is_its_owners_alone_and_never_overwritten(signoff):
    made = signoff.here("keys", "signing", "create", "signing.pem")
    before = (signoff.cwd / "signing.pem").read_bytes()
    again = signoff.here("keys", "signing", "create", "signing.pem")

    assert made.code == 0 and "BEGIN PUBLIC KEY" in made.out
    assert stat.S_IMODE((signoff.cwd / "signing.pem").stat().st_mode) == 0o600
    assert again.code == 1 and "never overwritten" in again.err
    assert (signoff.cwd / "signing.pem").read_bytes() == before


def test_an_export_verifies_offline_with_the_public_key(signoff, signed):
    (signoff.cwd / "signoff.db").unlink()

    verified = signoff("audit", "verify", "--file", "export.jsonl", "--public-key", "public.pem")

    [receipt] = [json.loads(signed[n]) for n in receipts_in(signed)]
    assert receipt["receipt"]["receipt"]["decision"] == "approved"
    assert verified.code == 0, verified.out + verified.err
    assert "receipts intact: 1 receipt signed by a key given, 1 call started, each with its receipt" in verified.out


def test_a_receipt_changed_by_one_byte_is_named(signoff, signed):
    [n] = receipts_in(signed)
    approval_id = json.loads(signed[n])["receipt"]["receipt"]["approval_id"]
    changed = list(signed)
    changed[n] = changed[n].replace('"cli:', '"cla:', 1)  # who decided, one byte
    assert changed[n] != signed[n]
    (signoff.cwd / "changed.jsonl").write_text("\n".join(changed) + "\n")

    verified = signoff("audit", "verify", "--file", "changed.jsonl", "--public-key", "public.pem")

    assert verified.code == 1
    assert f"receipt of approval {approval_id}" in verified.out and "changed after it was signed" in verified.out


def test_a_dropped_receipt_is_named_by_its_approval(signoff, signed):
    [n] = receipts_in(signed)
    approval_id = json.loads(signed[n])["receipt"]["receipt"]["approval_id"]
    (signoff.cwd / "dropped.jsonl").write_text("\n".join(signed[:n] + signed[n + 1:]) + "\n")

    verified = signoff("audit", "verify", "--file", "dropped.jsonl", "--public-key", "public.pem")

    assert verified.code == 1
    assert f"receipt of approval {approval_id}" in verified.out and "is missing" in verified.out


def test_a_receipt_signed_by_a_key_not_given_is_named(signoff, signed):
    other = signoff.here("keys", "signing", "create", "other.pem")
    assert other.code == 0
    (signoff.cwd / "other-public.pem").write_text(other.out.split("\n", 1)[1])
    [n] = receipts_in(signed)
    approval_id = json.loads(signed[n])["receipt"]["receipt"]["approval_id"]

    verified = signoff("audit", "verify", "--file", "export.jsonl", "--public-key", "other-public.pem")
    both = signoff.here("audit", "verify", "--file", "export.jsonl", "--public-key", "other-public.pem",
                        "--public-key", "public.pem")

    assert verified.code == 1
    assert f"receipt of approval {approval_id}" in verified.out and "not trusted here" in verified.out
    assert both.code == 0, both.out


def test_without_a_public_key_receipts_are_said_to_be_unchecked(signoff, signed):
    verified = signoff.here("audit", "verify", "--file", "export.jsonl")

    assert verified.code == 0
    assert "1 receipt not checked: give the public key with --public-key" in verified.out


def test_check_says_which_key_signs_and_names_a_bad_key_file(signoff, signed):
    (signoff.cwd / "not-a-key.pem").write_text("hello")

    good = signoff.here("check")
    bad = signoff.here("check", env={"SIGNOFF_SIGNING_KEY": "not-a-key.pem"})

    assert any(line.startswith("ok receipts: each decision is signed with key ") for line in good.lines)
    assert any(line.startswith("FAIL receipts: SIGNOFF_SIGNING_KEY: not-a-key.pem is not a readable Ed25519")
               for line in bad.lines)


def test_public_key_says_there_are_no_receipts_without_a_signing_key(signoff):
    answered = signoff.here("receipts", "public-key")

    assert answered.code == 1 and "without it, decisions get no receipts" in answered.err


def test_a_call_s_ledger_row_dropped_with_its_receipt_is_named_from_the_audit_log(signoff, signed):
    gone = [n for n, line in enumerate(signed) if json.loads(line)["record"] in ("receipt", "execution")]
    approval_id = json.loads(signed[gone[0]])["receipt"]["receipt"]["approval_id"]
    (signoff.cwd / "both-gone.jsonl").write_text("\n".join(line for n, line in enumerate(signed) if n not in gone) + "\n")

    verified = signoff.here("audit", "verify", "--file", "both-gone.jsonl", "--public-key", "public.pem")

    assert verified.code == 1
    assert f"receipt of approval {approval_id}" in verified.out and "the audit log says" in verified.out


def test_an_export_of_the_format_before_receipts_still_verifies(signoff, signed):
    header = json.loads(signed[0])
    older = [json.dumps({**header, "format": 2})] + [
        line for line in signed[1:] if json.loads(line)["record"] not in ("receipt", "execution")]
    (signoff.cwd / "older.jsonl").write_text("\n".join(older) + "\n")

    verified = signoff.here("audit", "verify", "--file", "older.jsonl")

    assert header["format"] == 3
    assert verified.code == 0 and verified.out.startswith("intact: 1 run, ")
