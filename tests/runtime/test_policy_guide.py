"""The approval policy guide's examples are real: they load, and each rule does what the guide says."""

from __future__ import annotations

import math
import re
import textwrap
from pathlib import Path

from signoff.runtime.approval_policy import Allow, Ask, Deny, ProposedCall, evaluate
from signoff.runtime.policy_file import parse_policy

POLICY_GUIDE = Path(__file__).resolve().parents[2] / "docs" / "policy.md"


def policy_blocks() -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", POLICY_GUIDE.read_text(encoding="utf-8"), re.S)


def test_the_format_example_does_what_its_comments_say() -> None:
    policy = parse_policy(policy_blocks()[0], source="docs/policy.md")
    refund = lambda amount: evaluate(policy, ProposedCall("issue_refund", {"amount_usd": amount}, True))  # noqa: E731
    assert refund("20.00") == Allow("small-refunds")
    small_or_default = refund("500")
    assert isinstance(small_or_default, Ask) and small_or_default.rule is None
    big = refund("20000")
    assert isinstance(big, Ask) and big.rule == "big-refunds"
    assert (big.requirement.approvers, big.requirement.quorum, big.requirement.confirm) == (("S0FINANCE",), 2, True)
    assert big.requirement.ttl.total_seconds() == 7200
    denied = evaluate(policy, ProposedCall("delete_user", {"user": "U1"}, True))
    assert isinstance(denied, Deny) and denied.reason == "deletes are done by hand, never by the agent"
    record = evaluate(policy, ProposedCall("lookup_customer", {"id": 7}, False))
    assert isinstance(record, Ask) and record.rule == "customer-records"


def test_the_worked_examples_load_and_decide_as_described() -> None:
    restarts, git = (parse_policy("rules:\n" + textwrap.indent(textwrap.dedent(block), "  "), source="docs/policy.md",
                                  approvers=["U0OPS"]) for block in policy_blocks()[1:3])
    prod = evaluate(restarts, ProposedCall("restart_service", {"environment": "production"}, True))
    assert isinstance(prod, Ask) and (prod.rule, prod.requirement.quorum) == ("prod-restarts", 2)
    staging = evaluate(restarts, ProposedCall("restart_service", {"environment": "staging"}, True))
    assert isinstance(staging, Ask) and (staging.rule, staging.requirement.quorum) == ("restarts", 1)
    assert isinstance(evaluate(git, ProposedCall("mcp__git__git_push", {"force": True}, True)), Deny)
    plain_push = evaluate(git, ProposedCall("mcp__git__git_push", {}, True))
    assert isinstance(plain_push, Ask) and plain_push.rule is None


def test_small_refunds_never_allows_an_amount_it_was_not_written_for() -> None:
    """Null, left out, a bool, NaN, an infinity, a string beyond a double or in other digits: each is
    an error in both rules' `double(...)`, so small-refunds passes over it and big-refunds asks."""
    policy = parse_policy(policy_blocks()[0], source="docs/policy.md")
    hostile: list[dict[str, object]] = [{"amount_usd": amount} for amount in (
        None, True, False, math.nan, math.inf, -math.inf, "NaN", "-inf", "1e400", "-1e400", "٥", "１", " 5", [], {})]
    verdicts = {repr(args): evaluate(policy, ProposedCall("issue_refund", args, True)) for args in [{}, *hostile]}
    assert {args: verdict for args, verdict in verdicts.items() if isinstance(verdict, Allow)} == {}
    assert all(isinstance(v, Ask) and v.rule == "big-refunds" and len(v.errors) == 2 for v in verdicts.values())
