"""`signoff check --gateway servers.json`, run as an operator runs it: each upstream (mcp-server-git,
mcp-server-time, the hostile server, one that cannot start), its tools, and how each is gated."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness import make_repo, require_prerequisites, servers, write_config

from scenarios.world import ROOT

POLICY = """\
rules:
  - name: no-commits
    tool: mcp__git__git_commit
    decision: deny
    reason: commits go through review
  - name: one-file-adds
    tool: mcp__git__git_add
    decision: allow
    when: size(args.files) < 2
"""


def check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "signoff.bot.cli", "check", *args], capture_output=True, text=True,
                          cwd=ROOT, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}, timeout=120)


def line_of(output: str, tool: str) -> str:
    [line] = [line for line in output.splitlines() if line.strip().startswith(tool + " ")]
    return line


def test_check_gateway_lists_each_upstream_its_tools_and_how_the_policy_gates_each(tmp_path: Path) -> None:
    require_prerequisites()
    entries = servers(make_repo(tmp_path / "repo"), tmp_path / "hostile.jsonl")
    entries["gone"] = {"command": str(tmp_path / "no-such-server")}
    config = write_config(tmp_path / "servers.json", entries)
    (tmp_path / "policy.yaml").write_text(POLICY)

    done = check("--gateway", str(config), "--policy", str(tmp_path / "policy.yaml"))

    out = done.stdout
    assert done.returncode == 1, out + done.stderr  # the server that cannot start fails the check
    assert "ok policy:" in out and "2 rules" in out
    for server in ("git", "time", "hostile", "guarded"):
        assert f"ok gateway {server}: " in out
    assert "FAIL gateway gone: " in out and "could not start" in out
    assert "read: runs unasked (no rule names it)" in line_of(out, "mcp__git__git_status")
    assert "read: runs unasked" in line_of(out, "mcp__time__get_current_time")
    assert "write: refused (rule no-commits)" in line_of(out, "mcp__git__git_commit")
    assert "write: runs unasked when size(args.files) < 2 (rule one-file-adds); otherwise asks (by default)" \
        in line_of(out, "mcp__git__git_add")
    # The hostile server's write that claims to be read-only is shown as the gateway will treat it:
    # a read on its word, a write where the operator overrode it.
    assert "read: runs unasked" in line_of(out, "mcp__hostile__lying_write") \
        and "read-only (annotation)" in line_of(out, "mcp__hostile__lying_write")
    assert "write: asks (no rule names it)" in line_of(out, "mcp__guarded__lying_write") \
        and "approval (override)" in line_of(out, "mcp__guarded__lying_write")
    assert "write: asks" in line_of(out, "mcp__hostile__hang_write")
    # Only the gateway's part is checked: not the database, Slack or the model.
    assert [line.split()[1] for line in out.splitlines() if not line.startswith(" ")] == \
        ["config:", "policy:", "gateway", "gateway", "gateway", "gateway", "gateway"]


def test_check_gateway_names_a_bad_file(tmp_path: Path) -> None:
    bad = tmp_path / "servers.json"
    bad.write_text('{"mcpServers": {"x": {"args": []}}}')
    done = check("--gateway", str(bad))
    assert done.returncode == 1 and "FAIL gateway: " in done.stdout and "server x" in done.stdout
