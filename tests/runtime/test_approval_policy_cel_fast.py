"""The fast check of `when` expressions decides exactly as celpy does, on what it decides at all.

Every expression here is compared, call by call, with celpy evaluating it alone: the same True, the
same False, the same error in the same words. Pure: no Slack, no SQL.
"""

from __future__ import annotations

import math
from typing import Any

import celpy
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from signoff.runtime.approval_policy import ProposedCall, Rule
from signoff.runtime.cel_fast import compile_check, plain_variables
from signoff.runtime.policy_cel import VARIABLES

# celpy raises the recursion limit when its first environment is made; hypothesis warns if that
# happens inside a test, so it happens here.
ENVIRONMENT = celpy.Environment()

def compare(when: str, call: ProposedCall) -> None:
    rule = Rule(name="r", tool="t", decision="allow", when=when)
    assert rule.holds(call) == rule.holds_in_celpy(call)


# -- expressions: what the fast path compiles, and around it what it leaves to celpy -----------

PATHS = ["args.a", "args.b", "args.a", "args.b", "args.l", "args.m", "args.m.k", "args['a']", "args.l[0]",
         "args.l[1]", "args.l[-1]", "args.m['k']", "args.a.k", "args.l[args.a]", "args", "usage.steps",
         "usage.cost_usd", "tool", "requester", "channel"]
LITERALS = ["0", "1", "-1", "50", "42", "9223372036854775807", "-9223372036854775808", "0x10", "1u", "0.0",
            "42.5", "-0.5", "1e3", "'a'", "'ab'", '"a\\x62"', "r'\\n'", "''", "'é'", "true", "false", "null",
            "b'a'", "[]", "['a', 'b']", "[1, 2]", "[1, 'a']", "[1.0, 2.5]", "[true]", "[null]"]
ATOMS = st.sampled_from(PATHS) | st.sampled_from(LITERALS)
RELATIONS = st.sampled_from(["==", "!=", "<", "<=", ">", ">=", "in"])
LOGIC = st.sampled_from(["&&", "||"])
LEFT_TO_CELPY = st.sampled_from(["+", "-", "*", "/", "%"])
CONVERSIONS = st.sampled_from(["double", "int", "uint", "string", "bool", "dyn", "size"])


def _compound(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    fast = st.one_of(
        st.tuples(inner, RELATIONS, inner).map(" ".join),
        st.tuples(inner, LOGIC, inner).map(" ".join),
        st.tuples(inner, inner, inner).map(lambda t: f"{t[0]} ? {t[1]} : {t[2]}"),
        inner.map(lambda e: f"({e})"),
        inner.map(lambda e: f"!{e}"),
        inner.map(lambda e: f"size({e})"),
        inner.map(lambda e: f"{e}.size()"),
        st.tuples(inner, st.sampled_from(["startsWith", "endsWith"]), inner).map(lambda t: f"{t[0]}.{t[1]}({t[2]})"),
        st.tuples(inner, inner).map(lambda t: f"[{t[0]}, {t[1]}]"),
    )
    slow = st.one_of(
        st.tuples(inner, LEFT_TO_CELPY, inner).map(" ".join),
        inner.map(lambda e: f"-{e}"),
        st.tuples(inner, st.sampled_from(["contains", "matches"]), inner).map(lambda t: f"{t[0]}.{t[1]}({t[2]})"),
        st.tuples(inner, inner).map(lambda t: f"{{{t[0]}: {t[1]}}}"),
        st.sampled_from(["has(args.a)", "has(args.m.k)", "args.l.all(x, x > 0)", "args.l.exists(x, x == 'a')",
                         "int(args.a)", "string(args.a)", "type(args.a) == int", "dyn(args.a)"]),
        st.tuples(CONVERSIONS, inner).map(lambda t: f"{t[0]}({t[1]})"),
    )
    return fast | fast | fast | slow


EXPRESSIONS = st.recursive(ATOMS, _compound, max_leaves=5)

# -- calls: plain JSON of every kind, and what only celpy reads ------------------------------

HOSTILE = st.sampled_from([None, True, False, math.nan, math.inf, -math.inf, 1e308, 2**63, -(2**63) - 1, 10**30,
                           "12", "5.0", "-3", "1e3", "1e400", "NaN", "inf", " 5", "5 ", "٥", "１", "0x10", "1_000",
                           "true", "t", "0"])
"""What a model may send where a rule expects a number: null, bools, non-finite and huge numbers, and
strings that read as numbers in some language but not in CEL's ASCII (Arabic-Indic and full-width digits)."""
SCALARS = (st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.sampled_from([0, 1, 42, 50, 2**63 - 1])
           | st.floats() | st.sampled_from([0.0, -0.0, 42.5, 50.0, math.nan])
           | st.sampled_from(["", "a", "ab", "b", "é"]) | st.text(max_size=3) | HOSTILE)
KEYS = st.sampled_from(["a", "b", "k", "l", "m"])
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
                      max_leaves=6)
