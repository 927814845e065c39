"""`signoff policy`: `explain` (in `policy`), `test` and `backtest` (in `policy_checks`), which
use `explain`'s wording and its way of asking the policy about a call."""

from __future__ import annotations

import click

from signoff.bot.cli.policy import policy_explain
from signoff.bot.cli.policy_checks import policy_backtest, policy_test


@click.group(commands=[policy_explain, policy_test, policy_backtest])
def policy() -> None:
    """Approval policy: which calls run, which ask whom, which are refused; test it against cases,
    and backtest it against the calls recorded."""
