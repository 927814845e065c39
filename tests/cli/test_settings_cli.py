"""Settings as the CLI reads them: a `.env` in the working directory (the environment wins), and
durations in days."""

from __future__ import annotations

import json
from datetime import datetime, timedelta


def run_id_of(result) -> str:
    return result.lines[-1].split()[0]


def steps_of(signoff, run_id: str) -> int:
    return json.loads(signoff.here("runs", "show", run_id, "--json").out)["run"]["steps"]


def test_dot_env_in_the_working_directory_is_read(signoff):
    (signoff.cwd / ".env").write_text("# local settings\nSIGNOFF_MAX_STEPS=1\nSIGNOFF_DATABASE_URL=sqlite:///local.db\n")

    result = signoff.here("run", "handle the damaged order", "--quiet")

    assert result.code == 4, result.err
    assert result.lines == [f"{run_id_of(result)} budget_exhausted: max_steps reached "
                            f"(extend with: signoff runs resume {run_id_of(result)})"]
    assert (signoff.cwd / "local.db").exists() and not (signoff.cwd / "signoff.db").exists()
    assert steps_of(signoff, run_id_of(result)) == 1


def test_a_variable_set_in_the_environment_wins_over_dot_env(signoff):
    (signoff.cwd / ".env").write_text("SIGNOFF_MAX_STEPS=1\n")

    result = signoff.here("run", "handle the damaged order", "--quiet", env={"SIGNOFF_MAX_STEPS": "2"})

    assert result.code == 4, result.err
    assert steps_of(signoff, run_id_of(result)) == 2


def test_check_says_which_dot_env_it_read(signoff):
    (signoff.cwd / ".env").write_text("SIGNOFF_MAX_STEPS=1\nSIGNOFF_OUTBOX='mail'\nexport SIGNOFF_WORKERS=2\n")

    read = signoff.here("check", env={"SIGNOFF_MAX_STEPS": "3"})
    (signoff.cwd / ".env").unlink()
    without = signoff.here("check")

    assert read.lines[0] == (f"ok config: SIGNOFF_* and SLACK_* settings are valid; read {signoff.cwd / '.env'} "
                             "(3 variables; the environment's own value wins for SIGNOFF_MAX_STEPS)")
    assert without.lines[0] == f"ok config: SIGNOFF_* and SLACK_* settings are valid; no .env in {signoff.cwd}"


def test_a_bad_value_in_dot_env_is_named_and_check_says_where_it_came_from(signoff):
    (signoff.cwd / ".env").write_text("SIGNOFF_MAX_STEPS=zero\n")

    ran = signoff.here("run", "anything")
    checked = signoff.here("check")

    assert ran.code == checked.code == 1
    assert ran.err.startswith("error: SIGNOFF_MAX_STEPS: ")
    assert checked.lines[0].startswith("FAIL config: SIGNOFF_MAX_STEPS: ")
    assert checked.lines[0].endswith(f"; read {signoff.cwd / '.env'} (1 variable)")


def test_an_approval_ttl_in_days_is_accepted(signoff):
    paused = signoff.here("run", "handle the damaged order", "--quiet", env={"SIGNOFF_APPROVAL_TTL": "1d"})

    assert paused.code == 3, paused.err
    story = json.loads(signoff.here("runs", "show", run_id_of(paused), "--json").out)
    [approval] = story["approvals"]
    lasts = datetime.fromisoformat(approval["expires_at"]) - datetime.fromisoformat(approval["requested_at"])
    assert lasts == timedelta(days=1)


def test_check_warns_of_a_signoff_variable_that_is_no_setting_and_names_the_likely_one(signoff):
    (signoff.cwd / ".env").write_text("SIGNOFF_MAXSTEPS=3\n")

    result = signoff("check", env={"SIGNOFF_APROVERS": "U0LEAD", "SIGNOFF_SOMETHING_ELSE": "1"})

    assert result.code == 0, result.out
    assert [line for line in result.lines if line.startswith("warn config")] == [
        "warn config: SIGNOFF_APROVERS is not a setting, so it is ignored; did you mean SIGNOFF_APPROVERS?",
        "warn config: SIGNOFF_MAXSTEPS is not a setting, so it is ignored; did you mean SIGNOFF_MAX_STEPS?",
        "warn config: SIGNOFF_SOMETHING_ELSE is not a setting, so it is ignored"]
    (signoff.cwd / ".env").unlink()
    assert signoff.here("check").lines[1].startswith("ok tools: ")  # nothing to warn of
