"""A `when` never lets a call through on a value it was not written for: converting or comparing null,
a boolean as a number, NaN, an infinity, an int beyond int64 or a string that is no ASCII number is an
evaluation error, so an allow rule does not match and an ask or deny rule does.

Each case is decided twice, by `evaluate` (the fast check where it decides) and by celpy alone. Pure.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from signoff.runtime.approval_policy import Allow, Ask, Deny, ProposedCall, Rule, evaluate
from signoff.runtime.policy_file import parse_policy

HOSTILE_NUMBERS: list[Any] = [None, True, False, math.nan, math.inf, -math.inf, 2**63, -(2**63) - 1, 10**30,
                              [], [1], {}, {"usd": 1}]
"""Values a model may send where a rule means a number, none of which is one."""
NOT_CEL_NUMBERS = ["", " 5", "5 ", "٥", "１٠", "５", "NaN", "nan", "inf", "-Infinity", "1e400", "-1e400", "1_000",
                   "0x10", "1.5.2", "+", "١٢"]
"""Strings Python's float() or int() reads (or nearly), which are not CEL's ASCII numbers."""


def decided(when: str, value: Any) -> bool | str:
    """`when` for a call whose `args.x` is `value`, by `evaluate`'s path and by celpy alone, which agree."""
    rule = Rule(name="r", tool="t", decision="allow", when=when)
    call = ProposedCall("t", {"x": value}, True)
    holds = rule.holds(call)
    assert holds == rule.holds_in_celpy(call)
    return holds


@pytest.mark.parametrize("when", ["double(args.x) <= 50.0", "int(args.x) <= 50", "uint(args.x) <= 50u",
                                  "!(double(args.x) > 50.0)", "double(args.x) != 1000.0"])
def test_a_conversion_of_what_is_no_number_is_an_error(when: str) -> None:
    decisions = {repr(value): decided(when, value) for value in HOSTILE_NUMBERS + NOT_CEL_NUMBERS}
    assert {value: holds for value, holds in decisions.items() if not isinstance(holds, str)} == {}


@pytest.mark.parametrize("when", ["args.x <= 50.0", "args.x <= 50", "!(args.x > 50)", "!(args.x > 50.0)",
                                  "args.x != 1000.0", "args.x + 1.0 <= 50.0", "-args.x >= -50.0",
                                  "args.x * 0.0 == 0.0", "!(args.x in [1000.0, 2000.0])", "dyn(args.x) <= 50"])
def test_a_comparison_or_arithmetic_on_what_is_no_finite_number_is_an_error(when: str) -> None:
    values = [True, False, math.nan, math.inf, -math.inf, 2**63, 10**30]
    decisions = {repr(value): decided(when, value) for value in values}
    assert {value: holds for value, holds in decisions.items() if not isinstance(holds, str)} == {}


@pytest.mark.parametrize(("when", "value"), [
    ("args.x in [true]", 1),
    ("args.x == [1]", [True]),
    ("args.x == {'n': 1}", {"n": True}),
    ("args.x != [0]", [False]),
    ("[10, 20][args.x] == 20", True),
    ("args.x * 10.0 <= 50.0", 1e308),  # overflows to infinity
    ("size(args.x) == 0", None),  # celpy: 0
    ("bool(args.x)", "12"),  # celpy reads a string it does not know as a number
    ("bool(args.x)", 1),
    ("string(args.x) == 'None'", None),
    ("string(args.x) == 'nan'", math.nan),
    ("string(args.x) != ''", [1]),
])
def test_what_celpy_would_quietly_compute_with_is_an_error(when: str, value: Any) -> None:
    assert isinstance(decided(when, value), str)


def test_a_value_written_for_converts_and_compares_as_cel_says() -> None:
    cases: list[tuple[str, Any, bool]] = [
        ("double(args.x) <= 50.0", "20.00", True), ("double(args.x) <= 50.0", "-3", True),
        ("double(args.x) <= 50.0", ".5e2", True), ("double(args.x) <= 50.0", "1e3", False),
        ("double(args.x) <= 50.0", 20, True), ("double(args.x) <= 50.0", 49.5, True),
        ("int(args.x) == -42", "-42", True), ("int(args.x) == 5", 5.9, True), ("int(args.x) == 10", "010", True),
        ("uint(args.x) == 7u", "7", True), ("bool(args.x)", "true", True), ("bool(args.x)", "f", False),
        ("string(args.x) == 'true'", True, True),  # celpy alone would write "True"
        ("string(args.x) == '12'", 12, True), ("size(args.x) == 2", "٥٥", True), ("args.x in [true]", True, True),
        ("args.x == [true, 1]", [True, 1], True), ("has(args.x) && double(args.x) <= 50.0", "20", True),
    ]
    assert [(when, value, decided(when, value)) for when, value, _ in cases] == cases


@pytest.mark.parametrize("value", [None, True, math.nan, math.inf, "1e400", "٥", "NaN"], ids=repr)
def test_an_error_fails_closed_allow_passes_over_ask_and_deny_match(value: Any) -> None:
    policy = parse_policy("""
rules:
  - {name: small, tool: refund, when: "double(args.amount) <= 50.0", decision: allow}
  - {name: wild, tool: refund, when: "double(args.amount) > 5000.0", decision: deny, reason: too much}
  - {name: big, tool: refund, when: "double(args.amount) > 1000.0", decision: ask, approvers: [U0FIN]}
""", source="p.yaml", approvers=["U0LEAD"])
    verdict = evaluate(policy, ProposedCall("refund", {"amount": value}, True))
    assert isinstance(verdict, Deny) and verdict.rule == "wild"
    assert [e.split(":")[0] for e in verdict.errors] == ["rule 'small'", "rule 'wild'"]
    without_deny = parse_policy("""
rules:
  - {name: small, tool: refund, when: "double(args.amount) <= 50.0", decision: allow}
""", source="p.yaml", approvers=["U0LEAD"])
    asked = evaluate(without_deny, ProposedCall("refund", {"amount": value}, True))
    assert isinstance(asked, Ask) and asked.rule is None and not isinstance(asked, Allow)


def test_the_error_says_what_could_not_be_converted() -> None:
    assert decided("double(args.x) <= 50.0", None) == (
        "double() of null: only a number or a numeric string converts to double")
    assert decided("double(args.x) <= 50.0", "٥") == "double() of string '٥': not a decimal number in ASCII digits"
    assert decided("!(args.x > 50)", math.nan) == "NaN and infinity are not numbers a rule can compare or compute with"
