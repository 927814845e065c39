from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from bot_fakes import HOSTILE, NOW, make_approval, make_run
from hypothesis import given, settings
from hypothesis import strategies as st

from signoff.bot.arguments import ToolDisplay
from signoff.bot.slack import blocks, command_replies, messages
from signoff.bot.slack.blocks import (
    APPROVE_ACTION,
    DENY_ACTION,
    EDIT_ACTION,
    EXTEND_ACTION,
    RECONCILE_ABORT_ACTION,
    RETRY_ACTION,
    code_section_lines,
    escape,
    safe,
)
from signoff.bot.slack.home_tab import home_view
from signoff.bot.slack.messages import approval_message, decided_message, deny_modal, stopped_message
from signoff.runtime.state import DEFAULT_REDACT_KEYS
from tests.fakes.slack import block_kit_problems, view_problems

HUGE = HOSTILE * 2000  # ~250k characters


def all_text(value) -> str:
    return json.dumps(value, ensure_ascii=False)


def mrkdwn_texts(value) -> list[str]:
    """Every mrkdwn string in a payload, where Slack would parse mentions and links."""
    if isinstance(value, dict):
        own = [value["text"]] if value.get("type") == "mrkdwn" and isinstance(value.get("text"), str) else []
        return own + [t for v in value.values() for t in mrkdwn_texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in mrkdwn_texts(v)]
    return []


def code_lines(blocks_) -> list[str]:
    """The argument lines a person reads in `blocks_`."""
    return code_section_lines(mrkdwn_texts(blocks_))


def buttons_of(blocks_) -> list[str]:
    return [e["action_id"] for b in blocks_ if b["type"] == "actions" for e in b["elements"]]


# Our own control sequences: user mentions built from validated ids, Slack date tokens, and the
# link to a run's channel built from its validated channel and team ids.
ALLOWED_CONTROL = re.compile(r"<@U0[A-Z0-9]+>|<!date\^\d+\^\{date_short_pretty\} at \{time\}\|[^<>]*>"
                             r"|<https://slack\.com/app_redirect\?channel=C0[A-Z0-9]+(&amp;team=T[A-Z0-9]+)?\|see the run>")


def assert_no_injection(message_or_view, *, allowed_mentions=("<@U0ASKER>", "<@U0LEAD>")) -> None:
    texts = mrkdwn_texts(message_or_view)
    if isinstance(message_or_view, blocks.Message):
        texts = mrkdwn_texts(message_or_view.blocks) + [message_or_view.text]
    for text in texts:
        stripped = ALLOWED_CONTROL.sub("", text)
        assert "<" not in stripped and ">" not in stripped.replace("\n>", "\n").lstrip(">"), text[:300]
        for mention in re.findall(r"<@[A-Z0-9]+>", text):
            assert mention in allowed_mentions


def test_escape_is_slacks_three_entities():
    assert escape("<!channel> & <@U1>") == "&lt;!channel&gt; &amp; &lt;@U1&gt;"


@pytest.mark.parametrize("limit", [1, 2, 5, 10, 100])
def test_safe_never_splits_an_entity_or_exceeds_its_limit(limit):
    text = safe("<&>" * 100, limit)
    assert len(text) <= limit
    assert not re.search(r"&(?!(amp|lt|gt);)", text)


@given(st.text(max_size=3000), st.integers(min_value=1, max_value=4000))
@settings(max_examples=150, deadline=None)
def test_safe_fuzz(text, limit):
    out = safe(text, limit)
    assert len(out) <= limit
    assert "<" not in out and ">" not in out
    if len(escape(text)) <= limit:
        assert out == escape(text)


def test_approval_message_shows_what_an_approver_needs():
    run = make_run(state={"steps": 2, "usage": {**make_run().state["usage"], "tool_calls": 1}})
    approval = make_approval()
    message = approval_message(run, approval, display=ToolDisplay("Refund part or all of an order."))
    text = all_text(message.blocks)
    assert "Refund order 42 and tell the customer" in text
    assert "<@U0ASKER>" in text
    assert "issue_refund" in text and "Refund part or all of an order." in text
    assert code_lines(message.blocks) == ['order_id: "42"', "amount_usd: 19.99"]
    assert "run-0123456789:2" in text
    assert "steps 2/8" in text and "tool calls 1/5" in text
    assert f"<!date^{int((NOW + timedelta(minutes=30)).timestamp())}^" in text
    actions = message.blocks[-1]["elements"]
    assert [(b["action_id"], b.get("style")) for b in actions] == [
        (APPROVE_ACTION, "primary"), (DENY_ACTION, "danger"), (EDIT_ACTION, None)]
    assert {b["value"] for b in actions} == {f"{approval.approval_id}:{approval.digest}"}
    assert message.text and "issue_refund" in message.text
    assert block_kit_problems(message.blocks) == []


