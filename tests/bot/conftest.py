"""Fixtures for the Slack edge: FakeSlack, a counting ledger of side effects, and the `signoff` harness."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from bot_fakes import Ledger
from slack_harness import Signoff

from tests.fakes.slack import FakeSlack

RUNS_CHANNEL_MEMBERS = ["U0ASKER", "U0LEAD", "U0OPS", "U0SRE", "U0CFO", "U0ONCALL1", "U0ONCALL2", "U0INTERN"]
"""Who is in #runs (C0RUNS), where the harness starts its runs; U0STRANGER is in no channel."""


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    with FakeSlack(usergroups={"S0ONCALL": ["U0ONCALL1", "U0ONCALL2"]},
                   channels={"C0RUNS": RUNS_CHANNEL_MEMBERS, "C0PRIVATE": ["U0ASKER", "U0LEAD"]}) as fake:
        yield fake


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()


@pytest.fixture
def make_signoff(slack, sqlite_url, ledger):
    made: list[Signoff] = []

    def make(database_url: str | None = None, **env: str) -> Signoff:
        harness = Signoff(slack, database_url or sqlite_url, ledger, env)
        made.append(harness)
        return harness

    yield make
    for harness in made:
        harness.close()


@pytest.fixture
def signoff(make_signoff) -> Signoff:
    return make_signoff()
