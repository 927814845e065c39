"""A run that is done although what it was let do failed: the outcome line says so, exit 5; and
`check_outbox` says beforehand whether the demo tools can write where they are told."""

from __future__ import annotations

import os
import subprocess

import pytest
from cli_harness import python_unprivileged

from signoff.bot.cli.outbox_check import check_outbox
from signoff.bot.settings import Settings


def test_a_run_whose_every_approved_call_failed_says_so_even_when_quiet(signoff):
    signoff.demo_outbox.write_text("not a directory")  # every email and refund fails to be written

    result = signoff.here("demo", "--quiet", answers="a\n")

    assert result.code == 5, result.err
    [outcome] = result.lines
    run_id = outcome.split()[0]
    assert outcome.startswith(f"{run_id} done, but 2 of 2 approved calls failed: Order A-1001")
    shown = signoff.here("runs", "show", run_id, "--demo")
    executions = shown.out[shown.out.index("executions:"):]
    assert f"{run_id}:3  send_email  failed" in executions and f"{run_id}:4  issue_refund  failed" in executions


@pytest.mark.slow
def test_a_read_only_outbox_fails_both_approved_calls(signoff):
    signoff.demo_outbox.mkdir()
    os.chmod(signoff.demo_outbox, 0o555)

    result = signoff("demo", answers="a\n", unprivileged=True)

    assert result.code == 5, result.err
    assert " done, but 2 of 2 approved calls failed: " in result.lines[-1]
    assert list(signoff.demo_outbox.iterdir()) == []


def test_a_run_with_one_failed_call_of_two_says_so_and_exits_0(signoff):
    # An outbox given with --outbox keeps its refunds from one demo to the next, as `signoff run`'s does.
    first = signoff.here("demo", "--quiet", "--outbox", "shared", answers="a\n")
    second = signoff.here("demo", "--quiet", "--outbox", "shared", answers="a\n")  # its refund was made by the first

    assert first.code == 0 and " done: " in first.out
    assert second.code == 0, second.err
    assert " done, but 1 of 2 approved calls failed: " in second.out


def test_resuming_a_finished_run_repeats_its_outcome_and_exit_code(signoff):
    signoff.demo_outbox.write_text("not a directory")
    run_id = signoff.here("demo", "--quiet", answers="a\n").out.split()[0]

    again = signoff.here("runs", "resume", run_id, "--demo")

    assert again.code == 5
    assert again.lines[-1].startswith(f"{run_id} done, but 2 of 2 approved calls failed: ")


def outbox_settings(outbox, tools="demo") -> Settings:
    return Settings.from_env({"SIGNOFF_OUTBOX": str(outbox), "SIGNOFF_TOOLS": tools})


def test_check_outbox_says_whether_the_demo_tools_can_write_there(tmp_path):
    (tmp_path / "file").write_text("")
    (tmp_path / "outbox").mkdir()

    assert check_outbox(outbox_settings(tmp_path / "outbox")) == f"ok outbox: {tmp_path / 'outbox'} is writable"
    assert check_outbox(outbox_settings(tmp_path / "new" / "outbox")) == (
        f"ok outbox: {tmp_path / 'new' / 'outbox'} does not exist yet; the first email or refund creates it")
    assert check_outbox(outbox_settings(tmp_path / "file")) == (
        f"FAIL outbox: {tmp_path / 'file'} is not a directory; send_email and issue_refund would fail")
    assert check_outbox(outbox_settings(tmp_path / "file" / "outbox")).startswith(
        f"FAIL outbox: {tmp_path / 'file' / 'outbox'} does not exist and cannot be created")
    assert check_outbox(outbox_settings(tmp_path / "outbox", tools="pkg.mod:TOOLS")).startswith(
        "skip outbox: the demo tools are not loaded")


def test_check_outbox_fails_a_read_only_outbox(tmp_path):
    (tmp_path / "outbox").mkdir()
    os.chmod(tmp_path / "outbox", 0o555)
    probe = ("import sys; from signoff.bot.cli.outbox_check import check_outbox; "
             "from signoff.bot.settings import Settings; "
             "print(check_outbox(Settings.from_env({'SIGNOFF_OUTBOX': sys.argv[1]})))")

    done = subprocess.run(python_unprivileged(["-c", probe, str(tmp_path / "outbox")]), capture_output=True,
                          text=True, timeout=60, check=True)

    assert done.stdout == f"FAIL outbox: {tmp_path / 'outbox'} is not writable; send_email and issue_refund would fail\n"
