"""Every surface that offers Approve shows every argument exactly, or offers no Approve: the card,
App Home, the full-arguments modal, the decided card and the terminal; end to end over signed HTTP.
"""

from __future__ import annotations

import dataclasses
import json
import re
from datetime import timedelta
from pathlib import Path

from bot_fakes import NOW, final, make_approval, make_run, tool_call
from pydantic import BaseModel
from slack_harness import buttons

from signoff.bot.arguments import ToolDisplay, argument_lines, read_literal
from signoff.bot.cli.rendering import approval_card
from signoff.bot.slack.argument_blocks import arguments_modal
from signoff.bot.slack.blocks import (
    APPROVE_ACTION,
    DENY_ACTION,
    EDIT_ACTION,
    VIEW_ARGS_ACTION,
    code_section_lines,
)
from signoff.bot.slack.home_tab import home_view
from signoff.bot.slack.messages import approval_message, decided_message
from signoff.runtime.state import call_digest
from signoff.tools.base import Tool
from tests.fakes.slack import block_kit_problems, view_problems

APPROVER_GUIDE = Path(__file__).resolve().parents[2] / "docs" / "approvers.md"
ATTACK = {
    "to": "attacker@evil.example",
    "subject": "Your refund\nto: ana@example.com" + "\n" * 30,
    "body": "Hi Ana, \u202egnp.exe\u202c ```rm -rf /``` &lt;not an entity&gt; <!channel>\u200b" + " refund" * 900,
}


class EmailArgs(BaseModel):
    to: str
    subject: str
    body: str


EMAIL = Tool("send_email", lambda args, key: None, side_effect=True, args_model=EmailArgs,
             description="Send one email (written to the outbox; once per key).")


def shown_lines(blocks) -> list[str]:
    """The argument lines a person reads in `blocks`."""
    return code_section_lines([b["text"]["text"] for b in blocks if b.get("type") == "section"])


def values(lines: list[str]) -> dict[str, object]:
    return {name: read_literal(value) for name, value in (line.split(": ", 1) for line in lines)}


def email_approval(args, **overrides):
    stored = json.loads(json.dumps(args, sort_keys=True))  # as the store keeps them: canonical, keys sorted
    return make_approval(tool="send_email", args=stored, **overrides)


# -- the surfaces, pure -----------------------------------------------------------------------------


def test_every_surface_shows_the_same_lines_in_the_tools_order():
    args = {"to": "ana@example.com", "subject": "Refund \u202e100", "body": "Dear Ana,\n```ok```"}
    approval, run, display = email_approval(args), make_run(), ToolDisplay.of(EMAIL)
    expected = argument_lines(approval.args, display)
    assert [line.split(":")[0] for line in expected] == ["to", "subject", "body"]
    decided = email_approval(args, status="approved", decided_by="U0LEAD", decided_at=NOW)
    terminal = approval_card(run, approval, EMAIL, display.secret_names, NOW).splitlines()
    surfaces = {
        "card": shown_lines(approval_message(run, approval, display=display).blocks),
        "decided card": shown_lines(decided_message(run, decided, display=display).blocks),
        "home": shown_lines(home_view("U0LEAD", [(run, approval)], [], displays={"send_email": display})["blocks"]),
        "modal": shown_lines(arguments_modal(run, approval, display)["blocks"]),
        "terminal": [line.removeprefix("|   ") for line in terminal if line.startswith("|   ")],
    }
    assert surfaces == dict.fromkeys(surfaces, expected)
    assert values(expected) == args


def test_a_card_too_short_for_the_arguments_offers_view_full_arguments_not_approve():
    approval, run, display = email_approval(ATTACK), make_run(), ToolDisplay.of(EMAIL)
    message = approval_message(run, approval, display=display)
    text = json.dumps(message.blocks, ensure_ascii=False)
    assert buttons({"blocks": message.blocks}) == [VIEW_ARGS_ACTION, DENY_ACTION]
    assert "too long to show in full here" in text and "View full arguments" in text
    # The short form names every argument; a long one by its size, never a cut value.
    short = shown_lines(message.blocks)
    assert short[0] == 'to: "attacker@evil.example"'
    assert [line.split(": ")[0] for line in short] == ["to", "subject", "body"]
    assert re.fullmatch(r"body: \(not shown here: [\d,]+ characters\)", short[2])
    assert block_kit_problems(message.blocks) == []


