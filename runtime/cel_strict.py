"""celpy's operators and conversions, refusing the values CEL refuses where celpy would quietly compute
with them: a boolean as a number, null as zero, NaN and the infinities, a string that is no ASCII number;
and which arguments an expression reads as values, so `signoff check` can say where that bites.

A refusal is an evaluation error, so a policy's `when` that meets one fails closed: an allow rule does
not match. Pure: no I/O.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal

from celpy.celtypes import (
    BoolType,
    BytesType,
    DoubleType,
    DurationType,
    IntType,
    ListType,
    MapType,
    StringType,
    TimestampType,
    UintType,
)
from celpy.evaluation import CELEvalError, base_functions
from lark import Tree

_NUMBERS = (int, float)  # celtypes' IntType, UintType, DoubleType and BoolType subclass these
_DOUBLE_TEXT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
"""A decimal number as CEL writes a double, in ASCII digits only: not "NaN", "inf", "1_000", " 5" or "٥"."""
_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_UINT_TEXT = re.compile(r"[0-9]+")
_BOOL_TEXT: Final = {"1": True, "t": True, "true": True, "TRUE": True, "True": True,
                     "0": False, "f": False, "false": False, "FALSE": False, "False": False}
"""The strings CEL's `bool()` reads, and nothing else (celpy would read any other string as true)."""
_CEL_TYPE_NAMES: Final = {BoolType: "bool", IntType: "int", UintType: "uint", DoubleType: "double",
                          StringType: "string", BytesType: "bytes", ListType: "list", MapType: "map",
                          TimestampType: "timestamp", DurationType: "duration"}


def _strict_operator(operator: Callable[..., Any],
                     mixes: Callable[[Any, Any], bool] | None = None) -> Callable[..., Any]:
    """`operator`, refusing a NaN or an infinity in any operand or as the result (NaN makes every
    comparison false, so `!(args.amount > 50)` would hold for it), and a boolean against a number, as
    CEL does: celpy's booleans are Python ints, so `false <= 50` would hold and a model's
    `"amount_usd": false` pass as a small amount. `mixes` says where two operands do that."""
    mixes = mixes or _bool_against_number

    @functools.wraps(operator)
    def strict(*operands: Any) -> Any:
        if any(isinstance(operand, CELEvalError) for operand in operands):
            return operator(*operands)  # celpy hands the first error on
        if any(_non_finite(operand) for operand in operands):
            return CELEvalError("NaN and infinity are not numbers a rule can compare or compute with")
        if len(operands) == 2 and mixes(*operands):
            raise TypeError("no such overload")  # celpy makes it the usual "no matching overload" error
        result = operator(*operands)
        if _non_finite(result):
            return CELEvalError("the result is not a finite number")
        return result

    return strict


def _bool_against_number(left: Any, right: Any) -> bool:
    return isinstance(left, BoolType) is not isinstance(right, BoolType) and (
        isinstance(left, _NUMBERS) or isinstance(right, _NUMBERS))


def _bool_against_number_within(left: Any, right: Any) -> bool:
    """`_bool_against_number` here or at the same place inside two lists or maps: celpy finds
    `[true] == [1]`."""
    pending = [(left, right)]
    while pending:
        first, second = pending.pop()
        if _bool_against_number(first, second):
            return True
        if isinstance(first, list) and isinstance(second, list) and len(first) == len(second):
            pending.extend(zip(first, second, strict=True))
        elif isinstance(first, dict) and isinstance(second, dict):
            pending.extend((first[key], second[key]) for key in first.keys() & second.keys())
    return False


def _bool_against_number_in(item: Any, container: Any) -> bool:
    """For `in`: the item against any element (or key) it is compared with; celpy finds `true` in `[0, 1]`."""
    return isinstance(container, list | dict) and any(
        _bool_against_number_within(item, element) for element in container)


def _index(container: Any, key: Any) -> Any:
    """`[]`, refusing a boolean index: Python would read `args.l[true]` as `args.l[1]`."""
    if isinstance(key, BoolType) and isinstance(container, list):
        raise TypeError("no such overload")
    return base_functions["_[_]"](container, key)


