"""The real Claude Code CLI, headless, against a local stand-in of Anthropic's API (`fake_model.py`).

`claude_code_cli()` finds the pinned CLI in `.cache/claude-code` (where `.ci/run` installs it), and
installs it there with npm when it is missing. Without node and npm, or when the install fails, the
tests that need it skip; with `CI` set they fail instead, so CI always runs them.

`run_claude` runs `claude -p` in a directory of its own, with HOME a temporary directory, the model
at the fake's URL, hooks from a settings file, and `--output-format stream-json --verbose
--include-hook-events`, so each hook's exit status and output (its decision JSON) are in the run's
events.
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.claude_code.fake_model import FakeModel

CLAUDE_CODE_VERSION = "2.1.332"
"""The CLI the tests run; `.ci/run` installs the same version."""
REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "claude-code"


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"the Claude Code CLI is required in CI: {reason}")
    pytest.skip(f"the Claude Code CLI is not available: {reason}")


def _installed_version() -> str | None:
    manifest = CACHE / "node_modules" / "@anthropic-ai" / "claude-code" / "package.json"
    try:
        return str(json.loads(manifest.read_text())["version"])
    except (OSError, ValueError, KeyError):
        return None


def claude_code_cli() -> Path:
    """The `claude` executable of the pinned version, installed into the cache folder if need be."""
    binary = CACHE / "node_modules" / ".bin" / "claude"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".install-lock", "w") as lock:  # one install at a time across test workers
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _installed_version() != CLAUDE_CODE_VERSION or not binary.exists():
            npm = shutil.which("npm")
            if npm is None or shutil.which("node") is None:
                _unavailable("node and npm are needed to install it")
            try:
                done = subprocess.run(
                    [str(npm), "install", "--prefix", str(CACHE), "--no-audit", "--no-fund",
                     f"@anthropic-ai/claude-code@{CLAUDE_CODE_VERSION}"],
                    capture_output=True, text=True, timeout=600)
            except subprocess.TimeoutExpired:
                _unavailable("npm install did not finish within 600 s")
            if done.returncode != 0:
                _unavailable(f"npm install failed: {done.stderr.strip()[-2000:]}")
    try:
        version = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60,
                                 env={"PATH": os.environ.get("PATH", ""), "HOME": str(CACHE)})
    except (OSError, subprocess.TimeoutExpired) as exc:
        _unavailable(f"{binary} --version: {exc}")
    if not version.stdout.startswith(CLAUDE_CODE_VERSION):
        _unavailable(f"{binary} --version answered {version.stdout!r} {version.stderr[-2000:]!r}")
    return binary


def hook_command(timeout: float) -> str:
    """The hook as a settings file names it: `signoff hook claude-code`, from this checkout."""
    return f"{shlex.quote(sys.executable)} -m signoff hook claude-code --timeout {timeout:g}"


def settings(command: str | None, hook_timeout: int = 120, on_failure: str | None = None) -> dict[str, Any]:
    """Claude Code settings with `command` as the PreToolUse hook of Bash, Write, Edit and MCP tools,
    and as their PostToolUse and PostToolUseFailure hooks (which report how a call went), as the
    guide sets it.

    Without `on_failure`, a hook that fails or runs out of time lets the call go ahead; the tests
    leave it out so that a refusal is the hook's own answer."""
    if command is None:
        return {}
    handler: dict[str, Any] = {"type": "command", "command": command, "timeout": hook_timeout}
    if on_failure is not None:
        handler["onFailure"] = on_failure
    reporter = {"type": "command", "command": command, "timeout": 60}
    matched = "Bash|Write|Edit|mcp__.*"
    return {"hooks": {"PreToolUse": [{"matcher": matched, "hooks": [handler]}],
                      "PostToolUse": [{"matcher": matched, "hooks": [reporter]}],
                      "PostToolUseFailure": [{"matcher": matched, "hooks": [reporter]}]}}


@dataclass
class ClaudeRun:
    """What one `claude -p` run did."""

    returncode: int
    events: list[dict[str, Any]]
    stderr: str

    @property
    def result(self) -> dict[str, Any]:
        return next(e for e in self.events if e.get("type") == "result")

    @property
    def session_id(self) -> str:
        return str(self.result["session_id"])

    @property
    def hooks(self) -> list[dict[str, Any]]:
        """Each PreToolUse hook's answer: its exit status and what it printed."""
        return [e for e in self.events
                if e.get("subtype") == "hook_response" and e.get("hook_event") == "PreToolUse"]

    @property
    def decisions(self) -> list[dict[str, Any]]:
        """The `hookSpecificOutput` each PreToolUse hook printed."""
        return [json.loads(e["stdout"])["hookSpecificOutput"] for e in self.hooks]

    @property
    def tool_results(self) -> list[dict[str, Any]]:
        """The tool results Claude Code sent back to the model, in order."""
        return [block for e in self.events if e.get("type") == "user"
                for block in e["message"]["content"] if isinstance(block, dict) and block.get("type") == "tool_result"]

    def explain(self) -> str:
        return f"exit {self.returncode}; stderr: {self.stderr[-3000:]}; events: {json.dumps(self.events)[-6000:]}"


def run_claude(cli: Path, model: FakeModel, project: Path, home: Path, *, hook: str | None,
               env: dict[str, str] | None = None, args: tuple[str, ...] = ("--permission-mode", "acceptEdits"),
               prompt: str = "Please write the file.", hook_timeout: int = 120,
               on_failure: str | None = None) -> ClaudeRun:
    """`claude -p prompt` in `project`, with `hook` as its PreToolUse hook (None: no hook).

    `--permission-mode acceptEdits` lets Claude Code write files in the project without asking, so a
    file left unwritten was refused by the hook, not by a permission prompt nobody can answer.
    """
    project.mkdir(parents=True, exist_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    settings_file = home / "signoff-test-settings.json"
    settings_file.write_text(json.dumps(settings(hook, hook_timeout, on_failure)))
    environment = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": model.url,
        "ANTHROPIC_API_KEY": "test",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "PYTHONPATH": str(REPO),
        **(env or {}),
    }
    done = subprocess.run(
        [str(cli), "-p", prompt, "--settings", str(settings_file), "--output-format", "stream-json",
         "--verbose", "--include-hook-events", *args],
        cwd=project, env=environment, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=240)
    events = []
    for line in done.stdout.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return ClaudeRun(done.returncode, events, done.stderr)
