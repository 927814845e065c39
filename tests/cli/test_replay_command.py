"""`signoff runs replay`: a recorded run re-driven through this code, identical or not, as a script sees it."""

from __future__ import annotations

import re

DIVERGING_TOOLS = '''
import dataclasses
from signoff.tools.registry import demo_tools

# The demo's tools as a later deploy might have them: the email no longer asks anyone.
TOOLS = [dataclasses.replace(t, side_effect=False) if t.name == "send_email" else t
         for t in demo_tools("outbox")]
'''


def finished_demo_run(signoff) -> str:
    done = signoff.here("demo", "--quiet", answers="a\n")
    assert done.code == 0, done.err
    return re.search(r"run-[0-9a-f]{10}", done.out).group(0)


def test_a_recorded_demo_run_replays_identically(signoff) -> None:
    run_id = finished_demo_run(signoff)
    effects = sorted(p.name for p in signoff.outbox.rglob("*"))
    result = signoff("runs", "replay", run_id, "--demo")
    assert result.code == 0, result.err
    assert result.out.startswith(f"{run_id}: identical (") and "ends done" in result.out
    assert sorted(p.name for p in signoff.outbox.rglob("*")) == effects, "a replay must run no tool"


def test_a_changed_tool_contract_diverges_with_the_step_and_both_events(signoff) -> None:
    run_id = finished_demo_run(signoff)
    (signoff.cwd / "later_deploy.py").write_text(DIVERGING_TOOLS)
    result = signoff("runs", "replay", run_id, "--demo", "--tools", "later_deploy:TOOLS")
    assert result.code == 1
    first, expected, got = result.lines[:3]
    assert first.startswith(f"{run_id}: DIVERGED at step 3")
    assert expected.split()[:2] == ["expected:", "approval_requested"]
    assert got.split()[:2] == ["got:", "tool_executed"]


def test_replay_all_summarises_every_finished_run(signoff) -> None:
    for _ in range(2):
        finished_demo_run(signoff)
    result = signoff("runs", "replay", "--all", "--demo")
    assert result.code == 0, result.err
    assert re.match(r"replayed 2 runs in [\d.]+ s, [\d.]+ ms a run: 2 identical, 0 diverged$", result.lines[-1])
    since = signoff("runs", "replay", "--all", "--since", "2999-01-01", "--demo")
    assert since.code == 0 and "replayed 0 runs" in since.out


def test_replay_needs_a_run_or_all(signoff) -> None:
    assert signoff.here("runs", "replay", "--demo").code == 2
