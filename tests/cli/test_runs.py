"""`signoff run` and `signoff runs ...`: flags over the environment, redaction, and settling stopped runs."""

from __future__ import annotations

import json
import sqlite3
import time
from datetime import timedelta

import pytest

from signoff.bot.settings import Settings
from signoff.bot.wiring import build_runner
from tests.fakes.openai_server import FakeOpenAI, completion

PASSWORD, TOKEN, PIN = "pw-Sup3rSecret-1", "tk-Sup3rSecret-2", "pin-Sup3rSecret-3"

SECRET_TOOLS = '''
from pydantic import BaseModel
from signoff.tools.base import Tool


class RotateArgs(BaseModel):
    service: str
    password: str
    token: str
    pin: str


def rotate(args, key):
    return {"rotated": args["service"], "key": key, "token": args["token"]}


TOOLS = [Tool(name="rotate_credentials", fn=rotate, side_effect=True, idempotent=True, args_model=RotateArgs,
              description="Rotate a service's credentials.", redact=("pin",))]
'''

SLOW_TOOLS = '''
import time
from pathlib import Path
from signoff.tools.base import Tool

CALLS = Path("deploy-calls.txt")


def deploy(args, key):
    CALLS.write_text(CALLS.read_text() + key + "\\n" if CALLS.exists() else key + "\\n")
    time.sleep(1.0)
    return {"deployed": args["version"]}


TOOLS = [Tool(name="deploy", fn=deploy, side_effect=True, timeout_s=0.2, description="Deploy a version.")]
'''


def run_id_of(result) -> str:
    return result.lines[-1].split()[0]


def write_script(path, *decisions) -> str:
    path.write_text(json.dumps(list(decisions)))
    return f"scripted:{path}"


@pytest.mark.slow
def test_secret_arguments_are_redacted_everywhere_they_are_shown(signoff, tmp_path, monkeypatch):
    (tmp_path / "secret_tools.py").write_text(SECRET_TOOLS)
    model = write_script(tmp_path / "rotate.json",
                         {"tool": "rotate_credentials",
                          "args": {"service": "billing-db", "password": PASSWORD, "token": TOKEN, "pin": PIN}},
                         {"final": "Rotated the billing-db credentials."})

    result = signoff("run", "rotate the billing-db credentials", "--model", model, "--tools", "secret_tools:TOOLS",
                     answers="a\n")

    assert result.code == 0, result.err
    assert f"password: [redacted: {len(PASSWORD)} chars, #" in result.out
    assert f"pin: [redacted: {len(PIN)} chars, #" in result.out
    run_id = run_id_of(result)
    monkeypatch.syspath_prepend(str(tmp_path))  # so the in-process runs below load the same tools
    tools = ("--tools", "secret_tools:TOOLS")
    exported = signoff.here("runs", "export", run_id, *tools)
    shown_json = signoff.here("runs", "show", run_id, "--json", *tools)
    shown = signoff.here("runs", "show", run_id, *tools)
    records = [json.loads(line) for line in exported.lines]
    assert {r["record"] for r in records} == {"run", "history", "event", "approval", "execution"}
    [approval] = [r["data"] for r in records if r["record"] == "approval"]
    assert approval["args"] == {"service": "billing-db", "password": "[redacted]", "token": "[redacted]",
                                "pin": "[redacted]"}
    for text in (result.out, result.err, exported.out, shown_json.out, shown.out):
        for secret in (PASSWORD, TOKEN, PIN):
            assert secret not in text
    # Without the tool loaded, its own secret names are known from the audit events.
    assert PIN not in signoff.here("runs", "export", run_id, "--tools", "demo").out
    # The secrets are in the database (the tool needed them), so the redaction above did real work.
    with sqlite3.connect(tmp_path / "signoff.db") as db:
        stored = " ".join(row[0] for row in db.execute("select entry from run_history"))
    assert PASSWORD in stored and PIN in stored