ARGS = st.fixed_dictionaries({}, optional={"a": SCALARS, "b": SCALARS, "k": VALUES, "l": st.lists(SCALARS, max_size=3),
                                           "m": st.dictionaries(KEYS, SCALARS, max_size=3)})
USAGE = st.fixed_dictionaries({}, optional={"steps": st.integers(0, 9), "cost_usd": st.floats(0, 2)})


# -- well-typed expressions over calls that mostly fit them: where the fast path decides -------

NUMBERS = (st.sampled_from(["args.n", "args.f", "usage.steps", "usage.cost_usd", "size(args.s)", "args.words.size()",
                            "args.nums[0]", "args['n']"])
           | st.sampled_from(["0", "1", "50", "-3", "42.5", "0.0", "-0.0", "1e3", "9223372036854775807"]))
STRINGS = (st.sampled_from(["args.s", "args.t", "requester", "channel", "tool", "args.m.k", "args.m['k']",
                            "args.words[0]", "args.words[1]"])
           | st.sampled_from(["'a'", "'ab'", "''", '"b"', "'é'", "'U0LEAD'"]))
LISTS = st.sampled_from(["args.words", "args.nums", "args.m", "['a', 'b']", "[1, 2, 50]", "[42.5, 1.0]", "[]"])


def _typed(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.tuples(inner, LOGIC, inner).map(" ".join),
        inner.map(lambda e: f"!({e})"),
        st.tuples(inner, inner, inner).map(lambda t: f"({t[0]} ? {t[1]} : {t[2]})"),
        st.tuples(inner, st.sampled_from(["==", "!="]), inner).map(lambda t: f"({t[0]}) {t[1]} ({t[2]})"),
    )


WELL_TYPED = st.recursive(st.one_of(
    st.tuples(NUMBERS, RELATIONS.filter(lambda r: r != "in"), NUMBERS).map(" ".join),
    st.tuples(STRINGS, RELATIONS.filter(lambda r: r != "in"), STRINGS).map(" ".join),
    st.tuples(STRINGS | NUMBERS, st.just("in"), LISTS).map(" ".join),
    st.tuples(STRINGS, st.sampled_from(["startsWith", "endsWith"]), STRINGS).map(lambda t: f"{t[0]}.{t[1]}({t[2]})"),
    st.sampled_from(["true", "false", "args.flag"]),
), _typed, max_leaves=4)
FITTING = {
    "n": st.integers(-(2**63), 2**63 - 1) | st.sampled_from([0, 1, 50, 51]),
    "f": st.floats(),
    "s": st.text(max_size=4),
    "t": st.sampled_from(["a", "ab", "b"]),
    "flag": st.booleans(),
    "words": st.lists(st.sampled_from(["a", "b", ""]), max_size=3),
    "nums": st.lists(st.integers(0, 60), max_size=3),
    "m": st.dictionaries(st.sampled_from(["k", "a"]), st.sampled_from(["a", "b"])),
}
# Three times in four the argument fits the expression; else it is any scalar, or missing.
FITTING_ARGS = st.fixed_dictionaries({}, optional={key: value | value | value | SCALARS for key, value in FITTING.items()})


@settings(max_examples=1000, deadline=None)
@given(when=WELL_TYPED, args=FITTING_ARGS, usage=USAGE, requester=st.sampled_from(["U0LEAD", "a", ""]))
def test_the_fast_check_agrees_with_celpy_where_it_decides(when: str, args: dict[str, Any], usage: dict[str, Any],
                                                           requester: str) -> None:
    compare(when, ProposedCall("t", args, True, requester, "C0", usage))


@settings(max_examples=1000, deadline=None)
@given(when=EXPRESSIONS, args=ARGS, usage=USAGE, requester=st.sampled_from(["U0LEAD", "a", ""]))
@example(when="args.a <= 50", args={"a": 42.5}, usage={}, requester="")
@example(when="args.a <= 50.0", args={"a": 42}, usage={}, requester="")
@example(when="args.a == 1 && args.b > 1", args={"a": 2}, usage={}, requester="")
@example(when="args.a in [1, 2]", args={"a": 1.0}, usage={}, requester="")
@example(when="args.a in args.l", args={"a": math.nan, "l": [math.nan]}, usage={}, requester="")
@example(when="!(args.a > 50)", args={"a": math.nan}, usage={}, requester="")
@example(when="args.a <= 50.0", args={"a": -math.inf}, usage={}, requester="")
@example(when="double(args.a) <= 50.0", args={"a": None}, usage={}, requester="")
@example(when="double(args.a) <= 50.0", args={"a": "٥"}, usage={}, requester="")
@example(when="int(args.a) <= 50", args={"a": True}, usage={}, requester="")
@example(when="args.a in [0, 1]", args={"a": True}, usage={}, requester="")
@example(when="args.l == [1]", args={"l": [True]}, usage={}, requester="")
def test_the_fast_check_agrees_with_celpy_on_every_call(when: str, args: dict[str, Any], usage: dict[str, Any],
                                                        requester: str) -> None:
    try:
        Rule(name="r", tool="t", decision="allow", when=when)
    except ValueError:  # does not compile (e.g. `- [1]`): no rule to compare
        return
    compare(when, ProposedCall("t", args, True, requester, "C0", usage))


