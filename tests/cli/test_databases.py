"""Where runs are stored, as a newcomer meets it: reads create nothing, the demo's runs are found,
and a database that will not open says why (which file, which flag or variable)."""

from __future__ import annotations

import os

import pytest


def test_after_the_demo_runs_list_points_at_the_demo_database_and_creates_nothing(signoff):
    demo = signoff.here("demo", "--quiet", answers="a\n")
    run_id = demo.out.split()[0]

    listed = signoff.here("runs", "list")
    shown = signoff.here("runs", "show", run_id)

    assert (listed.code, listed.out) == (0, "no runs yet; demo runs are in ./signoff-demo.db: add --demo\n")
    assert shown.code == 1
    assert shown.err == (f"error: no run {run_id!r} in sqlite:///signoff.db (it does not exist yet); "
                         "it is in the demo database: add --demo\n")
    assert not (signoff.cwd / "signoff.db").exists()
    assert signoff.here("runs", "show", run_id, "--demo").code == 0


def test_a_run_in_neither_database_gets_no_demo_hint(signoff):
    signoff.here("demo", "--quiet", answers="a\n")

    result = signoff.here("runs", "export", "run-0000000000")

    assert result.err == "error: no run 'run-0000000000' in sqlite:///signoff.db (it does not exist yet)\n"


def test_reading_a_missing_sqlite_file_is_an_error_that_leaves_no_file_behind(signoff, tmp_path):
    url = f"sqlite:///{tmp_path / 'typo.db'}"

    listed = signoff.here("runs", "list", "--database-url", url)
    checked = signoff.here("check", env={"SIGNOFF_DATABASE_URL": url})

    assert listed.code == 1
    missing = f"cannot reach the database at {url}: {tmp_path / 'typo.db'} does not exist; `signoff db upgrade` creates it"
    assert listed.err == f"error: {missing}\n"
    assert f"FAIL database: {missing}" in checked.lines
    assert not (tmp_path / "typo.db").exists()


def test_a_bad_database_url_names_the_flag_it_came_from(signoff):
    result = signoff.here("runs", "list", "--database-url", "banana")

    assert result.code == 2
    assert "Invalid value for '--database-url': not a database URL (expected sqlite:///path.db" in result.err
    assert "SIGNOFF_DATABASE_URL" not in result.err


def test_a_bad_database_url_names_the_variable_it_came_from(signoff):
    listed = signoff.here("runs", "list", env={"SIGNOFF_DATABASE_URL": "banana"})
    run = signoff.here("run", "anything", env={"SIGNOFF_DATABASE_URL": "mysql://u:hunter2@db/x"})

    assert listed.code == run.code == 1
    assert listed.err.startswith("error: SIGNOFF_DATABASE_URL: not a database URL (expected sqlite:///path.db")
    assert run.err.startswith("error: SIGNOFF_DATABASE_URL: unsupported database 'mysql'")
    assert "hunter2" not in run.err


@pytest.mark.slow
def test_a_read_only_directory_says_the_directory_is_not_writable(signoff):
    os.chmod(signoff.cwd, 0o555)
    try:
        result = signoff("demo", "--quiet", unprivileged=True)
    finally:
        os.chmod(signoff.cwd, 0o755)

    assert result.code == 1, result.out
    assert result.err == (f"error: the database at sqlite:///signoff-demo.db is not writable: directory "
                          f"{signoff.cwd} is not writable (SQLite keeps signoff-demo.db-wal and "
                          "signoff-demo.db-shm beside the database)\n")


@pytest.mark.slow
def test_a_read_only_database_file_says_the_file_is_not_writable(signoff):
    paused = signoff("demo", "--quiet")
    run_id = paused.out.split()[0]
    for path in signoff.cwd.glob("signoff-demo.db*"):
        os.chmod(path, 0o444)

    listed = signoff("runs", "list", "--demo", unprivileged=True)
    resumed = signoff("runs", "resume", run_id, "--demo", answers="a\n", unprivileged=True)

    assert paused.code == 3 and listed.code == 0, paused.err + listed.err  # reading needs no write
    assert resumed.code == 1, resumed.out
    assert resumed.err == ("error: the database at sqlite:///signoff-demo.db is not writable: file signoff-demo.db "
                           "is not writable\n")
    assert not signoff.demo_outbox.exists()  # nothing ran that could not be recorded


@pytest.mark.postgres
def test_a_postgres_url_is_taken_as_postgresql_from_the_flag_and_the_variable(signoff, tmp_path):
    from tests.conftest import fresh_database_url

    databases = fresh_database_url("postgres", tmp_path)
    url = next(databases)
    as_hosts_give_it = "postgres://" + url.split("://", 1)[1]  # what psql takes, and many hosts hand out
    try:
        # In processes of their own: they leave connections open, which the driver warns of in this one.
        demo = signoff("demo", "--quiet", "--database-url", as_hosts_give_it, answers="a\n")
        listed = signoff("runs", "list", env={"SIGNOFF_DATABASE_URL": as_hosts_give_it})
        checked = signoff("check", env={"SIGNOFF_DATABASE_URL": as_hosts_give_it})
    finally:
        next(databases, None)

    assert demo.code == 0, demo.err
    assert listed.code == 0, listed.err
    assert listed.lines[1].split()[:2] == [demo.out.split()[0], "done"]
    assert "ok database: postgresql://" in checked.out and "its schema is current" in checked.out, checked.out


@pytest.mark.postgres
def test_a_postgres_url_opens_the_database_from_python_too(tmp_path):
    from sqlalchemy import text

    from signoff.runtime.adapters.db import make_engine
    from tests.conftest import fresh_database_url

    databases = fresh_database_url("postgres", tmp_path)
    url = next(databases)
    engine = make_engine("postgres://" + url.split("://", 1)[1])
    try:
        with engine.connect() as conn:
            assert conn.execute(text("select 1")).scalar() == 1
    finally:
        engine.dispose()
        next(databases, None)
