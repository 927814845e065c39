"""A scenario's world: one database (SQLite file or PostgreSQL schema), FakeSlack, the effects log,
and the `signoff serve` processes started against them. `close()` tears everything down.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import secrets
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, text

from scenarios.serve import Serve
from scenarios.toolset import LOG_ENV, TOOLS, read_effects
from signoff.bot.settings import parse_duration
from signoff.runtime.adapters.db import make_engine, upgrade
from signoff.runtime.adapters.sql import SqlStore
from signoff.runtime.approval_policy import (
    ApprovalPolicy,
    Ask,
    ProposedCall,
    Requirement,
    Verdict,
    default_policy,
    evaluate,
)
from signoff.runtime.people import CHANNEL_MEMBERS
from signoff.runtime.policy_file import parse_policy
from signoff.runtime.runner_config import RunnerConfig
from signoff.tools.base import Tool
from tests.fakes.slack import FakeSlack

ROOT = Path(__file__).resolve().parents[1]
POSTGRES_URL = os.environ.get("SIGNOFF_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
SIGNING_SECRET = "scenario-signing-secret-0123456789abcdef"
USERGROUPS = {"S0ONCALL": ["U0ONCALL1", "U0ONCALL2"]}
CHANNELS = {"C0RUNS": ["U0ASKER", "U0LEAD", "U0ONCALL1", "U0ONCALL2"], "C0PRIVATE": ["U0ASKER", "U0LEAD"]}
"""Who is in each channel (`conversations.members`); U0STRANGER is in none."""
POLICY_FILE = "policy.yaml"
"""Where a world writes its approval policy file, in its directory."""
DEFAULT_TTL = RunnerConfig().approval_ttl
"""`SIGNOFF_APPROVAL_TTL` when a world leaves it unset."""
_SIDE_EFFECTS = {tool.name: tool.side_effect for tool in TOOLS}
_MIGRATING = threading.Lock()
"""Alembic keeps its running context in module globals: one migration at a time per process."""


def postgres_reachable() -> bool:
    try:
        engine = create_engine(POSTGRES_URL, connect_args={"connect_timeout": 3})
        with engine.connect() as conn:
            conn.execute(text("select 1"))
        engine.dispose()
        return True
    except Exception:  # any failure to connect means "no PostgreSQL here"
        return False


class Database:
    """A fresh, migrated database; PostgreSQL connections carry an `application_name` per role."""

    def __init__(self, kind: str, workdir: Path, server_url: str = POSTGRES_URL) -> None:
        self.kind = kind
        self.server_url = server_url
        if kind == "sqlite":
            self._url = f"sqlite:///{workdir / 'signoff.db'}"
            self.schema = None
        else:
            self.schema = "scn_" + secrets.token_hex(5)
            admin = self.admin()
            with admin.connect() as conn:
                conn.execute(text(f"CREATE SCHEMA {self.schema}"))
            admin.dispose()
            self._url = f"{server_url}{'&' if '?' in server_url else '?'}options=-csearch_path%3D{self.schema}"
        engine = make_engine(self.url("migrate"))
        with _MIGRATING:
            upgrade(engine)
        engine.dispose()
        # The checker's own small pool: the serve processes need PostgreSQL's connections more.
        self.engine = make_engine(self.url("checker")) if kind == "sqlite" else create_engine(
            self.url("checker"), pool_pre_ping=True, pool_size=4, max_overflow=12)
        self.store = SqlStore(self.engine)

    def url(self, role: str = "serve") -> str:
        """The URL a given party uses; on PostgreSQL its connections are tagged `<schema>_<role>`."""
        if self.kind == "sqlite":
            return self._url
        return f"{self._url}&application_name={self.schema}_{role}"

    def admin(self) -> Engine:
        return create_engine(self.server_url, isolation_level="AUTOCOMMIT")

    def terminate(self, role: str = "serve") -> int:
        """Drop every PostgreSQL connection of `role` (as an operator or a failover would); returns how many."""
        assert self.kind == "postgres"
        admin = self.admin()
        with admin.connect() as conn:
            killed = conn.execute(text(
                "select count(*) filter (where pg_terminate_backend(pid)) from pg_stat_activity "
                "where application_name = :name"), {"name": f"{self.schema}_{role}"}).scalar_one()
        admin.dispose()
        return int(killed or 0)

    def close(self) -> None:
        self.engine.dispose()
        if self.kind == "postgres":
            admin = self.admin()
            with admin.connect() as conn:
                conn.execute(text(
                    "select pg_terminate_backend(pid) from pg_stat_activity where application_name like :p"),
                    {"p": f"{self.schema}_%"})
                conn.execute(text(f"DROP SCHEMA {self.schema} CASCADE"))
            admin.dispose()


@dataclass
class Policy:
    """Who may approve what in this world, as the serve processes are configured: `SIGNOFF_APPROVERS`
    (`*`: the run's channel), self-approval, the approval TTL and an optional approval policy file
    (`SIGNOFF_POLICY`).

    The invariants' own reading of the configuration, parsed here rather than asked of the serve
    processes, so a serve that misapplied its policy is caught.
    """

    approvers: frozenset[str] = frozenset({CHANNEL_MEMBERS})
    allow_self: bool = False
    file: str | None = None
    """The policy file's YAML text; None: the built-in policy (every side effect asks the approvers)."""
    ttl: timedelta = DEFAULT_TTL
    """`SIGNOFF_APPROVAL_TTL`: the defaults' TTL, so part of the policy digest every run records."""
    earlier: tuple[Policy, ...] = ()
    """The policies serve processes ran under before this one (restarted with another file): a run
    is replayed under the one whose digest it recorded."""
    rules: ApprovalPolicy = field(init=False, repr=False, compare=False)
    """The policy as `signoff serve` loads it from this configuration."""

    def __post_init__(self) -> None:
        if self.file is None:
            self.rules = default_policy(approvers=sorted(self.approvers), ttl=self.ttl, allow_self_approval=self.allow_self)
        else:
            self.rules = parse_policy(self.file, source=POLICY_FILE, approvers=sorted(self.approvers), ttl=self.ttl,
                                      allow_self_approval=self.allow_self)

    def recorded_as(self, digest: str | None) -> ApprovalPolicy:
        """The rules of this policy or an earlier one whose digest is `digest` (this one's if none is)."""
        return next((p.rules for p in (self, *self.earlier) if p.rules.digest == digest), self.rules)

    def verdict(self, tool: str, args: Mapping[str, Any], requester: str, channel: str) -> Verdict:
        """What the policy says of a call. The run's usage is not known here: a scenario's rules do
        not look at `usage`."""
        return evaluate(self.rules, ProposedCall(tool=tool, args=args, side_effect=_SIDE_EFFECTS.get(tool, True),
                                                 requester=requester, channel=channel))

    def requirement(self, verdict: Verdict) -> Requirement:
        """Who must approve a call with this verdict: its rule's, or the defaults for one that should
        not have been asked at all."""
        return verdict.requirement if isinstance(verdict, Ask) else self.rules.defaults

    def refusal(self, user: str | None, requester: str, channel: str = "C0RUNS",
                requirement: Requirement | None = None) -> str | None:
        """Why `user` may not approve a call of `requester`'s run in `channel` under `requirement`
        (the defaults when None), or None if they may."""
        asked = requirement or self.rules.defaults
        # An empty list falls back to `SIGNOFF_APPROVERS`, as the runner's `may_approve` does.
        approvers = set(asked.approvers or self.approvers)
        if not user:
            return "nobody decided"
        if user == requester and not asked.allow_self_approval:
            return f"{user} approved their own run"
        members = approvers | set(CHANNELS.get(channel, []) if CHANNEL_MEMBERS in approvers else [])
        for group, users in USERGROUPS.items():
            if group in approvers:
                members |= set(users)
        return None if user in members else f"{user} is not an approver"


@dataclass
class World:
    kind: str
    script: list[dict[str, Any]]
    policy: Policy = field(default_factory=Policy)
    env: dict[str, str] = field(default_factory=dict)
    postgres_url: str = POSTGRES_URL
    """The PostgreSQL server a `postgres` world makes its schema on (a private one can be crashed)."""
    tools: list[Tool] = field(default_factory=lambda: list(TOOLS))
    """The tools its serve processes load, as the invariants read runs against them (a scenario
    that gives serve other toolsets, MCP servers or HTTP APIs, sets their contracts here)."""

    def __post_init__(self) -> None:
        if "SIGNOFF_APPROVAL_TTL" in self.env:  # the oracle must know it: it is part of what runs record
            self.policy = dataclasses.replace(self.policy, ttl=parse_duration(self.env["SIGNOFF_APPROVAL_TTL"]))
        self._tmp = tempfile.TemporaryDirectory(prefix="signoff-scenario-")
        self.dir = Path(self._tmp.name)
        self.effects = self.dir / "effects.jsonl"
        self.slack = FakeSlack(usergroups=USERGROUPS, channels=CHANNELS).start()
        self.db = Database(self.kind, self.dir, self.postgres_url)
        self.serves: list[Serve] = []
        self.untold: list[str] = []
        """Buttons a run waiting on a person needed but Slack never showed (see `Driver`)."""
        self._lives = itertools.count()
        self.write_script(self.script)
        if self.policy.file is not None:
            (self.dir / POLICY_FILE).write_text(self.policy.file, encoding="utf-8")

    def write_script(self, script: list[dict[str, Any]], name: str = "script.json") -> Path:
        path = self.dir / name
        path.write_text(json.dumps(script), encoding="utf-8")
        return path

    def serve_env(self, **overrides: str) -> dict[str, str]:
        env = {
            "SLACK_BOT_TOKEN": self.slack.token, "SLACK_SIGNING_SECRET": SIGNING_SECRET, "SLACK_API_URL": self.slack.url,
            "SIGNOFF_DATABASE_URL": self.db.url("serve"), "SIGNOFF_TOOLS": "scenarios.toolset:TOOLS",
            "SIGNOFF_MODEL": f"scripted:{self.dir / 'script.json'}", "SIGNOFF_SWEEP_INTERVAL": "1s",
            "SIGNOFF_LEASE_SECONDS": "2", "SIGNOFF_WORKERS": "4", "SIGNOFF_LOG_LEVEL": "INFO",
            "SIGNOFF_OUTBOX": str(self.dir / "outbox"), LOG_ENV: str(self.effects),
        }
        env["SIGNOFF_APPROVERS"] = ",".join(sorted(self.policy.approvers))
        if self.policy.allow_self:
            env["SIGNOFF_ALLOW_SELF_APPROVAL"] = "true"
        if self.policy.ttl != DEFAULT_TTL:
            env["SIGNOFF_APPROVAL_TTL"] = f"{int(self.policy.ttl.total_seconds())}s"
        if self.policy.file is not None:
            env["SIGNOFF_POLICY"] = str(self.dir / POLICY_FILE)
        env.update(self.env)
        env.update(overrides)
        return env

    def start(self, *, clock_offset: float = 0.0, **overrides: str) -> Serve:
        """Start one `signoff serve` (HTTP mode) and wait until it is healthy; `clock_offset` moves
        its wall clock by that many seconds."""
        serve = Serve(self.serve_env(**overrides), log=self.dir / f"serve-{next(self._lives)}.log", root=ROOT,
                      clock_offset=clock_offset)
        self.serves.append(serve)
        serve.start()
        return serve

    def effect_lines(self) -> list[dict[str, Any]]:
        return read_effects(self.effects)

    def logs(self) -> str:
        return "".join(s.log_text() for s in self.serves)

    def close(self) -> None:
        for serve in self.serves:
            serve.stop()
        self.slack.stop()
        self.db.close()
        self._tmp.cleanup()


def wait_until(predicate: Any, timeout: float, interval: float = 0.05, what: str = "condition") -> Any:
    """Poll `predicate` until it returns something truthy; raise `TimeoutError` naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached within {timeout:g}s")
        time.sleep(interval)
