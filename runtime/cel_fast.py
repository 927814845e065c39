"""A fast path for the approval policy's CEL `when` expressions, which defers to celpy whenever it is unsure.

celpy (cel-python) stays the definition of what an expression means: the policy parses and checks
every `when` with it, and it decides every call this module does not. Its interpreter costs 100–300 µs
an expression, and converting a call's arguments to its types 50 µs more, on every proposed call. So
each expression is also compiled here, from celpy's own parse tree, into Python closures over the
call's plain JSON values, for the part of CEL a policy mostly uses: the variables, field and index
access, literals, lists, `==` `!=` `<` `<=` `>` `>=` `in`, `&&` `||` `!`, `?:`, `size`, `startsWith`,
`endsWith`.

Each closure answers only where Python's operation is the very one celpy performs on the same
values: the same type on both sides of an operator (and a double compared with an int, which celpy
compares as Python does), a key that is there, an index inside the list. Anything else (a type
mismatch, a missing key, a value that is not true or false, any other construct: macros, `has`,
maps, arithmetic...) is `UNDECIDED`, and celpy evaluates the expression itself: its verdict, its
error and its wording stand. A call whose values are not plain JSON in celpy's range (an int beyond
int64, a NaN or an infinity, which celpy refuses to compare or compute with) goes to celpy whole, so
what celpy cannot read or refuses still fails every expression the same way.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping
from typing import Any, Final

import celpy
from celpy import celtypes
from celpy.evaluation import CELEvalError
from lark import Token, Tree

UNDECIDED: Final = object()
"""What a closure returns where only celpy may say: an error, a type it leaves to celpy, or any doubt."""

Variables = Mapping[str, Any]
Closure = Callable[[Variables], Any]
Check = Callable[[Variables], bool | None]
"""A compiled expression: True or False as celpy would answer, or None where celpy must decide."""

_INT64 = range(-(2**63), 2**63)  # celpy's IntType: an int outside it cannot be read at all
_FINITE_FLOATS = (-sys.float_info.max, sys.float_info.max)
_DEEPEST = 64
"""Nesting beyond which a call goes to celpy whole: its conversion recurses, and decides what is too deep."""
_DEEPEST_EXPRESSION = 150
"""Parse-tree depth beyond which celpy decides every call. Its interpreter recurses some 4 frames a
level and runs out of stack near 560 levels (about 55 nested parentheses), which makes the
expression an error that fails closed; well short of that, it always evaluates."""
_LITERALS: Final[dict[type, type]] = {celtypes.IntType: int, celtypes.DoubleType: float,
                                      celtypes.StringType: str, celtypes.BoolType: bool}
_SCALARS = (int, float, str, bool)
"""Types whose `==` and ordering in celpy are Python's own when both sides have the same one."""
_PASS_THROUGH = frozenset({"expr", "conditionalor", "conditionaland", "relation", "addition", "multiplication",
                           "unary", "member", "primary"})
"""Grammar rules that, with one child, are that child."""


class _Unsupported(Exception):
    """The expression uses something the fast path leaves to celpy for every call."""


def plain_variables(tool: Any, args: Any, requester: Any, channel: Any, usage: Any) -> dict[str, Any] | None:
    """The variables as the closures read them, or None if any value is not plain JSON within celpy's
    int range, finite, and within `_DEEPEST` levels, which leaves every expression of the call to celpy."""
    if not (type(tool) is str and type(requester) is str and type(channel) is str
            and type(args) is dict and type(usage) is dict and _is_plain(args, 1) and _is_plain(usage, 1)):
        return None
    return {"args": args, "tool": tool, "requester": requester, "channel": channel, "usage": usage}


def _is_plain(container: dict[Any, Any] | list[Any], depth: int) -> bool:
    # This walks every call's arguments: scalars are checked in line, and only containers recurse.
    if depth > _DEEPEST:
        return False
    if type(container) is dict:
        for key in container:
            if type(key) is not str:
                return False
        items: Any = container.values()
    else:
        items = container
    for item in items:
        kind = type(item)
        if kind is str or kind is bool or item is None:
            continue
        if kind is float:
            if not _FINITE_FLOATS[0] <= item <= _FINITE_FLOATS[1]:  # NaN and the infinities: celpy refuses them
                return False
        elif kind is int:
            if item not in _INT64:
                return False
        elif kind is dict or kind is list:
            if not _is_plain(item, depth + 1):
                return False
        else:
            return False
    return True


def compile_check(tree: Tree[Any], environment: celpy.Environment, variables: tuple[str, ...]) -> Check | None:
    """The fast check for celpy's parse of an expression, or None if it uses anything beyond the fast
    path (then celpy evaluates it for every call). `environment` evaluates its literals, once."""
    if _depth(tree) > _DEEPEST_EXPRESSION:
        return None
    try:
        closure = _Compiler(environment, variables).compile(tree)
    except _Unsupported:
        return None

    def check(facts: Variables) -> bool | None:
        result = closure(facts)
        return result if type(result) is bool else None

    return check


