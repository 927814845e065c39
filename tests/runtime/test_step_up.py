"""Step-up, the core's part: a rule's `step_up` read from the policy file (with its errors), kept
with the approval, and the one check every approve passes (`approval.step_up_refusal`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from signoff.runtime.approval_policy import PolicyError, Requirement
from signoff.runtime.policy_file import parse_policy
from signoff.runtime.step_up import SignIn, step_up_of, step_up_refusal

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def rule(extra: str) -> str:
    return f"rules:\n  - {{name: risky, tool: restart, {extra}}}\n"


def test_a_rule_s_step_up_is_kept_with_what_it_asks() -> None:
    policy = parse_policy(rule("step_up: 10m"), source="p.yaml", approvers=["U0LEAD"])
    asked = policy.requirement(policy.rules[0]).to_json()
    assert asked["step_up_seconds"] == 600
    assert Requirement.from_json(asked).step_up == timedelta(minutes=10)
    assert step_up_of(asked) == timedelta(minutes=10)
    assert "step_up_seconds" not in policy.defaults.to_json()  # a policy without it stores what it did


@pytest.mark.parametrize(("extra", "problem"), [
    ("step_up: 0", "step_up must be how recent the approver's sign-in at the web console must be, a duration "
                   "like 10m, 1h or 1d, got 0"),
    ("step_up: soon", "got 'soon'"),
    ("step_up: 2d", "step_up is how recent a sign-in must be, at most 1d, got '2d'"),
    ("step_up: 10m, grant: {for: 5m}", "grant is never offered with step_up"),
    ("decision: allow, step_up: 10m", "step_up would be ignored on an allow rule"),
])
def test_a_bad_step_up_is_refused_naming_the_rule(extra: str, problem: str) -> None:
    with pytest.raises(PolicyError) as refused:
        parse_policy(rule(extra), source="p.yaml", approvers=["U0LEAD"])
    assert str(refused.value).startswith("p.yaml: rule 'risky': ") and problem in str(refused.value)


def test_an_approve_needs_a_sign_in_no_older_than_the_rule_says() -> None:
    ten = timedelta(minutes=10)
    assert step_up_refusal(None, None, NOW) is None  # no step-up: a Slack click counts
    assert "cannot be approved from here" in (step_up_refusal(ten, None, NOW) or "")
    stale = SignIn("https://issuer.example", NOW - timedelta(minutes=11))
    assert "yours was 11 min ago: sign in again" in (step_up_refusal(ten, stale, NOW) or "")
    assert step_up_refusal(ten, SignIn("https://issuer.example", NOW - timedelta(minutes=9)), NOW) is None
    assert SignIn("https://issuer.example", NOW).to_json(ten) == {
        "issuer": "https://issuer.example", "signed_in_at": NOW.isoformat(), "max_age_seconds": 600}