def test_approval_message_redacts_secrets_including_tool_specific_names():
    approval = make_approval(args={"to": "a@b.c", "api_key": "sk-live-123", "nested": {"password": "pw1"},
                                   "pin": "9999"})
    message = approval_message(make_run(), approval, display=ToolDisplay(secret_names=DEFAULT_REDACT_KEYS | {"pin"}))
    text = all_text(message.blocks) + message.text
    for secret in ("sk-live-123", "pw1", "9999"):
        assert secret not in text
    assert "api_key: [redacted: 11 chars, #" in text and "pin: [redacted: 4 chars, #" in text
    assert 'to: "a@b.c"' in code_lines(message.blocks)


def test_hostile_goal_and_arguments_cannot_mention_or_link():
    run = make_run(goal=HOSTILE, requester="U0ASKER")
    approval = make_approval(args={"note": HOSTILE, HOSTILE[:40]: HOSTILE}, tool="issue_refund")
    for message in (approval_message(run, approval, display=ToolDisplay(HOSTILE)),
                    decided_message(run, make_approval(status="denied", decided_by="U0LEAD", decided_at=NOW,
                                                       note=HOSTILE)),
                    messages.run_message(run), messages.stopped_message(make_run(goal=HOSTILE, status="failed",
                                                                               state={"stop": {"reason": HOSTILE}})),
                    messages.tool_result_message(run, {"tool": "x", "step": 1, "result": HOSTILE}),
                    command_replies.status_message(run)):
        assert_no_injection(message)
        assert block_kit_problems(message.blocks) == []


def test_huge_goal_and_arguments_stay_within_block_kit_limits():
    run = make_run(goal=HUGE, state={"history": [{"role": "assistant", "step": i, "tool": HUGE[:500]}
                                                 for i in range(200)]})
    approval = make_approval(args={f"k{i}": HUGE[: 5000 + i] for i in range(60)}, tool="t" * 64,
                             key="run-0123456789:" + "9" * 40)
    message = approval_message(run, approval, display=ToolDisplay(HUGE))
    assert block_kit_problems(message.blocks) == []
    assert len(all_text(message.blocks)) < 12_000
    # ~300k characters: more than even a modal holds, so Slack offers no Approve at all.
    assert "too long even for a Slack dialog" in all_text(message.blocks)
    assert f"signoff runs resume {run.run_id}" in all_text(message.blocks)
    assert buttons_of(message.blocks) == [DENY_ACTION]
    assert len(message.text) <= blocks.MAX_FALLBACK
    assert_no_injection(message)
    for other in (decided_message(run, make_approval(args=approval.args, status="expired")),
                  stopped_message(make_run(goal=HUGE, status="budget_exhausted",
                                           state={"stop": {"reason": HUGE, "detail": HUGE, "budget": "max_steps"},
                                                  "history": run.state["history"]})),
                  messages.answer_message(make_run(state={"answer": HUGE})),
                  messages.tool_result_message(run, {"tool": "x", "step": 1, "result": {"rows": [HUGE]}}),
                  messages.tool_result_message(run, {"tool": "x", "step": 1, "error": HUGE, "error_kind": "exception"}),
                  command_replies.status_message(make_run(goal=HUGE, state={"answer": HUGE, "stop": {"reason": HUGE}})),
                  command_replies.list_message([make_run(goal=HUGE)] * 50, [(run, approval)] * 50)):
        assert block_kit_problems(other.blocks) == [], other.text[:80]
        assert_no_injection(other)


def test_decided_message_replaces_buttons_with_who_when_and_why():
    approval = make_approval(status="denied", decided_by="U0LEAD", decided_at=NOW, note="wrong order")
    message = decided_message(make_run(), approval)
    assert all(b["type"] != "actions" for b in message.blocks)
    last = message.blocks[-1]["text"]["text"]
    assert "Denied" in last and "<@U0LEAD>" in last and "wrong order" in last and "<!date^" in last
    assert message.text.startswith("Denied by <@U0LEAD>")


def test_expired_message_says_not_executed():
    message = decided_message(make_run(), make_approval(status="expired", decided_at=NOW))
    assert "Expired, not executed" in message.blocks[-1]["text"]["text"]
    assert all(b["type"] != "actions" for b in message.blocks)


def test_forged_decider_id_is_not_turned_into_a_mention():
    message = decided_message(make_run(), make_approval(status="approved", decided_by="<!channel>", decided_at=NOW))
    assert "<!channel>" not in all_text(message.blocks)


