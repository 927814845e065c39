"""The backtest's core: a recorded call's ruling then beside the one a policy gives now, and the
calls read back out of audit events (batches, grants, reads no rule named). Pure: data in, data out."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from signoff.runtime.approval_policy import Allow, Ask, Deny, Requirement
from signoff.runtime.backtest import Ruling, backtest, change
from signoff.runtime.policy_file import parse_policy
from signoff.runtime.recorded_calls import StoredApproval, StoredCaller, StoredEvent, recorded_calls

AT = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
ASK_LEE = Ruling("ask", "r", ("U0LEE",), 1)


@pytest.mark.parametrize(("then", "now", "expected"), [
    (Ruling("allow", None), Ruling("allow", "other"), "unchanged"),
    (ASK_LEE, Ruling("allow", "r"), "newly_allowed"),
    (Ruling("deny", "r"), ASK_LEE, "newly_asked"),
    (Ruling("allow", None), Ruling("deny", "r"), "newly_denied"),
    (ASK_LEE, Ruling("ask", "r", ("U0KIM",), 1), "changed_approvers"),
    (ASK_LEE, Ruling("ask", "r", ("U0LEE",), 2), "changed_approvers"),
    (Ruling("ask", "r", ("U0LEE", "U0KIM"), 1), Ruling("ask", "s", ("U0KIM", "U0LEE"), 1), "unchanged"),
    (Ruling("ask", "r"), Ruling("ask", "r", ("U0KIM",), 3), "unchanged"),  # whom then was not recorded
])
def test_change_says_what_differs(then, now, expected):
    assert change(then, now) == expected


def test_a_ruling_is_read_off_each_verdict():
    requirement = Requirement(("S0FIN",), 2, AT - AT, False)
    assert Ruling.of(Allow("a")) == Ruling("allow", "a")
    assert Ruling.of(Deny("d", "no")) == Ruling("deny", "d")
    assert Ruling.of(Ask(None, requirement)) == Ruling("ask", None, ("S0FIN",), 2)


def event(run_id: str, type_: str, **payload) -> StoredEvent:
    return StoredEvent(run_id, type_, payload, AT)


def test_calls_are_read_back_with_their_rulings_and_arguments():
    events = [
        event("run-1", "decision", kind="tool", step=1, tool="lookup", args={"q": "a"}),
        event("run-1", "decision", kind="tool", step=1, tool="send", args={"to": "ana"}),
        event("run-1", "tool_executed", key="run-1:1.1", tool="lookup", step=1, side_effect=False),
        event("run-1", "call_allowed_by_grant", key="run-1:1.2", tool="send", step=1, rule="mail"),
        event("run-1", "tool_executed", key="run-1:1.2", tool="send", step=1, side_effect=True),
        event("run-1", "decision", kind="tool", step=2, tool="send", args={"to": "bo"}),
        event("run-1", "approval_requested", key="run-1:2", tool="send", step=2, rule=None, quorum=1),
        event("run-1", "decision", kind="tool", step=3, tool="wipe", args={}),
        event("run-1", "call_denied_by_rule", key="run-1:3", tool="wipe", step=3, rule="never", reason="no"),
    ]
    approvals = {"run-1:2": StoredApproval({"to": "bo", "body": ""}, {"approvers": ["U0KIM"], "defaulted": ["body"]},
                                           {"cost_usd": 0.5})}
    calls = recorded_calls(events, approvals, {"run-1": StoredCaller("U0ASK", "C0OPS")})

    assert [(c.key, c.then) for c in calls] == [
        ("run-1:1.1", Ruling("allow", None)),
        ("run-1:1.2", Ruling("ask", "mail")),
        ("run-1:2", Ruling("ask", None, ("U0KIM",), 1)),
        ("run-1:3", Ruling("deny", "never")),
    ]
    lookup, granted, asked, wiped = (c.call for c in calls)
    assert (lookup.args, lookup.side_effect, lookup.requester, lookup.channel) == ({"q": "a"}, False, "U0ASK", "C0OPS")
    assert (granted.args, granted.side_effect) == ({"to": "ana"}, True)
    assert (asked.args, asked.usage) == ({"to": "bo"}, {"cost_usd": 0.5})  # the default it filled in left out
    assert wiped.side_effect is True  # never run, nothing says: taken to have one


def test_a_backtest_counts_every_call_and_lists_those_that_changed():
    policy = parse_policy("rules:\n  - name: never\n    tool: wipe\n    decision: deny\n", source="p.yaml")
    events = [event("run-1", "decision", kind="tool", step=1, tool="wipe", args={}),
              event("run-1", "call_allowed_by_rule", key="run-1:1", tool="wipe", step=1, rule="fine"),
              event("run-1", "decision", kind="tool", step=2, tool="look", args={}),
              event("run-1", "tool_executed", key="run-1:2", tool="look", step=2, side_effect=False)]
    result = backtest(policy, recorded_calls(events, {}, {}))

    assert result.counts == {"newly_allowed": 0, "newly_asked": 0, "newly_denied": 1, "changed_approvers": 0,
                             "unchanged": 1}
    assert [call.to_json() for call in result.changed] == [
        {"change": "newly_denied", "tool": "wipe", "run_id": "run-1", "key": "run-1:1", "at": AT.isoformat(),
         "then": {"decision": "allow", "rule": "fine"}, "now": {"decision": "deny", "rule": "never"}}]