def test_the_same_nan_object_in_a_list_is_an_error_not_found_by_identity() -> None:
    # Python's `in` would find the very NaN object by identity; celpy refuses NaN in any comparison.
    nan = math.nan
    compare("args.a in args.l", ProposedCall("t", {"a": nan, "l": [nan]}, True))
    assert "NaN" in str(Rule(name="r", tool="t", decision="allow", when="args.a in args.l").holds(
        ProposedCall("t", {"a": nan, "l": [nan]}, True)))


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, [1.0, math.nan], {"k": math.inf}])
def test_a_call_with_a_nan_or_an_infinity_is_left_to_celpy_whole(value: Any) -> None:
    assert plain_variables("t", {"a": value}, "", "", {}) is None
    assert plain_variables("t", {}, "", "", {"cost_usd": value}) is None
    for when in ("args.a <= 50.0", "!(args.a > 50.0)", "args.a != 1.0", "args.a == args.a", "size(args.l) == 0"):
        compare(when, ProposedCall("t", {"a": value, "l": []}, True))


@pytest.mark.parametrize("when", ["args.a < 1e400", "args.a != -1e400", "!(args.a > 1e400)"])
def test_an_infinite_literal_is_left_to_celpy(when: str) -> None:
    assert compile_check(ENVIRONMENT.compile(when), ENVIRONMENT, VARIABLES) is None
    compare(when, ProposedCall("t", {"a": 42.5}, True))


@pytest.mark.parametrize("args", [
    {"a": 2**63}, {"a": -(2**63) - 1}, {"a": (1, 2)}, {"a": b"x"}, {1: "a"}, {"a": object()},
])
def test_a_call_celpy_cannot_read_as_plain_json_is_left_to_celpy_whole(args: dict[Any, Any]) -> None:
    assert plain_variables("t", args, "", "", {}) is None
    compare("true", ProposedCall("t", args, True))


def test_nesting_deeper_than_the_fast_path_walks_is_left_to_celpy() -> None:
    nested: Any = 1
    for _ in range(100):
        nested = [nested]
    assert plain_variables("t", {"a": nested}, "", "", {}) is None
    assert plain_variables("t", {"a": [[[1]]]}, "", "", {}) is not None
    compare("size(args.a) == 1", ProposedCall("t", {"a": nested}, True))


@pytest.mark.parametrize("nesting", [1, 10, 20, 60])
def test_an_expression_nested_deep_enough_to_exhaust_celpys_stack_fails_as_in_celpy(nesting: int) -> None:
    # Near 55 parentheses celpy's interpreter runs out of stack: an error, so an allow rule never allows.
    when = "(" * nesting + "args.a == 1" + ")" * nesting
    compare(when, ProposedCall("t", {"a": 1}, True))
    if nesting == 60:
        assert "RecursionError" in str(Rule(name="r", tool="t", decision="allow", when=when).holds(
            ProposedCall("t", {"a": 1}, True)))


@pytest.mark.parametrize(("when", "fast"), [
    ("args.amount <= 50 && requester != 'U0LEAD'", True),
    ("args.target in ['api', 'worker'] || size(args.note) > 200", True),
    ("args.to.endsWith('@example.com') ? usage.steps < 5 : false", True),
    ("args.amount + 1 > 50", False),
    ("has(args.amount)", False),
    ("args.items.all(i, i.price < 10)", False),
    ("args.n == 1u", False),
])
def test_what_the_fast_path_compiles(when: str, fast: bool) -> None:
    check = compile_check(ENVIRONMENT.compile(when), ENVIRONMENT, VARIABLES)
    assert (check is not None) is fast


@pytest.mark.parametrize(("when", "args", "decided"), [
    ("args.amount <= 50", {"amount": 42.5}, True),
    ("args.amount <= 50", {"amount": 51}, False),
    ("args.amount <= 50", {"amount": "20"}, None),  # celpy's "no matching overload" error
    ("args.amount <= 50", {}, None),  # celpy's "no such member" error
    ("args.amount <= 50.0", {"amount": 42}, None),  # celpy refuses int against double
    ("args.amount <= 50 || args.vip", {"vip": True}, True),  # an error on one side, true on the other
    ("args.amount <= 50 && args.vip", {"vip": False}, False),
    ("args.target in ['api', 'worker']", {"target": "api"}, True),
    ("args.target in ['api', 1]", {"target": "api"}, None),
    ("size(args.note) > 3 && requester == 'U0LEAD'", {"note": "hello"}, True),
])
def test_what_the_fast_path_decides_and_what_it_leaves_to_celpy(when: str, args: dict[str, Any],
                                                               decided: bool | None) -> None:
    check = compile_check(ENVIRONMENT.compile(when), ENVIRONMENT, VARIABLES)
    plain = plain_variables("t", args, "U0LEAD", "C0", {})
    assert check is not None and plain is not None
    assert check(plain) is decided
    compare(when, ProposedCall("t", args, True, "U0LEAD", "C0"))
