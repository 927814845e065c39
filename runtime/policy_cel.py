"""A rule's `when`: a CEL expression compiled once, then decided for each proposed call. Pure: no I/O.

The fast check (`cel_fast`) decides the calls it can be sure of, and celpy every other; whatever makes
celpy fail on a call's values is that call's evaluation error, worded on one line, never a crash.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Mapping
from typing import Any

import celpy
from celpy.adapter import json_to_cel
from celpy.celparser import CELParseError
from celpy.celtypes import BoolType
from celpy.evaluation import CELEvalError, Context, base_functions

from signoff.runtime.cel_fast import Check, compile_check, plain_variables
from signoff.runtime.cel_strict import STRICT_FUNCTIONS, ValueRead, value_reads

# celpy logs every evaluation's variables at DEBUG: the model's arguments, secrets included.
logging.getLogger("celpy").setLevel(logging.INFO)

VARIABLES = ("args", "tool", "requester", "channel", "usage")
"""What a `when` expression may look at."""

_MACROS = {"all": 1, "exists": 1, "exists_one": 1, "map": 1, "filter": 1, "reduce": 2}
"""Comprehension macros and how many variables each binds (`reduce` is a celpy extension)."""
_OPERATORS = {"relation_lt": "<", "relation_le": "<=", "relation_gt": ">", "relation_ge": ">=",
              "relation_eq": "==", "relation_ne": "!=", "relation_in": "in", "addition_add": "+",
              "addition_sub": "-", "multiplication_mul": "*", "multiplication_div": "/",
              "multiplication_mod": "%", "unary_neg": "-", "unary_not": "!"}
_PYTHON_CLASS = re.compile(r"<class '(?:\w+\.)*(\w+)'>")
_RULE_TOKEN = re.compile(r"Token\('RULE', '(\w+)'\)")
_INNER_ERROR = re.compile(r"""CELEvalError\(\*\((?:"((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)'),""")


class WhenError(ValueError):
    """A `when` that does not compile, or reads a name it may not; the message quotes it and says why."""


class Facts:
    """One call's values as its `when`s see them: plain for the fast checks, and converted for celpy
    only if an expression needs it."""

    def __init__(self, tool: str, args: Mapping[str, Any], requester: str, channel: str,
                 usage: Mapping[str, Any]) -> None:
        self._values = (tool, args, requester, channel, usage)
        self.plain = plain_variables(tool, args, requester, channel, usage)
        self._context: Context | str | None = None

    def for_celpy(self) -> Context | str:
        """The CEL activation for the call, or why its values cannot be read."""
        if self._context is None:
            self._context = _celpy_context(*self._values)
        return self._context


class When:
    """`text` compiled for celpy, with the fast check that stands in for it where it can; raises
    `WhenError` if it does not compile or refers to anything but `VARIABLES`."""

    def __init__(self, text: str) -> None:
        environment = _cel()
        try:
            tree = environment.compile(text)
        except CELParseError as exc:
            raise WhenError(f"when {text!r} does not compile: {_parse_message(exc)}") from None
        unknown = sorted(_free_names(tree) - set(VARIABLES) - set(base_functions) - {"google"})
        if unknown:
            raise WhenError(f"when {text!r} refers to {', '.join(unknown)}; an expression may use "
                            f"{', '.join(VARIABLES)}")
        self.text = text
        self._program = environment.program(tree, functions=STRICT_FUNCTIONS)
        self._check: Check | None = compile_check(tree, environment, VARIABLES)
        """celpy's decision, made fast where `cel_fast` can be sure of it; None: celpy decides every call."""

    def holds(self, facts: Facts) -> bool | str:
        """Whether the expression is true for the call; a string says why it could not be evaluated."""
        if self._check is not None and facts.plain is not None:
            decided = self._check(facts.plain)
            if decided is not None:
                return decided
        return self.holds_in_celpy(facts)

    def holds_in_celpy(self, facts: Facts) -> bool | str:
        """`holds` as celpy alone decides it, without the fast check: the meaning that check must keep."""
        context = facts.for_celpy()
        if isinstance(context, str):
            return context
        try:
            result = self._program.evaluate(context)
        # The arguments are a model's: whatever they make celpy raise (CELEvalError, or a
        # RecursionError from deep nesting) is this call's evaluation error, never a crash.
        except Exception as exc:
            return _cel_message(exc)
        if isinstance(result, CELEvalError):
            return _cel_message(result)
        if not isinstance(result, BoolType):
            return f"expected true or false, got {_cel_type_name(type(result))} {one_line(str(result), 80)}"
        return bool(result)

    def value_reads(self) -> tuple[ValueRead, ...]:
        """The arguments the expression converts or compares, where a value it was not written for is an error."""
        return value_reads(_cel().compile(self.text))


def one_line(text: str, limit: int = 300) -> str:
    """`text` with its whitespace runs made one space, cut to `limit` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit - 1] + "…"


@functools.cache
def _cel() -> celpy.Environment:
    # Made on first use, not at import: creating one raises the interpreter's recursion limit.
    return celpy.Environment()


def _celpy_context(tool: str, args: Mapping[str, Any], requester: str, channel: str,
                   usage: Mapping[str, Any]) -> Context | str:
    try:
        return {"args": json_to_cel(dict(args)), "tool": celpy.celtypes.StringType(tool),
                "requester": celpy.celtypes.StringType(requester),
                "channel": celpy.celtypes.StringType(channel), "usage": json_to_cel(dict(usage))}
    # Untrusted JSON: too deep a nesting (RecursionError), a value that is not JSON (ValueError),
    # `args` that is no mapping at all (TypeError)... each only means no `when` can hold.
    except Exception as exc:
        return f"the call's values cannot be read: {one_line(f'{type(exc).__name__}: {exc}')}"


def _free_names(tree: celpy.Expression[Any]) -> set[str]:
    """The plain identifiers an expression reads, less the variables its macros bind."""
    used: set[str] = set()
    bound: set[str] = set()
    for node in tree.iter_subtrees():
        if node.data == "ident":
            used.add(str(node.children[0]))
        elif node.data == "member_dot_arg" and len(node.children) == 3 and str(node.children[1]) in _MACROS:
            arguments = node.children[2]
            assert isinstance(arguments, celpy.Expression)
            for variable in arguments.children[:_MACROS[str(node.children[1])]]:
                if isinstance(variable, celpy.Expression):
                    bound |= {str(n.children[0]) for n in variable.iter_subtrees() if n.data == "ident"}
    return used - bound


def _parse_message(exc: CELParseError) -> str:
    # celpy's message is only a caret picture; the parser's own error (lark's UnexpectedToken or
    # UnexpectedCharacters, which celpy re-raises from) says what was found there.
    token, char = getattr(exc.__context__, "token", None), getattr(exc.__context__, "char", None)
    if token is not None:
        what = "unexpected end of expression" if token.type == "$END" else f"unexpected {str(token)!r}"
    elif isinstance(char, str):
        what = f"unexpected character {char!r}"
    else:
        what = one_line(str(exc.args[0]) if exc.args else "syntax error")
    return f"{what} at line {exc.line}, column {exc.column}" if exc.line else what


def _cel_message(exc: BaseException) -> str:
    """celpy's message, on one line and without its internals (class paths, the whole activation)."""
    if not isinstance(exc, CELEvalError):
        return one_line(f"{type(exc).__name__}: {exc}")
    text = str(exc.args[0]) if exc.args else "evaluation error"
    if "CELEvalError" in text:
        # `a && b` with both sides in error says only that; the sides' own errors are in its details.
        inner = [double or single for double, single in _INNER_ERROR.findall(" ".join(map(str, exc.args[1:])))]
        text = "; ".join(i.replace("\\'", "'").replace('\\"', '"') for i in inner) or text
    text = text.split(" (in activation", 1)[0]
    text = _RULE_TOKEN.sub(lambda m: repr(_OPERATORS.get(m.group(1), m.group(1))), text)
    text = _PYTHON_CLASS.sub(lambda m: _cel_type_name(m.group(1)), text)
    return one_line(text.removeprefix("found "))


def _cel_type_name(kind: type | str) -> str:
    """A celtypes class as CEL names its type: `IntType` is `int`, Python's `NoneType` is `null`."""
    name = kind if isinstance(kind, str) else kind.__name__
    if name == "NoneType":
        return "null"
    return name.removesuffix("Type").lower() if name.endswith("Type") else name
