"""Operations and the CLI's manners: db upgrade, check, manifest, help, one-line errors, --debug."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import click
import pytest

from signoff.bot.cli import cli
from tests.fakes.slack import FakeSlack

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_bad_tools_spec_is_one_line_naming_it_and_debug_shows_the_traceback(signoff):
    plain = signoff("run", "anything", "--tools", "no_such_pkg.tools:TOOLS")
    debug = signoff.here("--debug", "run", "anything", "--tools", "no_such_pkg.tools:TOOLS")

    assert plain.code == 1
    assert plain.err == ("error: toolset 'no_such_pkg.tools:TOOLS': no module named 'no_such_pkg' "
                         "(is it installed, or on PYTHONPATH?)\n")
    assert plain.out == ""
    assert not (signoff.cwd / "signoff.db").exists()  # nothing was started
    assert debug.code == 1
    assert "Traceback (most recent call last)" in debug.err
    assert debug.err.rstrip().endswith("error: toolset 'no_such_pkg.tools:TOOLS': no module named 'no_such_pkg' "
                                       "(is it installed, or on PYTHONPATH?)")


@pytest.mark.slow
def test_check_with_an_unreachable_database_fails_with_the_password_masked(signoff):
    url = "postgresql+psycopg://signoff:hunter2-db-pass@127.0.0.1:1/signoff"

    result = signoff("check", env={"SIGNOFF_DATABASE_URL": url})

    assert result.code == 1
    [line] = [line for line in result.lines if "database" in line]
    assert line.startswith("FAIL database: cannot reach the database at postgresql+psycopg://signoff:***@127.0.0.1:1/")
    assert "hunter2-db-pass" not in result.out + result.err
    assert [line.split()[0] for line in result.lines] == ["ok", "ok", "ok", "FAIL", "ok", "skip", "skip", "skip", "ok"]


def test_check_all_ok_against_a_migrated_database_and_slack(signoff, sqlite_url):
    with FakeSlack(token="xoxb-good") as slack:
        env = {"SIGNOFF_DATABASE_URL": sqlite_url, "SLACK_BOT_TOKEN": "xoxb-good", "SLACK_API_URL": slack.url}
        good = signoff.here("check", env=env)
        bad = signoff.here("check", env={**env, "SLACK_BOT_TOKEN": "xoxb-revoked"})

    assert good.code == 0, good.out
    assert good.lines == [
        f"ok config: SIGNOFF_* and SLACK_* settings are valid; no .env in {signoff.cwd}",
        "ok tools: demo -> search_handbook, lookup_orders, send_email, issue_refund",
        "ok policy: built-in (every side effect asks SIGNOFF_APPROVERS)",
        f"ok database: {sqlite_url} is reachable and its schema is current",
        "ok outbox: outbox does not exist yet; the first email or refund creates it",
        "skip audit webhook: SIGNOFF_AUDIT_WEBHOOK_URL is not set",
        "skip receipts: SIGNOFF_SIGNING_KEY is not set; decisions get no signed receipts",
        "ok slack: auth.test accepted the bot token (signoff in Signoff Test)",
        "ok model scripted:demo: scripted:demo_script.json has 6 decision(s) (scripted, not a model)",
    ]
    assert bad.code == 1
    assert f"FAIL slack: auth.test at {slack.url} answered invalid_auth" in bad.lines
    assert "xoxb-revoked" not in bad.out


def test_check_reports_bad_settings_and_an_unmigrated_database(signoff, tmp_path):
    bad_settings = signoff.here("check", env={"SIGNOFF_MAX_STEPS": "zero"})
    sqlite3.connect(tmp_path / "empty.db").close()
    unmigrated = signoff.here("check", env={"SIGNOFF_DATABASE_URL": f"sqlite:///{tmp_path / 'empty.db'}",
                                            "OPENAI_API_KEY": "", "SIGNOFF_MODEL": "openai:gpt-4o"})

    assert bad_settings.code == 1
    assert bad_settings.lines[0].startswith("FAIL config: SIGNOFF_MAX_STEPS:")
    assert unmigrated.code == 1
    assert "has no Signoff tables; run `signoff db upgrade`" in unmigrated.out
    assert "FAIL model openai:gpt-4o: OPENAI_API_KEY is not set" in unmigrated.out


def test_db_upgrade_creates_the_schema_on_a_fresh_file(signoff, tmp_path):
    url = f"sqlite:///{tmp_path / 'fresh.db'}"

    first = signoff.here("db", "upgrade", "--database-url", url)
    second = signoff.here("db", "upgrade", "--database-url", url)

    assert first.code == 0, first.err
    head = first.out.split("-> ")[1].strip()
    assert first.out == f"{url}: (empty) -> {head}\n"
    assert second.out == f"{url}: {head} -> {head} (already current)\n"
    with sqlite3.connect(tmp_path / "fresh.db") as db:
        tables = {row[0] for row in db.execute("select name from sqlite_master where type='table'")}
    assert {"runs", "run_history", "approvals", "events", "tool_executions", "alembic_version"} <= tables


def test_db_upgrade_on_an_unreachable_database_is_one_line_naming_what_is_missing(signoff, tmp_path):
    url = f"sqlite:///{tmp_path / 'no' / 'such' / 'dir.db'}"

    result = signoff.here("db", "upgrade", "--database-url", url)

    assert result.code == 1
    assert result.err == f"error: cannot reach the database at {url}: directory {tmp_path / 'no' / 'such'} does not exist\n"


def test_a_new_sqlite_file_anywhere_is_created_and_migrated_on_first_use(signoff, tmp_path):
    (tmp_path / "data").mkdir()
    url = f"sqlite:///{tmp_path / 'data' / 'runs.db'}"

    result = signoff.here("run", "handle the damaged order", "--quiet", "--max-steps", "1", "--database-url", url)

    assert result.code == 4, result.err  # ran until its one-step budget was used up
    listed = signoff.here("runs", "list", "--database-url", url)
    assert listed.lines[1].split()[:2] == [result.lines[-1].split()[0], "budget_exhausted"]
    assert not (tmp_path / "signoff.db").exists()


def test_an_existing_database_is_never_changed_behind_your_back(signoff, tmp_path):
    sqlite3.connect(tmp_path / "prod.db").execute("create table customers (id integer)").connection.close()
    url = f"sqlite:///{tmp_path / 'prod.db'}"

    result = signoff.here("run", "anything", "--database-url", url)

    assert result.code == 1
    assert result.err == f"error: the database at {url} has no Signoff tables; run `signoff db upgrade`\n"
    with sqlite3.connect(tmp_path / "prod.db") as db:
        assert [row[0] for row in db.execute("select name from sqlite_master")] == ["customers"]


def test_bad_flag_values_are_usage_errors(signoff):
    result = signoff.here("run", "anything", "--max-steps", "0")

    assert result.code == 2
    assert "Invalid value for '--max-steps'" in result.err
    assert "Traceback" not in result.err


def test_empty_goal_is_a_usage_error(signoff):
    result = signoff.here("run", "   ")

    assert result.code == 2
    assert "GOAL: the goal is empty" in result.err


def test_tools_prints_a_header_over_its_columns(signoff):
    result = signoff("tools", "--demo")

    assert result.code == 0, result.err
    header, *rows = result.lines
    assert header.split() == ["TOOL", "GATE", "IDEMPOTENCY", "TIMEOUT", "FROM", "DESCRIPTION"]
    assert [row.split()[:4] for row in rows] == [
        ["search_handbook", "read-only", "-", "5s"], ["lookup_orders", "read-only", "-", "5s"],
        ["send_email", "approval", "idempotent", "10s"], ["issue_refund", "approval", "idempotent", "10s"]]
    assert all(row.index(" gate: code ") == header.index(" FROM ") for row in rows)  # each under its heading


def test_manifest_prints_the_packaged_manifest_identical_to_deploy(signoff):
    packaged = ROOT / "bot" / "slack-manifest.yaml"
    deployed = ROOT / "deploy" / "slack-manifest.yaml"

    result = signoff.here("manifest")

    assert result.code == 0, result.err
    assert result.out == packaged.read_text(encoding="utf-8")
    assert packaged.read_bytes() == deployed.read_bytes()


def all_commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [prefix]
    context = click.Context(group)
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        if isinstance(command, click.Group):
            found += all_commands(command, (*prefix, name))
        else:
            found.append((*prefix, name))
    return found


COMMANDS = all_commands(cli)


def test_every_command_is_covered():
    assert {" ".join(c) for c in COMMANDS} >= {
        "", "run", "demo", "runs", "runs list", "runs show", "runs export", "runs resume", "db", "db upgrade",
        "check", "manifest", "serve", "policy", "policy explain"}


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "signoff")
def test_help_on_every_command(signoff, command):
    result = signoff.here(*command, "--help")

    assert result.code == 0, result.err
    assert result.out.startswith(f"Usage: signoff {' '.join(command)}".rstrip())


def test_help_documents_exit_codes_and_piped_answers(signoff):
    run_help = signoff.here("run", "--help").out
    demo_help = signoff.here("demo", "--help").out

    assert "3 paused waiting for a decision" in run_help and "4 stopped without an answer" in run_help
    assert "may approve their own run's side effects here" in run_help
    assert "printf 'a\\n' | signoff demo" in demo_help
    assert "scripted model (not a real one)" in " ".join(demo_help.split())


def test_serve_without_slack_settings_says_what_is_missing(signoff):
    result = signoff.here("serve")

    assert result.code == 1
    assert result.err == ("error: SLACK_BOT_TOKEN: required by `signoff serve` (a bot token, xoxb-...); "
                          "SLACK_SIGNING_SECRET: required in HTTP mode (or set SLACK_APP_TOKEN to use Socket Mode); "
                          "SIGNOFF_APPROVERS: required by `signoff serve`: the Slack user ids (U...) and user group "
                          "ids (S...) who may approve, * for any member of the channel where approvals are "
                          "posted, or on-call schedules (pagerduty:<schedule id>, opsgenie:<schedule name>)\n")