@pytest.mark.parametrize(
    ("status", "stop", "actions"),
    [
        ("budget_exhausted", {"reason": "max_steps reached", "budget": "max_steps"}, [EXTEND_ACTION, blocks.CLOSE_ACTION]),
        ("failed", {"reason": "model unavailable", "detail": "503 after 3 retries"}, [RETRY_ACTION, blocks.CLOSE_ACTION]),
        ("needs_reconciliation", {"reason": "timed out", "tool": "issue_refund", "key": "run-0123456789:3"},
         [blocks.RECONCILE_DONE_ACTION, blocks.RECONCILE_RETRY_ACTION, RECONCILE_ABORT_ACTION]),
        ("cancelled", {"reason": "cancelled by U0ASKER", "by": "U0ASKER"}, []),
    ],
)
def test_stopped_message_offers_the_buttons_that_fit(status, stop, actions):
    history = [{"role": "user", "content": "g"}, {"role": "assistant", "step": 1, "tool": "lookup_order", "args": {}},
               {"role": "tool", "step": 1, "tool": "lookup_order", "result": {}},
               {"role": "assistant", "step": 2, "final": "x"}]
    run = make_run(status=status, state={"stop": stop, "steps": 8, "history": history})
    message = stopped_message(run)
    found = [e["action_id"] for b in message.blocks if b["type"] == "actions" for e in b["elements"]]
    assert found == actions
    assert all(e["value"] == f"{run.run_id}:{run.version}"  # bound to the run as shown
               for b in message.blocks if b["type"] == "actions" for e in b["elements"])
    text = all_text(message.blocks)
    assert "steps 8/8" in text
    assert "step 1: called lookup_order" in text
    match status:
        case "budget_exhausted":  # in numbers, not the runtime's `max_steps reached`
            assert "*Out of budget:* The run used all 8 of its steps." in text and "max_steps" not in text
        case "cancelled":  # whoever cancelled it, as a mention
            assert "*Cancelled:* cancelled by <@U0ASKER>" in text
        case _:
            assert stop["reason"] in text
    assert block_kit_problems(message.blocks) == []


def test_deny_modal_respects_modal_limits_and_carries_only_ids():
    approval = make_approval(tool="a_very_long_tool_name_for_testing_titles")
    view = deny_modal(approval, channel="C0RUNS")
    assert view_problems(view) == []
    assert len(view["title"]["text"]) <= 24
    assert json.loads(view["private_metadata"]) == {"approval": approval.approval_id, "digest": approval.digest,
                                                     "channel": "C0RUNS"}
    assert view["callback_id"] == blocks.DENY_MODAL


def test_home_view_lists_waiting_approvals_with_buttons_and_recent_runs():
    waiting = [(make_run(run_id=f"run-{i:010d}"), make_approval(approval_id=f"apr_{i}", run_id=f"run-{i:010d}"))
               for i in range(40)]
    runs = [make_run(run_id=f"run-{i:010d}", goal=HUGE, status="done") for i in range(40)]
    view = home_view("U0LEAD", waiting, runs)
    assert view_problems(view) == []
    values = [e["value"] for b in view["blocks"] if b["type"] == "actions" for e in b["elements"]]
    assert f"apr_0:{waiting[0][1].digest}" in values
    assert "and 25 more" in all_text(view)
    assert_no_injection(view)


def test_home_view_when_nothing_waits():
    view = home_view("U0LEAD", [], [])
    assert "Nothing is waiting" in all_text(view) and "no runs yet" in all_text(view)
    assert view_problems(view) == []


def test_scripted_model_is_labelled_plainly():
    message = messages.run_message(make_run(model="scripted:demo"))
    assert "scripted" in all_text(message.blocks) and "not a real model" in all_text(message.blocks)


def test_action_ids_are_distinct_and_within_limits():
    ids = blocks.APPROVAL_ACTIONS + blocks.RUN_ACTIONS
    assert len(set(ids)) == len(ids)
    assert all(len(i) <= blocks.MAX_ACTION_ID for i in ids)


def test_help_and_notice_have_fallback_text():
    for message in (command_replies.help_message(), blocks.notice("Already approved by <@U0LEAD>")):
        assert message.text and block_kit_problems(message.blocks) == []


def test_home_view_redacts_tool_specific_secrets_and_describes_the_tool():
    waiting = [(make_run(), make_approval(args={"order_id": "42", "pin": "4321", "password": "pw"}))]
    display = ToolDisplay("Refund an order.", secret_names=DEFAULT_REDACT_KEYS | {"pin"})
    view = home_view("U0LEAD", waiting, [], displays={"issue_refund": display})
    text = all_text(view)
    assert "4321" not in text and '"pw"' not in text
    assert "pin: [redacted: 4 chars, #" in text and "password: [redacted: 2 chars, #" in text
    assert "Refund an order." in text
