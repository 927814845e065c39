"""What `--help` says is the whole of what the commands take: every answer at the approval prompt,
every kind of toolset, every `runs` command."""

from __future__ import annotations

from signoff.bot.settings import ENV_DESCRIPTIONS


def words(text: str) -> str:
    return " ".join(text.split())


def test_run_help_names_every_answer_the_approval_prompt_takes(signoff):
    shown = words(signoff.here("run", "--help").out)

    for answer in ("approve [a]", "[s]", "deny [d]", "edit [e]", "quit [q]"):
        assert answer in shown


def test_the_tools_flag_names_every_kind_of_toolset_the_setting_takes(signoff):
    shown = words(signoff.here("run", "--help").out)

    setting = ENV_DESCRIPTIONS["SIGNOFF_TOOLS"].removesuffix(".")
    assert f"--tools TEXT {setting} (overrides SIGNOFF_TOOLS)." in shown
    assert "http:<api>" in shown


def test_runs_help_names_every_runs_command(signoff):
    shown = signoff.here("runs", "--help").out
    listed = [line.split()[0] for line in shown[shown.index("Commands:"):].splitlines()[1:] if line.strip()]

    assert sorted(listed) == ["export", "list", "replay", "resume", "show"]
    summary = words(shown[:shown.index("Options:")])
    assert "List, show, export, resume and replay stored runs." in summary
