"""The real approval API for the tests of its callers (the Python client, the Claude Code hook).

`ApprovalServer` is a `scenarios.world.World`: a real `signoff serve` on fake Slack and a SQLite
database, with keys made by the real `signoff keys create`. `Person` decides one of its approvals
as an approver does, from the card Slack shows, with requests signed as Slack signs them: Approve,
or Deny with the reason typed in the Deny form.

An edit here is `Runner.edit` itself, run on the same database as an approver's Edit form would
(the form, through Slack, is tested with the approval API's own tests), and the edited call is then
approved on its new card by another approver, as any edited call is.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cached_property
from typing import Any

from scenarios.drive import APPROVER, approval_message
from scenarios.serve import buttons
from scenarios.world import ROOT, Policy, World, wait_until
from signoff.bot.settings import Settings
from signoff.bot.slack.blocks import APPROVE_ACTION
from signoff.bot.wiring import build_runner
from signoff.runtime.records import ApprovalRecord, Done, RunRecord
from signoff.runtime.runner import Runner

SECOND_APPROVER = "U0ONCALL1"
"""Another member of the approvals' channel: approves what `APPROVER` edited (an edited call is
asked about afresh, and the editor's edit is not their approval)."""
DECIDE_WITHIN = 60.0
"""Seconds a person waits for a card to show before the test fails."""


class ApprovalServer:
    """`signoff serve` with `policy` (the policy file's YAML; None: every side effect asks), on a
    `kind` database (sqlite or postgres), with `env` set besides."""

    def __init__(self, policy: str | None = None, *, kind: str = "sqlite", env: dict[str, str] | None = None) -> None:
        self.world = World(kind, [{"final": "unused: an API caller proposes its own call"}],
                           policy=Policy(file=policy), env=dict(env or {}))
        try:
            self.world.start()
        except BaseException:
            self.world.close()
            raise
        self.url = f"http://127.0.0.1:{self.world.serves[0].port}"

    def close(self) -> None:
        self.world.close()

    def keys(self, *args: str) -> str:
        """`signoff keys ...` on this server's database, as an operator runs it: its output."""
        done = subprocess.run([sys.executable, "-m", "signoff.bot.cli", "keys", *args,
                               "--database-url", self.world.db.url("cli")], capture_output=True, text=True,
                              cwd=ROOT, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def new_key(self, name: str, *options: str) -> str:
        """A new API key whose cards go to C0RUNS: the secret `signoff keys create` prints last."""
        return self.keys("create", name, "--channel", "C0RUNS", *options).splitlines()[-1]

    def run(self, approval_id: str) -> RunRecord:
        """The run behind an API approval (its `id` is its run's)."""
        run = self.world.db.store.get_run(approval_id, history=False)
        assert run is not None, approval_id
        return run

    def executions(self, approval_id: str) -> list[dict[str, Any]]:
        """The ledger rows of an API approval's call: one per start."""
        return self.world.db.store.executions(approval_id)

    def card(self, matches: Callable[[ApprovalRecord], bool], *,
             besides: frozenset[str] = frozenset()) -> tuple[ApprovalRecord, dict[str, Any]]:
        """The newest pending approval that `matches` (and is not in `besides`), once Slack shows its card."""
        def shown() -> tuple[ApprovalRecord, dict[str, Any]] | None:
            for approval in self.world.db.store.list_approvals(status="pending", limit=200):
                if matches(approval) and approval.approval_id not in besides:
                    message = approval_message(self.world, approval.approval_id)
                    if message is not None:
                        return approval, message
            return None
        found: tuple[ApprovalRecord, dict[str, Any]] = wait_until(shown, DECIDE_WITHIN, what="an approval card")
        return found

    @cached_property
    def runner(self) -> Runner:
        """A runner of this server's configuration on its database, for what Slack cannot do."""
        return build_runner(Settings.from_env(self.world.serve_env()), None, env={}, store=self.world.db.store)


class Person:
    """An approver deciding the approval that `matches`, from its card."""

    def __init__(self, server: ApprovalServer, matches: Callable[[ApprovalRecord], bool]) -> None:
        self.server, self.matches = server, matches
        self.serve = server.world.serves[0]

    def approve(self, user: str = APPROVER) -> ApprovalRecord:
        approval, card = self.server.card(self.matches)
        self._click_approve(card, approval, user)
        return approval

    def deny(self, reason: str, user: str = APPROVER) -> ApprovalRecord:
        """Deny with `reason`, as the Deny form sends it once the reason is typed."""
        approval, _ = self.server.card(self.matches)
        assert self.serve.deny(approval.approval_id, approval.digest, user, reason).status == 200
        return approval

    def edit_and_approve(self, args: dict[str, Any]) -> ApprovalRecord:
        """`APPROVER` edits the call to `args`; `SECOND_APPROVER` approves the edited call on its card."""
        approval, _ = self.server.card(self.matches)
        edited = self.server.runner.edit(approval.approval_id, approval.digest, APPROVER, args)
        assert isinstance(edited, Done), edited
        fresh, card = self.server.card(self.matches, besides=frozenset({approval.approval_id}))
        self._click_approve(card, fresh, SECOND_APPROVER)
        return fresh

    def _click_approve(self, card: dict[str, Any], approval: ApprovalRecord, user: str) -> None:
        value = next(v for a, v in buttons(card) if a == APPROVE_ACTION and v.startswith(f"{approval.approval_id}:"))
        assert self.serve.click(card, APPROVE_ACTION, user, value=value).status == 200


@contextmanager
def deciding(decide: Callable[[], object]) -> Iterator[None]:
    """`decide` in another thread while the block runs (a caller waiting meanwhile); its failure is
    raised in the test once the block ends."""
    failures: list[BaseException] = []

    def run() -> None:
        try:
            decide()
        except BaseException as exc:  # reported in the test's thread
            failures.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        thread.join(DECIDE_WITHIN + 30)
    assert not thread.is_alive(), "the person never finished deciding"
    if failures:
        raise failures[0]
