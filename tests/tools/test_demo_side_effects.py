from __future__ import annotations

import json
from email import policy
from email.parser import BytesParser
from pathlib import Path
from typing import Any

import pytest
from demo_race import race

from signoff.tools.base import ToolFailed
from signoff.tools.demo import demo_tools
from signoff.tools.demo.send_email import SendEmailArgs

EMAIL = {"to": "ada@example.com", "subject": "Your refund", "body": "Hi Ada,\n\nYour refund of $12.50 is on its way.\n"}
REFUND = {"order_id": "A-1001", "amount_usd": "12.50", "reason": "Arrived late"}


@pytest.fixture
def outbox(tmp_path):
    return tmp_path / "outbox"


@pytest.fixture
def tools(outbox):
    return {tool.name: tool for tool in demo_tools(outbox)}


def send(tools, key, **overrides):
    tool = tools["send_email"]
    return tool.fn(tool.validate({**EMAIL, **overrides}), key)


def refund(tools, key, **overrides):
    tool = tools["issue_refund"]
    return tool.fn(tool.validate({**REFUND, **overrides}), key)


def emails(outbox: Path) -> list[Path]:
    return sorted(outbox.glob("*.eml"))


def ledger(outbox: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (outbox / "refunds.jsonl").read_text().splitlines()]


def test_side_effect_tools_are_gated_idempotent_and_bounded(tools):
    for name in ("send_email", "issue_refund"):
        assert tools[name].side_effect and tools[name].idempotent
        assert tools[name].timeout_s == 10.0


def test_send_email_twice_with_one_key_writes_one_file_and_returns_the_same_result(tools, outbox):
    first = send(tools, "run-abc:3")
    [path] = emails(outbox)
    written = path.read_bytes()
    assert send(tools, "run-abc:3") == first
    assert emails(outbox) == [path]
    assert path.read_bytes() == written
    assert first["path"] == str(path.resolve())
    assert (first["to"], first["subject"]) == ("ada@example.com", "Your refund")


def test_send_email_with_different_keys_writes_two_files(tools, outbox):
    first, second = send(tools, "run-abc:3"), send(tools, "run-abc:4")
    assert len(emails(outbox)) == 2
    assert first["message_id"] != second["message_id"]
    assert first["path"] != second["path"]


def test_the_eml_file_is_an_rfc_5322_message(tools, outbox):
    result = send(tools, "run-abc:3", subject="Délai de livraison")
    raw = Path(result["path"]).read_bytes()
    assert b"\r\n" in raw and b"\n" not in raw.replace(b"\r\n", b"")
    message = BytesParser(policy=policy.default).parsebytes(raw)
    assert message["To"] == "ada@example.com"
    assert message["Subject"] == "Délai de livraison" == result["subject"]
    assert message["From"] and message["Date"] == result["date"]
    assert message["Message-ID"] == result["message_id"]
    assert message["X-Signoff-Idempotency-Key"] == "run-abc:3"
    assert message.get_content().replace("\r\n", "\n") == EMAIL["body"]


def test_file_names_are_safe_and_distinct_for_keys_that_sanitise_alike(tools, outbox):
    keys = ["run-abc:3", "run-abc/3", "run-abc_3", "../../etc/passwd:1", ".hidden:2"]
    paths = [Path(send(tools, key)["path"]) for key in keys]
    assert len(set(paths)) == len(keys)
    for path in paths:
        assert path.parent == outbox.resolve()
        assert ":" not in path.name and "/" not in path.name and not path.name.startswith(".")
    assert paths[0].name.startswith("run-abc_3-")
    assert not list(outbox.glob(".tmp-*"))


def test_reusing_a_key_for_a_different_email_fails_and_changes_nothing(tools, outbox):
    send(tools, "run-abc:3")
    [path] = emails(outbox)
    before = path.read_bytes()
    with pytest.raises(ToolFailed, match="already used for a different email"):
        send(tools, "run-abc:3", body="Something else entirely.")
    assert emails(outbox) == [path] and path.read_bytes() == before


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"to": "not-an-address"}, "to"),
        ({"to": "ada@example"}, "to"),
        ({"to": "ada@@example.com"}, "to"),
        ({"to": "ada@example.com, eve@example.com"}, "to"),
        ({"to": "ada@example.com\nBcc: eve@example.com"}, "to"),
        ({"subject": "Hi\r\nBcc: eve@example.com"}, "subject"),
        ({"subject": "   "}, "subject"),
        ({"body": ""}, "body"),
        ({"cc": "eve@example.com"}, "cc"),
    ],
)
def test_send_email_refuses_invalid_arguments_before_writing(tools, outbox, overrides, field):
    with pytest.raises(ValueError, match=f"invalid arguments: {field}:"):
        send(tools, "run-abc:3", **overrides)
    assert not outbox.exists()


def test_send_email_lowercases_the_domain_but_keeps_the_local_part():
    assert SendEmailArgs(to=" Ada.L+news@Example.COM ", subject="s", body="b").to == "Ada.L+news@example.com"


