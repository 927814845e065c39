"""The real `signoff` CLI in a subprocess with HTTP tools: `signoff tools` and `signoff check` show each
tool with its gate, `signoff run` asks before a POST and sends it once; the token is never printed,
not even in debug logs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from http_harness import FakeApi
from test_http_run import SCRIPT, api_file

pytestmark = pytest.mark.slow

SECRET = "tk-0123456789-secret"
_SCRUBBED = ("SIGNOFF_", "SLACK_", "OPENAI_", "ANTHROPIC_")


@pytest.fixture
def api() -> Iterator[FakeApi]:
    with FakeApi() as server:
        yield server


@pytest.fixture
def signoff(tmp_path: Path, api: FakeApi):
    """`signoff --debug ARGS` in `tmp_path` with the tickets API configured and its token in the environment."""
    api_file(tmp_path / "apis.yaml", api.url)
    env = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUBBED)}
    env.update(SIGNOFF_HTTP_TOOLS="apis.yaml", SIGNOFF_TOOLS="demo,http:tickets", TICKETS_TOKEN=SECRET,
               SIGNOFF_MODEL=f"scripted:{tmp_path / 'script.json'}",
               SIGNOFF_DATABASE_URL=f"sqlite:///{tmp_path / 'signoff.db'}")

    def run(*args: str, answers: str | None = None, script: list[dict[str, Any]] | None = None
            ) -> subprocess.CompletedProcess[str]:
        if script is not None:
            (tmp_path / "script.json").write_text(json.dumps(script))
        done = subprocess.run([sys.executable, "-m", "signoff.bot.cli", "--debug", *args], cwd=tmp_path, env=env,
                              input=answers, stdin=None if answers is not None else subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=120)
        assert SECRET not in done.stdout + done.stderr
        return done

    run("db", "upgrade")
    return run


def test_signoff_tools_prints_each_http_tool_with_its_gate(signoff):
    done = signoff("tools")
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line for line in done.stdout.splitlines() if line.startswith("http__")}
    assert re.search(r"read-only +- +30s +gate: method · timeout: default +Read one ticket\. \(GET 127\.0\.0\.1:\d+"
                     r"/tickets/\{ticket_id\}\)$", rows["http__tickets__get_ticket"])
    assert re.search(r"approval +not idempotent +30s +gate: method · idempotent: default · timeout: default",
                     rows["http__tickets__add_comment"])


def test_signoff_check_lists_the_api_with_its_tools_and_how_each_is_gated(signoff, api):
    lines = signoff("check").stdout.splitlines()
    host = api.url.removeprefix("http://")
    assert f"ok http tickets: {api.url} -> 2 tools · headers: Authorization" in lines
    assert any(re.match(r" +http__tickets__get_ticket +GET /tickets/\{ticket_id\} +read-only \(method\), 30s \(default\)$",
                        line) for line in lines)
    assert any(re.match(r" +http__tickets__add_comment +POST /tickets/\{ticket_id\}/comments +approval \(method\), "
                        r"not idempotent \(default\), 30s \(default\)$", line) for line in lines)
    assert api.requests == [] and host  # listing the tools sends nothing


def test_signoff_run_asks_before_the_post_and_sends_it_once(signoff, api):
    api.answer("GET", "/tickets/T-1", body={"id": "T-1", "echo": f"Bearer {SECRET}"})
    api.answer("POST", "/tickets/T-1/comments", status=201, body={"comment": 7})
    done = signoff("run", "Comment on T-1", answers="a\n", script=SCRIPT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("Approval needed:") == 1 and "Approval needed: http__tickets__add_comment" in done.stdout
    assert 'text: "Refund sent."' in done.stdout and "Bearer ***" in done.stdout
    get, post = api.requests
    run_id = re.search(r"(run-[0-9a-f]{10})", done.stdout).group(1)
    assert (post.method, post.header("Idempotency-Key")) == ("POST", f"{run_id}:2")
    assert get.header("Idempotency-Key") is None