class _Compiler:
    def __init__(self, environment: celpy.Environment, variables: tuple[str, ...]) -> None:
        self._environment = environment
        self._variables = variables

    def compile(self, node: Tree[Any]) -> Closure:
        children = node.children
        if node.data in _PASS_THROUGH and len(children) == 1:
            return self.compile(_tree(children[0]))
        rule = str(node.data)
        for kind in (self._operator, self._member, self._primary):
            if (closure := kind(rule, node)) is not None:
                return closure
        raise _Unsupported(rule)

    def _operator(self, rule: str, node: Tree[Any]) -> Closure | None:
        """`a ? b : c`, `||`, `&&`, a comparison or `!`; None if `node` is none of them."""
        children = node.children
        if rule == "expr" and len(children) == 3:
            return _choice(*(self.compile(_tree(child)) for child in children))
        if rule == "conditionalor" and len(children) == 2:
            return _either(self.compile(_tree(children[0])), self.compile(_tree(children[1])))
        if rule == "conditionaland" and len(children) == 2:
            return _both(self.compile(_tree(children[0])), self.compile(_tree(children[1])))
        if rule == "relation" and len(children) == 2:
            operator, right = _tree(children[0]), _tree(children[1])
            compare = _RELATIONS.get(str(operator.data))
            if compare is None:
                raise _Unsupported(operator.data)
            return _binary(compare, self.compile(_tree(operator.children[0])), self.compile(right))
        if rule == "unary" and len(children) == 2 and _tree(children[0]).data == "unary_not":
            return _negation(self.compile(_tree(children[1])))
        return None

    def _member(self, rule: str, node: Tree[Any]) -> Closure | None:
        """`a.b`, `a[b]`, the methods of `_METHODS` and `size`; None if `node` is none of them."""
        children = node.children
        if rule == "member_dot":
            return _field(self.compile(_tree(children[0])), str(children[1]))
        if rule == "member_index":
            return _binary(_index, self.compile(_tree(children[0])), self.compile(_tree(children[1])))
        if rule == "member_dot_arg" and len(children) == 3 and str(children[1]) in _METHODS:
            arguments = self._arguments(children[2])
            if len(arguments) == 1:
                return _binary(_METHODS[str(children[1])], self.compile(_tree(children[0])), arguments[0])
        if rule == "member_dot_arg" and len(children) == 2 and str(children[1]) == "size":
            return _unary(_size, self.compile(_tree(children[0])))
        if rule == "ident_arg" and len(children) == 2 and str(children[0]) == "size":
            arguments = self._arguments(children[1])
            if len(arguments) == 1:
                return _unary(_size, arguments[0])
        return None

    def _primary(self, rule: str, node: Tree[Any]) -> Closure | None:
        """`(a)`, a list, a variable or a literal; None if `node` is none of them."""
        children = node.children
        if rule == "paren_expr":
            return self.compile(_tree(children[0]))
        if rule == "list_lit":
            return _list(self._arguments(children[0]) if children else [])
        if rule == "ident" and str(children[0]) in self._variables:
            return _variable(str(children[0]))
        if rule == "literal":
            return _constant(self._literal(node))
        return None

    def _arguments(self, exprlist: Tree[Any] | Token) -> list[Closure]:
        return [self.compile(_tree(child)) for child in _tree(exprlist).children]

    def _literal(self, node: Tree[Any]) -> Any:
        # celpy reads the literal, so escapes, hex, raw strings and overflow are exactly its own.
        try:
            value = celpy.InterpretedRunner(self._environment, node).evaluate({})
        except CELEvalError:
            raise _Unsupported("literal") from None
        if value is None:
            return None
        plain = _LITERALS.get(type(value))
        if plain is None or isinstance(value, float) and not math.isfinite(value):  # uint, bytes, 1e400
            raise _Unsupported("literal")
        return plain(value)


def _depth(tree: Tree[Any]) -> int:
    deepest, pending = 0, [(tree, 1)]
    while pending:
        node, depth = pending.pop()
        deepest = max(deepest, depth)
        pending.extend((child, depth + 1) for child in node.children if isinstance(child, Tree))
    return deepest


def _tree(child: Tree[Any] | Token) -> Tree[Any]:
    if not isinstance(child, Tree):
        raise _Unsupported(f"token {child!r}")
    return child


# -- the closures -------------------------------------------------------------------------------


def _constant(value: Any) -> Closure:
    return lambda facts: value


def _variable(name: str) -> Closure:
    return lambda facts: facts[name]


def _field(member: Closure, name: str) -> Closure:
    def field(facts: Variables) -> Any:
        value = member(facts)
        if type(value) is dict and name in value:
            return value[name]
        return UNDECIDED

    return field