@pytest.mark.slow
def test_one_key_from_several_processes_writes_one_email(outbox):
    outcomes = race("send_email", [(outbox, EMAIL, "run-race:1")] * 4)
    assert [status for status, _ in outcomes] == ["ok"] * 4
    assert len({json.dumps(result, sort_keys=True) for _, result in outcomes}) == 1
    assert len(emails(outbox)) == 1


def test_issue_refund_twice_with_one_key_records_once_and_returns_the_same_result(tools, outbox):
    first = refund(tools, "run-abc:5")
    assert refund(tools, "run-abc:5") == first
    assert refund(tools, "run-abc:5", amount_usd=12.5) == first
    [record] = ledger(outbox)
    assert record["key"] == "run-abc:5" and record["amount_usd"] == "12.50"
    assert first["refund_id"] == record["refund_id"] and first["refundable_usd_after"] == "29.50"


def test_issue_refund_with_different_keys_records_both_and_lookup_sees_them(tools, outbox):
    refund(tools, "run-abc:5")
    refund(tools, "run-abc:6", amount_usd="7.50")
    assert [r["key"] for r in ledger(outbox)] == ["run-abc:5", "run-abc:6"]
    [order] = tools["lookup_orders"].fn({"order_id": "A-1001"}, "run-abc:7")["orders"]
    assert (order["refunded_usd"], order["refundable_usd"]) == ("20.00", "22.00")


def test_reusing_a_key_for_a_different_refund_fails_and_records_nothing(tools, outbox):
    refund(tools, "run-abc:5")
    with pytest.raises(ToolFailed, match="other arguments"):
        refund(tools, "run-abc:5", amount_usd="13.00")
    assert len(ledger(outbox)) == 1


def test_a_refund_above_what_is_still_refundable_is_refused(tools, outbox):
    refund(tools, "run-abc:5", amount_usd="30")
    with pytest.raises(ToolFailed, match=r"\$20.00 is more than the \$12.00 still refundable on A-1001"):
        refund(tools, "run-abc:6", amount_usd="20")
    with pytest.raises(ToolFailed, match="more than the"):
        refund(tools, "run-abc:7", order_id="A-1006", amount_usd="1")  # already refunded in full
    assert len(ledger(outbox)) == 1


def test_a_refund_for_an_unknown_order_is_refused(tools, outbox):
    with pytest.raises(ToolFailed, match="unknown order 'Z-9999'; nothing was refunded"):
        refund(tools, "run-abc:5", order_id="z-9999")
    assert ledger_lines(outbox) == []


def ledger_lines(outbox: Path) -> list[str]:
    path = outbox / "refunds.jsonl"
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"amount_usd": "0"}, "amount_usd"),
        ({"amount_usd": "-5"}, "amount_usd"),
        ({"amount_usd": "1.005"}, "amount_usd"),
        ({"amount_usd": "lots"}, "amount_usd"),
        ({"order_id": "1001"}, "order_id"),
        ({"reason": ""}, "reason"),
        ({"notify": True}, "notify"),
    ],
)
def test_issue_refund_refuses_invalid_arguments(tools, outbox, overrides, field):
    with pytest.raises(ValueError, match=f"invalid arguments: {field}:"):
        refund(tools, "run-abc:5", **overrides)
    assert not outbox.exists()


def test_a_torn_last_ledger_line_is_not_a_refund_and_is_repaired(tools, outbox):
    refund(tools, "run-abc:5")
    with open(outbox / "refunds.jsonl", "a") as handle:
        handle.write('{"key": "run-abc:6", "order_')  # a crash in the middle of an append
    refund(tools, "run-abc:6")
    assert [r["key"] for r in ledger(outbox)] == ["run-abc:5", "run-abc:6"]


def test_a_corrupt_ledger_stops_refunds(tools, outbox):
    refund(tools, "run-abc:5")
    with open(outbox / "refunds.jsonl", "a") as handle:
        handle.write("not json\n")
    with pytest.raises(ToolFailed, match="corrupt at line 2"):
        refund(tools, "run-abc:6")


@pytest.mark.slow
def test_one_key_from_several_processes_is_recorded_once(outbox):
    outcomes = race("issue_refund", [(outbox, REFUND, "run-race:1")] * 4)
    assert [status for status, _ in outcomes] == ["ok"] * 4
    assert len({json.dumps(result, sort_keys=True) for _, result in outcomes}) == 1
    assert len(ledger(outbox)) == 1


@pytest.mark.slow
def test_racing_refunds_never_overdraw_an_order(outbox):
    calls = [(outbox, {**REFUND, "amount_usd": "10.00"}, f"run-race:{i}") for i in range(6)]
    outcomes = race("issue_refund", calls)
    statuses = sorted(status for status, _ in outcomes)
    assert statuses == ["failed"] * 2 + ["ok"] * 4  # $42.00 holds four refunds of $10.00
    assert sum(float(r["amount_usd"]) for r in ledger(outbox)) == 40.0
