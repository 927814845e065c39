"""The run store as `signoff runs` and `signoff audit` read it: the store, one run, the finished
runs and their replay, and the secret names to redact from what is shown.

Apart from the commands (runs.py, audit.py), which import it when one of them runs: their `--help`
loads none of this.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

import click

from signoff.bot.cli.options import DEMO_DATABASE_URL, is_zero_config, load_settings
from signoff.bot.settings import Settings
from signoff.bot.wiring import (
    is_default_sqlite,
    load_approval_policy,
    load_tools,
    masked,
    open_store,
    sqlite_file,
)
from signoff.runtime.errors import ConfigError, SignoffError
from signoff.runtime.ports import Store
from signoff.runtime.records import RunRecord
from signoff.runtime.state import TERMINAL, secret_names

# What only `runs replay` uses is imported in the functions that replay: the read commands
# (`runs list`, `show`, `export`) load none of the replay machinery.
if TYPE_CHECKING:
    from signoff.runtime.approval_policy import ApprovalPolicy
    from signoff.runtime.replay import Replayed
    from signoff.tools.base import Tool


def runs_store(database_url: str | None, demo: bool, tools: str | None = None,
               policy: str | None = None) -> tuple[Settings, Store | None]:
    settings = load_settings({"database_url": database_url, "tools": tools, "policy": policy}, demo=demo)
    return settings, read_store(settings.database_url, demo)


def read_store(database_url: str, demo: bool) -> Store | None:
    """The store to read runs from; None when it is the zero-configuration file and that does not
    exist yet. Reading never creates a database: any other missing file is an error."""
    path = sqlite_file(database_url)
    if path is not None and not path.exists():
        if is_zero_config(database_url, demo):
            return None
        return open_store(database_url)  # raises, naming the missing file
    # The zero-configuration file is kept current as `signoff run` would; any other needs `db upgrade`.
    return open_store(database_url, auto_upgrade=is_zero_config(database_url, demo))


def the_run(store: Store | None, run_id: str, database_url: str, demo: bool = False) -> RunRecord:
    run = store.get_run(run_id) if store is not None else None
    if run is None:
        where = masked(database_url) + ("" if store is not None else " (it does not exist yet)")
        hint = "; it is in the demo database: add --demo" if not demo and _in_demo(database_url, run_id) else ""
        raise click.ClickException(f"no run {run_id!r} in {where}{hint}")
    return run


def _demo_store(database_url: str) -> Store | None:
    """The demo's database, when `database_url` is the default one and the demo has left a file."""
    demo_file = sqlite_file(DEMO_DATABASE_URL)
    if not is_default_sqlite(database_url) or demo_file is None or not demo_file.exists():
        return None
    try:
        return read_store(DEMO_DATABASE_URL, demo=True)
    except SignoffError:  # only a hint: a demo file we cannot read is no reason to fail
        return None


def _in_demo(database_url: str, run_id: str) -> bool:
    store = _demo_store(database_url)
    try:
        return store is not None and store.get_run(run_id, history=False) is not None
    finally:
        if store is not None:
            store.close()


def demo_has_runs(database_url: str) -> bool:
    store = _demo_store(database_url)
    try:
        return store is not None and bool(store.list_runs(limit=1))
    finally:
        if store is not None:
            store.close()


def finished_runs(store: Store, since: datetime | None) -> list[RunRecord]:
    """Every readable run that has ended, started on or after `since` (UTC) if given; listed without history."""
    after = since.replace(tzinfo=UTC) if since is not None else None
    return [r for status in sorted(TERMINAL) for r in store.list_runs(status=status, limit=100_000)
            if not r.unreadable and (after is None or r.created_at >= after)]


class RunPolicies:
    """The approval policy each run went by, each read once: as a terminal's runner loads it for a
    run started there, as `signoff serve` does for any other (the difference is in its digest)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.loaded: dict[bool, ApprovalPolicy] = {}

    def of(self, run: RunRecord) -> ApprovalPolicy:
        from signoff.bot.cli.running import IN_TERMINAL, TERMINAL_SOURCE

        in_terminal = run.origin.get("source") == TERMINAL_SOURCE
        if in_terminal not in self.loaded:
            overrides = IN_TERMINAL if in_terminal else {}
            self.loaded[in_terminal] = load_approval_policy(self.settings, **overrides)
        return self.loaded[in_terminal]


def replay_each(store: Store, toolset: dict[str, Tool], chosen: list[RunRecord], *, reread: bool,
                stall_after: int | None, policies: RunPolicies) -> list[Replayed]:
    """Replay each run; print the verdict of each one, or with `reread` (runs listed without their
    history, read here one at a time) only of those that diverged."""
    from signoff.bot.cli.replays import verdict_lines
    from signoff.runtime.caller_runs import run_tools
    from signoff.runtime.judging import Caller
    from signoff.runtime.replay import replay

    results = []
    for listed in chosen:
        run = store.get_run(listed.run_id) if reread else listed
        assert run is not None
        result = replay(run.state, store.timeline(run.run_id), run_tools(run, toolset), stall_after=stall_after,
                        approval_policy=policies.of(run),
                        caller=Caller(run.requester, str(run.origin.get("channel") or "")))
        results.append(result)
        if result.divergence is not None or not reread:
            click.echo("\n".join(verdict_lines(result)))
    return results


def secret_keys(settings: Settings) -> frozenset[str]:
    """The global secret names plus every loadable tool's own; warns if the tools cannot be loaded."""
    try:
        tools = load_tools(settings)
    except ConfigError as exc:
        click.echo(f"warning: tools not loaded ({exc}); only the standard secret names are redacted", err=True)
        return secret_names()
    return secret_names(*tools.values())
