"""The words Slack and the terminal share are said once, in `bot.words`, and read the same on both."""

from __future__ import annotations

from signoff.bot import blocks, terminal
from signoff.bot.words import LIMIT_NAMES, budget_figures, is_slack_user, is_user_group, model_label
from signoff.runtime.budget import LIMIT_TO_USAGE

STATE = {"steps": 3, "budget": {"max_steps": 8, "max_tool_calls": None, "max_cost_usd": 1.0, "max_seconds": 60},
         "usage": {"tool_calls": 2, "cost_usd": 0.0123, "seconds": 12.7, "input_tokens": 0, "output_tokens": 0}}


def test_every_budget_limit_has_a_name():
    assert LIMIT_NAMES.keys() == LIMIT_TO_USAGE.keys()


def test_slack_and_the_terminal_show_the_same_budget_figures():
    figures = budget_figures(STATE)
    assert figures == ["steps 3/8", "cost $0.0123/$1.00", "seconds 13/60"]
    assert blocks.budget_line(STATE) == " · ".join(figures)
    assert terminal.plain_budget_line(STATE) == ", ".join([*figures, "tool calls 2"])  # ASCII, unlimited too


def test_a_scripted_model_is_named_as_no_model_on_both_surfaces():
    assert model_label("scripted:demo") == "scripted (not a real model), replaying the built-in demo script"
    assert model_label("scripted:runs/refund.json") == "scripted (not a real model), replaying runs/refund.json"
    assert model_label("openai:gpt-4o") == "openai:gpt-4o"


def test_one_rule_says_what_a_slack_user_id_is():
    assert all(is_slack_user(uid) for uid in ("U0LEAD", "W0GRID1"))
    assert not any(is_slack_user(uid) for uid in ("S0ONCALL", "u0lead", "U0LEAD>", "U", "cli:ann", None, 7))
    assert is_user_group("S0ONCALL") and not is_user_group("U0LEAD")
    assert blocks.user("U0LEAD") == "<@U0LEAD>" and blocks.user("cli:<ann>") == "cli:&lt;ann&gt;"