def test_flags_override_the_environment(signoff):
    from_env = signoff.here("run", "handle the damaged order", "--quiet", env={"SIGNOFF_MAX_STEPS": "1"})
    from_flag = signoff.here("run", "handle the damaged order", "--quiet", "--max-steps", "2",
                             env={"SIGNOFF_MAX_STEPS": "1"})

    assert from_env.code == from_flag.code == 4
    run_ids = [run_id_of(from_env), run_id_of(from_flag)]
    story = [json.loads(signoff.here("runs", "show", r, "--json").out)["run"] for r in run_ids]
    assert [(s["steps"], s["budget"]["max_steps"]) for s in story] == [(1, 1), (2, 2)]
    assert from_env.lines == [f"{run_ids[0]} budget_exhausted: max_steps reached "
                              f"(extend with: signoff runs resume {run_ids[0]})"]


def test_resume_extends_a_run_that_ran_out_of_budget(signoff):
    stopped = signoff.here("demo", "--quiet", "--max-steps", "2")
    run_id = run_id_of(stopped)

    resumed = signoff.here("runs", "resume", run_id, "--demo", answers="e\na\n")

    assert resumed.code == 0, resumed.err
    assert "Extend max_steps [e] or quit [q]? e" in resumed.out
    assert resumed.lines[-1].startswith(f"{run_id} done: ")
    story = json.loads(signoff.here("runs", "show", run_id, "--demo", "--json").out)
    assert story["run"]["budget"]["max_steps"] == 6  # 2 plus the default extension of 4
    assert "budget_extended" in [e["type"] for e in story["events"]]


def test_resume_retries_a_run_whose_model_refused_the_key(signoff):
    with FakeOpenAI(api_key="sk-right") as fake:
        fake.script(completion("Nothing needs doing."))
        env = {"OPENAI_BASE_URL": fake.url}
        failed = signoff.here("run", "anything to do?", "--model", "openai:gpt-4o", "--quiet",
                              env={**env, "OPENAI_API_KEY": "sk-wrong"})
        run_id = run_id_of(failed)
        retried = signoff.here("runs", "resume", run_id, answers="r\n", env={**env, "OPENAI_API_KEY": "sk-right"})

    assert failed.code == 4
    assert failed.lines == [f"{run_id} failed: model rejected credentials (retry with: signoff runs resume {run_id})"]
    assert retried.code == 0, retried.err
    assert "Retry from the last checkpoint [r] or quit [q]? r" in retried.out
    assert retried.lines[-1] == f"{run_id} done: Nothing needs doing."


def test_resume_settles_a_side_effect_with_an_unknown_outcome(signoff, tmp_path, monkeypatch):
    (tmp_path / "slow_tools.py").write_text(SLOW_TOOLS)
    monkeypatch.syspath_prepend(str(tmp_path))
    model = write_script(tmp_path / "deploy.json", {"tool": "deploy", "args": {"version": 7}},
                         {"final": "Version 7 is out."})
    options = ("--model", model, "--tools", "slow_tools:TOOLS")

    stopped = signoff.here("run", "deploy version 7", *options, "--quiet", answers="a\n")
    run_id = run_id_of(stopped)
    settled = signoff.here("runs", "resume", run_id, "--tools", "slow_tools:TOOLS",
                           answers='d\ndone\n{"deployed": 7, "checked": "by hand"}\n')

    assert stopped.code == 4
    assert stopped.lines[-1].startswith(f"{run_id} needs_reconciliation: timed out")
    assert stopped.lines[-1].endswith(f"(settle with: signoff runs resume {run_id} --tools slow_tools:TOOLS)")
    assert settled.code == 0, settled.err
    assert f"the call: deploy (key {run_id}:1), its arguments in full:\n    version: 7\n" in settled.out
    assert "please answer done, retry, abort, q" in settled.out  # a lone "d" is not enough
    assert settled.lines[-1] == f"{run_id} done: Version 7 is out."
    assert (tmp_path / "deploy-calls.txt").read_text() == f"{run_id}:1\n"  # settled, not run again
    story = json.loads(signoff.here("runs", "show", run_id, "--json").out)
    assert {"role": "tool", "step": 1, "tool": "deploy", "call_id": "call-1",
            "result": {"deployed": 7, "checked": "by hand"}} in story["history"]


