"""A model that reports no usage (the scripted one) is not said to have used 0 tokens for $0.0000;
one that reports usage still is (tests/bot/test_observe_serve.py)."""

from __future__ import annotations


def test_a_scripted_run_tells_its_story_without_a_cost_of_zero(signoff):
    result = signoff("--debug", "demo", answers="a\n")

    assert result.code == 0, result.err
    steps = [line for line in result.err.splitlines() if " step " in line and "signoff.runs" in line]
    assert steps and all(line.endswith(("asks for lookup_orders", "asks for search_handbook", "asks for send_email",
                                        "asks for issue_refund", "answered")) for line in steps), steps
    [done] = [line for line in result.err.splitlines() if " done: " in line and "signoff.runs" in line]
    assert " done: 6 model calls, 5 tool calls, " in done and "tokens" not in done
    assert "$0.0000" not in result.err and "0 in / 0 out tokens" not in result.err
