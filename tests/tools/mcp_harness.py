"""What the MCP tests share: a throwaway git repository, and the server entries that start the
reference git server and our fault server (`mcp_fault_server.py`) as subprocesses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

FAULT_SERVER = str(Path(__file__).resolve().parent / "mcp_fault_server.py")


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


def git_server(repo: Path, **entry: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": ["-m", "mcp_server_git", "--repository", str(repo)], **entry}


def fault_server(log: Path, **entry: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [FAULT_SERVER, str(log)], **entry}