def test_an_approval_that_expired_while_paused_is_not_executed(signoff):
    # Three seconds: on a loaded machine the run can take more than one between asking and pausing,
    # and its approval expired before it paused. It was asked before the run returned, so it has
    # expired once the TTL has passed since then.
    env = {"SIGNOFF_APPROVAL_TTL": "3s"}
    paused = signoff.here("run", "handle the damaged order", "--quiet", env=env)
    time.sleep(3.1)

    resumed = signoff.here("runs", "resume", run_id_of(paused), answers="q\n", env=env)  # not requested again

    assert paused.code == 3 and resumed.code == 4
    assert "expired; nothing was executed" in resumed.out
    assert "Request it again (a fresh approval) [a] or quit [q]? q" in resumed.out
    assert resumed.lines[-1].startswith(f"{run_id_of(paused)} expired: ")
    assert not (signoff.outbox).exists() or list(signoff.outbox.glob("*.eml")) == []


def test_unknown_run_is_a_one_line_error(signoff):
    result = signoff.here("runs", "show", "run-nope")

    assert result.code == 1
    assert result.err == "error: no run 'run-nope' in sqlite:///signoff.db (it does not exist yet)\n"
    assert not (signoff.cwd / "signoff.db").exists()


def test_empty_runs_list(signoff):
    result = signoff.here("runs", "list")

    assert (result.code, result.out) == (0, "no runs yet\n")
    assert not (signoff.cwd / "signoff.db").exists()


def test_runs_list_shows_a_damaged_run_beside_the_others(signoff, tmp_path):
    first = run_id_of(signoff.here("run", "handle the damaged order", "--quiet", "--max-steps", "1"))
    second = run_id_of(signoff.here("run", "handle the damaged order", "--quiet", "--max-steps", "1"))
    with sqlite3.connect(tmp_path / "signoff.db") as db:
        db.execute("update runs set state = '{\"steps\": 1, \"st' where run_id = ?", (first,))

    result = signoff.here("runs", "list")

    assert result.code == 0, result.err
    listed = {line.split()[0]: line.split()[3] for line in result.lines[1:]}
    assert listed == {first: "?", second: "1"}
    assert result.err.startswith(f"warning: run {first}: stored state is not valid JSON")


def lease_of(tmp_path, run_id):
    with sqlite3.connect(tmp_path / "signoff.db") as db:
        return db.execute("select status, lease_owner, lease_expires_at from runs where run_id = ?",
                          (run_id,)).fetchone()


@pytest.mark.slow
def test_resume_continues_a_run_whose_process_died(signoff, tmp_path):
    crashed = signoff("run", "handle the damaged order", env={
        "SIGNOFF_FAILPOINTS": "after_checkpoint=exit", "SIGNOFF_LEASE_SECONDS": "1"})
    assert crashed.code == 137  # died right after saving its first step, holding the lease
    with sqlite3.connect(tmp_path / "signoff.db") as db:
        [(run_id, status, owner)] = db.execute("select run_id, status, lease_owner from runs").fetchall()
    assert status == "running" and owner is not None
    time.sleep(1.0)  # the dead worker's one-second lease runs out

    # The built-in policy asks about every side effect: the email, the refund and the goodwill refund.
    resumed = signoff.here("runs", "resume", run_id, answers="a\na\nd\nnot this one\n")

    assert resumed.code == 0, resumed.err
    assert resumed.lines[-1].startswith(f"{run_id} done: ")
    assert len(list(signoff.outbox.glob("*.eml"))) == 1
    assert [r["order_id"] for r in map(json.loads, (signoff.outbox / "refunds.jsonl").read_text().splitlines())] == [
        "A-1001"]


def test_resume_refuses_a_run_another_worker_holds(signoff, tmp_path):
    settings = Settings.from_env({"SIGNOFF_DATABASE_URL": f"sqlite:///{tmp_path / 'signoff.db'}"})
    runner = build_runner(settings, None, env={}, auto_upgrade=True)
    run = runner.start_run("handle the damaged order", requester="U123")
    assert runner.store.claim(run.run_id, "worker-elsewhere", timedelta(minutes=5)) is not None

    result = signoff.here("runs", "resume", run.run_id, answers="a\na\n")

    assert result.code == 1
    assert result.err.startswith(f"error: run {run.run_id} is being run by worker-elsewhere until ")
    assert lease_of(tmp_path, run.run_id)[:2] == ("idle", "worker-elsewhere")
