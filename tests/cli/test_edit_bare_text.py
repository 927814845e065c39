"""Editing a call at the terminal: text typed for a text argument is that text, quotes or not."""

from __future__ import annotations

import json
from email import message_from_bytes

EMAIL = {"tool": "send_email", "args": {"to": "ada@example.com", "subject": "Your refund",
                                        "body": "Dear Ada, your refund is on its way."}}
REFUND = {"tool": "issue_refund", "args": {"order_id": "A-1001", "amount_usd": 42, "reason": "Damaged in transit"}}


def script(signoff, *decisions: dict) -> str:
    path = signoff.cwd / "script.json"
    path.write_text(json.dumps([*decisions, {"final": "done"}]))
    return f"scripted:{path}"


def subjects(signoff) -> list[str]:
    return [str(message_from_bytes(path.read_bytes())["Subject"]) for path in sorted(signoff.outbox.glob("*.eml"))]


def test_bare_text_typed_for_a_text_argument_is_taken_as_that_text(signoff):
    answers = "e\n\nYour refund of $42.00\n\na\n"  # keep to, retype subject without quotes, keep body

    result = signoff.here("run", "write to Ada", "--model", script(signoff, EMAIL), answers=answers)

    assert result.code == 0, result.out + result.err
    assert "not JSON" not in result.out
    assert subjects(signoff) == ["Your refund of $42.00"]


def test_text_in_quotes_is_still_the_text_inside_them(signoff):
    answers = 'e\n\n"Quoted subject"\n\na\n'

    result = signoff.here("run", "write to Ada", "--model", script(signoff, EMAIL), answers=answers)

    assert result.code == 0, result.out + result.err
    assert subjects(signoff) == ["Quoted subject"]


def test_a_number_argument_still_wants_json(signoff):
    answers = "e\n\nforty\n40\n\na\n"  # keep order_id; a word for the amount is refused, then 40 taken

    result = signoff.here("run", "refund A-1001", "--model", script(signoff, REFUND), answers=answers)

    assert result.code == 0, result.out + result.err
    assert '    not JSON (Expecting value: line 1 column 1 (char 0)); text goes in quotes, e.g. "like this"' in result.out
    assert 'amount_usd: "42.00" -> "40.00"' in result.out