def _unary(operation: Callable[[Any], Any], operand: Closure) -> Closure:
    def apply(facts: Variables) -> Any:
        value = operand(facts)
        return UNDECIDED if value is UNDECIDED else operation(value)

    return apply


def _binary(operation: Callable[[Any, Any], Any], left: Closure, right: Closure) -> Closure:
    def apply(facts: Variables) -> Any:
        first, second = left(facts), right(facts)
        if first is UNDECIDED or second is UNDECIDED:
            return UNDECIDED
        return operation(first, second)

    return apply


def _list(items: list[Closure]) -> Closure:
    def build(facts: Variables) -> Any:
        values = [item(facts) for item in items]
        return UNDECIDED if any(value is UNDECIDED for value in values) else values

    return build


def _both(left: Closure, right: Closure) -> Closure:
    # celpy evaluates both sides and, like CEL, lets a false on either side win over anything on
    # the other, an error included.
    def both(facts: Variables) -> Any:
        first, second = left(facts), right(facts)
        if first is False or second is False:
            return False
        if first is True and second is True:
            return True
        return UNDECIDED

    return both


def _either(left: Closure, right: Closure) -> Closure:
    def either(facts: Variables) -> Any:
        first, second = left(facts), right(facts)
        if first is True or second is True:
            return True
        if first is False and second is False:
            return False
        return UNDECIDED

    return either


def _negation(operand: Closure) -> Closure:
    def negation(facts: Variables) -> Any:
        value = operand(facts)
        return (not value) if type(value) is bool else UNDECIDED

    return negation


def _choice(condition: Closure, then: Closure, otherwise: Closure) -> Closure:
    # celpy evaluates only the branch the condition picks, so an error in the other one is no error.
    def choice(facts: Variables) -> Any:
        value = condition(facts)
        if type(value) is not bool:
            return UNDECIDED
        return then(facts) if value else otherwise(facts)

    return choice


# -- the operations, where celpy's is Python's ------------------------------------------------


def _same_scalars(left: Any, right: Any) -> bool:
    return type(left) is type(right) and type(left) in _SCALARS


def _equal(left: Any, right: Any) -> Any:
    if _same_scalars(left, right) or (left is None and right is None):
        return left == right
    return UNDECIDED


def _unequal(left: Any, right: Any) -> Any:
    equal = _equal(left, right)
    return UNDECIDED if equal is UNDECIDED else not equal


def _orderable(left: Any, right: Any) -> bool:
    # Not bool (celpy refuses it against a number). A double against an int is Python's exact
    # comparison in celpy too; an int against a double celpy refuses, so that is left to it.
    kind = type(left)
    return kind is not bool and (kind is type(right) and kind in _SCALARS or kind is float and type(right) is int)


def _ordering(compare: Callable[[Any, Any], bool]) -> Callable[[Any, Any], Any]:
    def ordered(left: Any, right: Any) -> Any:
        return compare(left, right) if _orderable(left, right) else UNDECIDED

    return ordered


def _contained(item: Any, container: Any) -> Any:
    # celpy compares the item with each element (each key of a map) in turn; with every element of
    # the item's own type that is Python's `==` throughout. Not `in`: it would match a NaN by identity.
    kind = type(item)
    if kind not in _SCALARS:
        return UNDECIDED
    if type(container) is dict:
        return UNDECIDED if kind is not str else item in container  # the keys of plain JSON are strings
    if type(container) is not list or any(type(element) is not kind for element in container):
        return UNDECIDED
    return any(element == item for element in container)


def _index(container: Any, key: Any) -> Any:
    if type(container) is dict and type(key) is str and key in container:
        return container[key]
    if type(container) is list and type(key) is int and 0 <= key < len(container):
        return container[key]
    return UNDECIDED


def _size(value: Any) -> Any:
    # celpy's size of a string counts code points, as len() does; of a list or map, its entries.
    return len(value) if type(value) in (str, list, dict) else UNDECIDED


def _string_method(method: Callable[[str, str], bool]) -> Callable[[Any, Any], Any]:
    def call(text: Any, fragment: Any) -> Any:
        return method(text, fragment) if type(text) is str and type(fragment) is str else UNDECIDED

    return call


_RELATIONS: Final[dict[str, Callable[[Any, Any], Any]]] = {
    "relation_eq": _equal, "relation_ne": _unequal,
    "relation_lt": _ordering(lambda a, b: a < b), "relation_le": _ordering(lambda a, b: a <= b),
    "relation_gt": _ordering(lambda a, b: a > b), "relation_ge": _ordering(lambda a, b: a >= b),
    "relation_in": _contained,
}
_METHODS: Final[dict[str, Callable[[Any, Any], Any]]] = {
    "startsWith": _string_method(str.startswith), "endsWith": _string_method(str.endswith),
}
