"""HTTP tools in real runs: the runner `signoff run` and `signoff serve` build, a scripted model, a local
API. A GET runs unasked; a POST waits for a person, then is sent once with its approval's key."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from http_harness import FakeApi

from signoff.bot.settings import Settings
from signoff.bot.wiring import build_runner, load_tools, runner_config
from signoff.runtime.runner import Runner

USER = "cli:ana"
SECRET = "tk-0123456789-secret"


def api_file(path: Path, url: str, **entry: Any) -> Path:
    ticket = {"ticket_id": {"type": "string"}}
    path.write_text(yaml.safe_dump({"apis": {"tickets": {
        "base_url": url, "headers": {"Authorization": "Bearer ${TICKETS_TOKEN}"}, **entry,
        "tools": [
            {"name": "get_ticket", "method": "GET", "path": "/tickets/{ticket_id}", "description": "Read one ticket.",
             "args": {"type": "object", "properties": ticket, "required": ["ticket_id"]}},
            {"name": "add_comment", "method": "POST", "path": "/tickets/{ticket_id}/comments",
             "description": "Comment on a ticket.",
             "args": {"type": "object", "properties": {**ticket, "text": {"type": "string"}},
                      "required": ["ticket_id", "text"]}},
        ]}}}))
    return path


@pytest.fixture
def api() -> Iterator[FakeApi]:
    with FakeApi() as server:
        yield server


def runner(tmp_path: Path, api: FakeApi, script: list[dict[str, Any]], **entry: Any) -> Runner:
    (tmp_path / "script.json").write_text(json.dumps(script))
    settings = Settings.from_env({
        "SIGNOFF_DATABASE_URL": f"sqlite:///{tmp_path / 'signoff.db'}", "SIGNOFF_TOOLS": "http:tickets",
        "SIGNOFF_MODEL": f"scripted:{tmp_path / 'script.json'}",
        "SIGNOFF_HTTP_TOOLS": str(api_file(tmp_path / "apis.yaml", api.url, **entry)),
    })
    tools = load_tools(settings, environ={"TICKETS_TOKEN": SECRET})
    return build_runner(settings, None, env={}, tools=tools, auto_upgrade=True,
                        config=runner_config(settings, allow_self_approval=True))


def drive(runner: Runner, run_id: str, answers: list[bool]) -> str:
    """Execute the run, answering each approval from `answers` in turn, until it stops; its status."""
    while True:
        runner.execute(run_id)
        run = runner.get_run(run_id)
        assert run is not None
        if run.status != "awaiting_approval" or not answers:
            return run.status
        approval = runner.pending_approval(run_id)
        assert approval is not None
        runner.decide(approval.approval_id, approval.digest, USER, approved=answers.pop(0))


def tool_entries(runner: Runner, run_id: str) -> list[dict[str, Any]]:
    run = runner.get_run(run_id)
    assert run is not None
    return [entry for entry in run.state["history"] if entry["role"] == "tool"]


SCRIPT = [
    {"tool": "http__tickets__get_ticket", "args": {"ticket_id": "T-1"}},
    {"tool": "http__tickets__add_comment", "args": {"ticket_id": "T-1", "text": "Refund sent."}},
    {"final": "Commented."},
]


def test_a_get_runs_unasked_and_a_post_waits_then_is_sent_once_with_its_key(tmp_path, api):
    api.answer("GET", "/tickets/T-1", body={"id": "T-1", "status": "open"})
    api.answer("POST", "/tickets/T-1/comments", status=201, body={"comment": 7})
    work = runner(tmp_path, api, SCRIPT)
    run_id = work.start_run("comment on T-1", requester=USER).run_id

    assert drive(work, run_id, []) == "awaiting_approval"
    assert [(r.method, r.path) for r in api.requests] == [("GET", "/tickets/T-1")]  # the read ran by itself
    approval = work.pending_approval(run_id)
    assert approval is not None and approval.tool == "http__tickets__add_comment"
    assert approval.args == {"ticket_id": "T-1", "text": "Refund sent."} and approval.key == f"{run_id}:2"

    assert drive(work, run_id, [True]) == "done"
    assert drive(work, run_id, [True]) == "done"  # executing a finished run sends nothing again
    get, post = api.requests
    assert (post.method, post.path, post.json) == ("POST", "/tickets/T-1/comments", {"text": "Refund sent."})
    assert post.header("Idempotency-Key") == f"{run_id}:2" and get.header("Idempotency-Key") is None
    assert post.header("Authorization") == f"Bearer {SECRET}"
    read, wrote = tool_entries(work, run_id)
    assert read["result"] == {"status": 200, "body": {"id": "T-1", "status": "open"}}
    assert wrote["result"] == {"status": 201, "body": {"comment": 7}}
    run = work.get_run(run_id)
    assert run is not None and SECRET not in json.dumps(run.state)


def test_a_denied_post_is_never_sent(tmp_path, api):
    api.answer("GET", "/tickets/T-1", body={"id": "T-1"})
    work = runner(tmp_path, api, SCRIPT)
    run_id = work.start_run("comment on T-1", requester=USER).run_id
    assert drive(work, run_id, [False]) == "done"
    assert [r.method for r in api.requests] == ["GET"]


def test_a_post_that_times_out_needs_reconciliation_and_is_not_sent_again(tmp_path, api):
    api.answer("GET", "/tickets/T-1", body={"id": "T-1"})
    api.answer("POST", "/tickets/T-1/comments", status=201, body={}, delay_s=3)
    work = runner(tmp_path, api, SCRIPT, timeout=1)
    run_id = work.start_run("comment on T-1", requester=USER).run_id
    assert drive(work, run_id, [True]) == "needs_reconciliation"
    assert drive(work, run_id, []) == "needs_reconciliation"
    assert [r.method for r in api.requests] == ["GET", "POST"]
    run = work.get_run(run_id)
    assert run is not None and "may or may not have taken effect" in run.state["stop"]["reason"]


def test_a_failed_post_is_told_to_the_model_and_the_run_goes_on(tmp_path, api):
    api.answer("GET", "/tickets/T-1", body={"id": "T-1"})
    api.answer("POST", "/tickets/T-1/comments", status=409, body={"error": "ticket is closed"})
    work = runner(tmp_path, api, SCRIPT)
    run_id = work.start_run("comment on T-1", requester=USER).run_id
    assert drive(work, run_id, [True]) == "done"
    failed = tool_entries(work, run_id)[-1]
    assert failed["error"] == 'ToolFailed: HTTP 409 Conflict: {"error": "ticket is closed"}'