def _non_finite(value: Any) -> bool:
    """Whether `value` is, or holds anywhere in its lists and maps, a NaN or an infinity."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return True
        if isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, dict):
            pending.extend(item.values())
    return False


# -- conversions ---------------------------------------------------------------------------------


def _refused(function: str, value: Any, why: str) -> CELEvalError:
    return CELEvalError(f"{function}() of {_described(value)}: {why}")


def _described(value: Any) -> str:
    """`null`, `a list`, `bool true`, `string '٥'`: the value as CEL names it, shortened."""
    if value is None:
        return "null"
    kind = _CEL_TYPE_NAMES.get(type(value), type(value).__name__)
    if isinstance(value, list | dict):
        return f"a {kind}"
    text = repr(str(value)) if isinstance(value, str) else str(value).lower()
    return f"{kind} {text if len(text) <= 40 else text[:39] + '…'}"


def _double(value: Any) -> Any:
    if isinstance(value, StringType) and not _DOUBLE_TEXT.fullmatch(value):
        return _refused("double", value, "not a decimal number in ASCII digits")
    if isinstance(value, BoolType) or not isinstance(value, IntType | UintType | DoubleType | StringType):
        return _refused("double", value, "only a number or a numeric string converts to double")
    result = DoubleType(float(value))
    return result if math.isfinite(result) else _refused("double", value, "not a finite number")


def _integer(name: str, text: re.Pattern[str], kind: type[IntType] | type[UintType]) -> Callable[[Any], Any]:
    def convert(value: Any) -> Any:
        if isinstance(value, StringType) and not text.fullmatch(value):
            return _refused(name, value, "not a whole number in ASCII digits")
        if isinstance(value, DoubleType) and not math.isfinite(value):
            return _refused(name, value, "not a finite number")
        if isinstance(value, BoolType) or not isinstance(value, IntType | UintType | DoubleType | StringType
                                                         | TimestampType):
            return _refused(name, value, f"only a number or a numeric string converts to {name}")
        try:
            # A string is read in base 10 here: celpy would read "0x10" as 16.
            return kind(int(value) if isinstance(value, StringType) else value)
        except ValueError:
            return _refused(name, value, f"out of {name}'s range")

    return convert


def _string(value: Any) -> Any:
    if isinstance(value, BoolType):
        return StringType("true" if value else "false")  # celpy would write "True"
    if not isinstance(value, StringType | IntType | UintType | DoubleType | BytesType | TimestampType
                      | DurationType):
        return _refused("string", value, "null, a list or a map has no string form")
    if _non_finite(value):
        return _refused("string", value, "not a finite number")
    return base_functions["string"](value)


def _bool(value: Any) -> Any:
    if isinstance(value, BoolType):
        return value
    if isinstance(value, StringType) and value in _BOOL_TEXT:
        return BoolType(_BOOL_TEXT[value])
    return _refused("bool", value, "only true, false or one of their CEL spellings converts to bool")


def _size(value: Any) -> Any:
    if not isinstance(value, StringType | BytesType | ListType | MapType):
        return _refused("size", value, "only a string, bytes, a list or a map has a size")  # celpy: size(null) is 0
    return base_functions["size"](value)


STRICT_FUNCTIONS: Final[dict[str, Callable[..., Any]]] = {
    **{name: _strict_operator(base_functions[name]) for name in ("_<_", "_<=_", "_>_", "_>=_", "_+_", "_-_",
                                                                    "_*_", "_/_", "_%_", "-_")},
    **{name: _strict_operator(base_functions[name], _bool_against_number_within) for name in ("_==_", "_!=_")},
    "_in_": _strict_operator(base_functions["_in_"], _bool_against_number_in), "_[_]": _index,
    "double": _double, "int": _integer("int", _INT_TEXT, IntType), "uint": _integer("uint", _UINT_TEXT, UintType),
    "string": _string, "bool": _bool, "size": _size,
}
"""What a policy's programs use in place of celpy's own functions of these names."""


# -- what an expression reads as a value ---------------------------------------------------------

_CONVERSIONS = frozenset({"double", "int", "uint"})
_ONE_CHILD = frozenset({"expr", "conditionalor", "conditionaland", "relation", "addition", "multiplication", "unary",
                        "member", "primary", "paren_expr"})
"""Grammar rules that, with one child, are that child."""


@dataclass(frozen=True)
class ValueRead:
    """An argument an expression converts or compares: a value it was not written for (null, a bool,
    one left out) makes the expression an error there."""

    argument: str
    verb: Literal["converts", "compares"]
    guarded: bool
    """The expression also asks `has(args.<argument>)`."""


def value_reads(tree: Tree[Any]) -> tuple[ValueRead, ...]:
    """The `args.x` that `tree` converts (`double(args.x)`, `int`, `uint`) or compares (`args.x <= 50`),
    in the order written, each once."""
    reads: dict[str, Literal["converts", "compares"]] = {}
    guarded: set[str] = set()
    pending = [tree]
    while pending:  # depth first, left to right: the order written
        node = pending.pop()
        pending.extend(reversed([child for child in node.children if isinstance(child, Tree)]))
        if node.data == "ident_arg" and len(node.children) == 2 and isinstance(node.children[1], Tree):
            arguments = [_argument(child) for child in node.children[1].children]
            name = str(node.children[0])
            if name == "has":
                guarded.update(a for a in arguments if a is not None)
            elif name in _CONVERSIONS and len(arguments) == 1 and arguments[0] is not None:
                reads.setdefault(arguments[0], "converts")
        elif node.data == "relation" and len(node.children) == 2 and isinstance(node.children[0], Tree):
            for operand in (node.children[0].children[0], node.children[1]):
                argument = _argument(operand)
                if argument is not None:
                    reads.setdefault(argument, "compares")
    return tuple(ValueRead(argument, verb, argument in guarded) for argument, verb in reads.items())


def _argument(node: Any) -> str | None:
    """`x` if `node` is `args.x`."""
    node = _inner(node)
    if isinstance(node, Tree) and node.data == "member_dot" and len(node.children) == 2:
        target = _inner(node.children[0])
        if isinstance(target, Tree) and target.data == "ident" and str(target.children[0]) == "args":
            return str(node.children[1])
    return None


def _inner(node: Any) -> Any:
    while isinstance(node, Tree) and node.data in _ONE_CHILD and len(node.children) == 1:
        node = node.children[0]
    return node
