"""The words Slack and the terminal share are said once, in `bot.words`, and read the same on both."""

from __future__ import annotations

import io

import pytest
from bot_fakes import NOW, make_approval, make_run

from signoff.bot.cli.console import Console
from signoff.bot.cli.notifier import TerminalNotifier
from signoff.bot.slack import blocks
from signoff.bot.slack.replies import already_text, approval_outcome, not_done_text
from signoff.bot.words import (
    LIMIT_NAMES,
    budget_figures,
    model_label,
    plain_budget_line,
    request_words,
)
from signoff.runtime.budget import LIMIT_TO_USAGE
from signoff.runtime.cards import ALONE
from signoff.runtime.people import is_slack_user, is_user_group

STATE = {"steps": 3, "budget": {"max_steps": 8, "max_tool_calls": None, "max_cost_usd": 1.0, "max_seconds": 60},
         "usage": {"tool_calls": 2, "cost_usd": 0.0123, "seconds": 12.7, "input_tokens": 0, "output_tokens": 0}}


def test_every_budget_limit_has_a_name():
    assert LIMIT_NAMES.keys() == LIMIT_TO_USAGE.keys()


def test_slack_and_the_terminal_show_the_same_budget_figures():
    figures = budget_figures(STATE)
    assert figures == ["steps 3/8", "cost $0.0123/$1.00", "seconds 13/60"]
    assert blocks.budget_line(STATE) == " · ".join(figures)
    assert plain_budget_line(STATE) == ", ".join([*figures, "tool calls 2"])  # ASCII, unlimited too


def test_a_scripted_model_is_named_as_no_model_on_both_surfaces():
    assert model_label("scripted:demo") == "scripted (not a real model), replaying the built-in demo script"
    assert model_label("scripted:runs/refund.json") == "scripted (not a real model), replaying runs/refund.json"
    assert model_label("openai:gpt-4o") == "openai:gpt-4o"


def test_one_rule_says_what_a_slack_user_id_is():
    assert all(is_slack_user(uid) for uid in ("U0LEAD", "W0GRID1"))
    assert not any(is_slack_user(uid) for uid in ("S0ONCALL", "u0lead", "U0LEAD>", "U", "cli:ann", None, 7))
    assert is_user_group("S0ONCALL") and not is_user_group("U0LEAD")
    assert blocks.user("U0LEAD") == "<@U0LEAD>" and blocks.user("cli:<ann>") == "cli:&lt;ann&gt;"


@pytest.mark.parametrize(("status", "decided_by", "said"), [
    ("approved", "U0LEAD", "approved by U0LEAD"),
    ("consumed", "U0LEAD", "approved by U0LEAD"),
    ("denied", "U0LEAD", "denied by U0LEAD"),
    ("expired", "U0LEAD", "approved by U0LEAD but not started in time; not executed"),
    ("expired", None, "expired, not executed"),
    ("cancelled", None, "cancelled, not executed"),
    ("superseded", None, "replaced by a new request; not executed"),
])
def test_slack_and_the_terminal_say_the_same_outcome_of_an_approval(status, decided_by, said):
    approval = make_approval(status=status, decided_by=decided_by, decided_at=NOW if decided_by else None)
    out = io.StringIO()
    TerminalNotifier(Console(out, io.StringIO()), {}).approval_decided(make_run(), approval, ALONE)
    assert out.getvalue() == f"  {said}\n"
    assert approval_outcome(approval)[1] == said[0].upper() + said[1:]  # Slack's plain-text fallback


def test_slack_and_the_terminal_name_what_a_request_did_and_a_refusal_alike():
    assert request_words("extend") == ("extended", "the run continues")
    assert request_words("reconcile.abort") == ("aborted", "")
    assert already_text("extend", None, None) == "Already extended by someone; nothing changed."
    assert not_done_text("the run has moved on") == "Not done: the run has moved on"
