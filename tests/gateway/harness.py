"""What the gateway tests share: the prerequisites (skipped without them, failed in CI), a real
`signoff serve` with a key made by `signoff keys create`, the configuration file the gateway reads,
and two ways to talk to `signoff gateway`: the official MCP client SDK over stdio, and raw JSON-RPC
lines (`scenarios.gateway.RawGateway`) for what the SDK does not let a client do (send the same
request id twice, die mid-call)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from scenarios.drive import APPROVER, messages_with
from scenarios.world import ROOT, World, wait_until
from signoff.bot.slack.blocks import APPROVE_ACTION

HOSTILE_SERVER = str(Path(__file__).resolve().parent / "hostile_server.py")


def require_prerequisites() -> None:
    """Skip without git and the PyPI servers; with `CI` set, fail instead, so CI always runs these."""
    missing = [name for name in ("mcp_server_git", "mcp_server_time", "mcp") if importlib.util.find_spec(name) is None]
    if shutil.which("git") is None:
        missing.append("git")
    if not missing:
        return
    if os.environ.get("CI"):
        pytest.fail(f"the gateway tests need {', '.join(missing)} in CI")
    pytest.skip(f"the gateway tests need {', '.join(missing)}")


def make_repo(path: Path) -> Path:
    """A git repository at `path` with one file not yet added."""
    path.mkdir()
    for command in (["init", "-q"], ["config", "user.email", "ana@example.com"], ["config", "user.name", "Ana"]):
        subprocess.run(["git", *command], cwd=path, check=True)
    (path / "notes.txt").write_text("hello\n")
    return path


def commits(repo: Path) -> list[str]:
    done = subprocess.run(["git", "log", "--format=%s"], cwd=repo, capture_output=True, text=True)
    return done.stdout.splitlines() if done.returncode == 0 else []


def stage_all(repo: Path) -> None:
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)


def staged(repo: Path) -> list[str]:
    done = subprocess.run(["git", "diff", "--cached", "--name-only"], cwd=repo, capture_output=True, text=True)
    return done.stdout.splitlines()


def write_config(path: Path, servers: dict[str, Any]) -> Path:
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


def servers(repo: Path, log: Path) -> dict[str, Any]:
    """mcp-server-git on `repo`, mcp-server-time, and the hostile server (its calls cut at 3 s)."""
    return {
        "git": {"command": sys.executable, "args": ["-m", "mcp_server_git", "--repository", str(repo)]},
        "time": {"command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]},
        "hostile": {"command": sys.executable, "args": [HOSTILE_SERVER, str(log)], "timeout": 3},
        "guarded": {"command": sys.executable, "args": [HOSTILE_SERVER, str(log)],
                    "tools": {"lying_write": {"side_effect": True}}},
    }


def gateway_env(url: str, secret: str) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp"),
            "PYTHONPATH": str(ROOT), "SIGNOFF_URL": url, "SIGNOFF_API_KEY": secret}


def keys(world: World, *args: str) -> str:
    """`signoff keys ...` on the world's database, as an operator runs it: its output."""
    done = subprocess.run([sys.executable, "-m", "signoff.bot.cli", "keys", *args,
                           "--database-url", world.db.url("cli")], capture_output=True, text=True, cwd=ROOT,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def pending_approval(world: World, tool: str, seen: set[str] | None = None) -> Any:
    """The newest pending approval of `tool` not in `seen`, once its card is in Slack."""
    def found() -> Any:
        for approval in world.db.store.list_approvals(status="pending", limit=20):
            if approval.tool == tool and approval.approval_id not in (seen or set()) \
                    and messages_with(world, APPROVE_ACTION, f"{approval.approval_id}:"):
                return approval
        return None
    return wait_until(found, 60, what=f"the approval card of {tool} in Slack")


def approve(world: World, approval: Any) -> None:
    [message] = messages_with(world, APPROVE_ACTION, f"{approval.approval_id}:")[-1:]
    assert world.serves[0].click(message, APPROVE_ACTION, APPROVER).status == 200


def deny(world: World, approval: Any, reason: str) -> None:
    assert world.serves[0].deny(approval.approval_id, approval.digest, APPROVER, reason).status == 200


def text_of(result: Any) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)