def test_home_offers_no_approve_beside_a_short_form():
    run, display = make_run(), ToolDisplay.of(EMAIL)
    short = email_approval(ATTACK, approval_id="apr_long")
    whole = email_approval({"to": "a@example.com", "subject": "s", "body": "b"}, approval_id="apr_short")
    view = home_view("U0LEAD", [(run, short), (run, whole)], [], displays={"send_email": display})
    offered = [(e["action_id"], e["value"].split(":")[0]) for b in view["blocks"] if b["type"] == "actions"
               for e in b["elements"]]
    assert offered == [(VIEW_ARGS_ACTION, "apr_long"), (DENY_ACTION, "apr_long"),  # its body is too long to edit here
                       (APPROVE_ACTION, "apr_short"), (DENY_ACTION, "apr_short"), (EDIT_ACTION, "apr_short")]
    assert view_problems(view) == []


def test_the_modal_holds_every_argument_byte_exact_with_approve_bound_to_the_same_digest():
    approval, run, display = email_approval(ATTACK), make_run(), ToolDisplay.of(EMAIL)
    view = arguments_modal(run, approval, display)
    assert view is not None and view_problems(view) == []
    assert values(shown_lines(view["blocks"])) == ATTACK
    [approve] = [e for b in view["blocks"] if b["type"] == "actions" for e in b["elements"]]
    assert (approve["action_id"], approve["value"]) == (APPROVE_ACTION, f"{approval.approval_id}:{approval.digest}")


def test_arguments_too_long_even_for_the_modal_are_decided_in_the_terminal():
    huge = {"to": "a@example.com", "subject": "s", "body": "&" * 100_000}  # 500k characters once escaped
    approval, run, display = email_approval(huge), make_run(), ToolDisplay.of(EMAIL)
    message = approval_message(run, approval, display=display)
    assert arguments_modal(run, approval, display) is None
    assert buttons({"blocks": message.blocks}) == [DENY_ACTION]
    assert f"`signoff runs resume {run.run_id}`" in json.dumps(message.blocks)


# -- the guide's picture is the real card -------------------------------------------------------------


def picture(blocks) -> str:
    """Blocks as a person reads them: mentions, dates and links as shown, entities undone, buttons in brackets."""
    def shown(text: str) -> str:
        text = re.sub(r"<!date\^\d+\^[^|]*\|([^>]*)>", r"\1", re.sub(r"<(?:@|!subteam\^)([US]\w+)>", r"@\1", text))
        text = re.sub(r"<https://[^|>]+\|([^>]*)>", r"\1", text)
        return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")

    out = []
    for block in blocks:
        match block["type"]:
            case "header" | "section":
                out.append(shown(block["text"]["text"]))
            case "context":
                out.append(" · ".join(shown(e["text"]) for e in block["elements"]))
            case "actions":
                out.append("  ".join(f"[ {e['text']['text']} ]" for e in block["elements"]))
    return "\n".join(out)


def guide_cards() -> tuple[str, str]:
    args = {"to": "ana@example.com", "subject": "Your refund", "body": "Hi Ana,\nyour refund of $42.00 is on its way."}
    said = {"role": "assistant", "step": 3, "tool": "send_email", "args": args, "call_id": "call-3",
            "text": "The $42.00 refund for A-1001 went through, so I am telling Ana it is on its way."}
    run = make_run(run_id="run-3f9c2a1b7e", requester="U0DANA",
                   goal="Email the customer of order A-1001 about their refund",
                   state={"steps": 3, "usage": {**make_run().state["usage"], "tool_calls": 2}, "history": [said]})
    display = ToolDisplay.of(EMAIL)
    key = "run-3f9c2a1b7e:3"
    card = email_approval(args, run_id=run.run_id, step=3, key=key, digest=call_digest("send_email", args, key),
                          expires_at=NOW + timedelta(minutes=30))
    long = email_approval({**args, "body": "Hi Ana, " + "your refund is on its way. " * 300},
                          run_id=run.run_id, step=3, key=key)
    # As the built-in policy asks: one approval from SIGNOFF_APPROVERS (here a user group).
    asked = {"rule": None, "policy": "0" * 16, "approvers": ["S0SUPPORT"], "quorum": 1, "ttl_seconds": 1800,
             "allow_self_approval": False, "confirm": False}
    card, long = (dataclasses.replace(approval, asked=asked) for approval in (card, long))
    return (picture(approval_message(run, card, display=display).blocks),
            picture(approval_message(run, long, display=display).blocks))


def test_the_approver_guide_shows_the_approval_card_as_it_is_really_posted():
    guide = APPROVER_GUIDE.read_text(encoding="utf-8")
    for card in guide_cards():
        assert f"````text\n{card}\n````" in guide, f"docs/approvers.md should show this card:\n{card}"


# -- end to end over signed HTTP ------------------------------------------------------------------------


LONG_ORDER = ("A-1001\nto: ana@example.com\u202e ```x``` &amp; <!here> \u200b" + "7" * 90) * 60


def propose_long_refund(signoff) -> None:
    signoff.script.decisions = [tool_call("issue_refund", order_id=LONG_ORDER, amount_usd=5.0), final("Refunded.")]
    signoff.command("Refund the order with the long id")


def test_long_arguments_are_approved_only_from_the_modal_and_run_exactly_once(signoff, slack, ledger):
    propose_long_refund(signoff)
    card = signoff.approval_message()
    assert buttons(card) == [VIEW_ARGS_ACTION, DENY_ACTION]
    signoff.home_opened("U0LEAD")
    assert buttons(slack.views["U0LEAD"]) == [VIEW_ARGS_ACTION, DENY_ACTION]

    signoff.click(card, VIEW_ARGS_ACTION, user="U0LEAD")
    modal = slack.modal()
    assert slack.last("views.open")["trigger_id"]
    assert values(shown_lines(modal["blocks"])) == {"order_id": LONG_ORDER, "amount_usd": 5.0}
    assert buttons(modal) == [APPROVE_ACTION]

    signoff.click(modal, APPROVE_ACTION, user="U0LEAD")
    assert ledger.args == [{"order_id": LONG_ORDER, "amount_usd": 5.0}] and ledger.total == 1
    assert signoff.only_run().status == "done"
    told = json.dumps(slack.modal(modal["id"])["blocks"])
    assert "Approved" in told and "<@U0LEAD>" in told
    assert buttons(signoff.approval_message()) == []  # the channel card shows the outcome
    assert APPROVE_ACTION not in buttons(slack.views["U0LEAD"])  # and Home was refreshed

    signoff.click(modal, APPROVE_ACTION, user="U0LEAD")  # the same button again, from a stale modal
    assert "Already approved by <@U0LEAD>" in json.dumps(slack.modal(modal["id"])["blocks"])
    assert ledger.total == 1


def test_the_full_arguments_modal_does_not_open_for_someone_who_may_not_decide(signoff, slack, ledger):
    propose_long_refund(signoff)
    signoff.click(signoff.approval_message(), VIEW_ARGS_ACTION, user="U0ASKER")
    assert slack.attempts("views.open") == 0
    assert any("someone else" in text for text in signoff.ephemerals())
    assert ledger.total == 0


def test_view_full_arguments_from_app_home_opens_the_modal_with_approve(signoff, slack, ledger):
    propose_long_refund(signoff)
    signoff.home_opened("U0LEAD")
    signoff.click(slack.views["U0LEAD"], VIEW_ARGS_ACTION, user="U0LEAD")
    modal = slack.modal()
    assert values(shown_lines(modal["blocks"])) == {"order_id": LONG_ORDER, "amount_usd": 5.0}
    signoff.click(modal, APPROVE_ACTION, user="U0LEAD")
    assert ledger.args == [{"order_id": LONG_ORDER, "amount_usd": 5.0}]
    assert buttons(slack.views["U0LEAD"]) == []
