"""What an approver reads: a call's arguments, one line each, exactly as they will run.

Pure: data in, text out. Every surface that offers Approve (the Slack card, App Home, the full
arguments modal, the terminal) shows the lines `argument_lines` returns and no other rendering.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from signoff.runtime.state import DEFAULT_REDACT_KEYS, Redacted, redact, secret_names
from signoff.tools.base import Tool

_BARE_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
# Characters that draw nothing, or reorder or join what is drawn, besides Unicode's categories
# below: fillers and selectors an attacker can use to make two different strings look alike.
_INVISIBLE = frozenset(
    [0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x2800, 0x3164, 0xFFA0]
    + list(range(0x180B, 0x1810)) + list(range(0xFE00, 0xFE10)) + list(range(0xE0100, 0xE01F0))
)
# Cc control, Cf format (bidi overrides, zero-width, tags), Cs/Co/Cn surrogate, private, unassigned,
# Zl/Zp line and paragraph separators, Zs spaces other than " " (they look like one).
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"})
_ASTRAL = re.compile(r"(?<!\\)((?:\\\\)*)\\U([0-9a-f]{8})")


@dataclass(frozen=True)
class ToolDisplay:
    """What an approver is told about one tool: its description, argument order, secret names and
    whether Approve asks to confirm."""

    description: str = ""
    order: tuple[str, ...] = ()
    """The tool's argument order (its args model's fields or its schema's properties); stored
    arguments are canonical JSON, so their keys are sorted."""
    secret_names: frozenset[str] = DEFAULT_REDACT_KEYS
    confirm: bool = False
    """The tool asks for "are you sure?" before every Approve (`Tool.confirm`)."""

    @classmethod
    def of(cls, tool: Tool | None, configured: Iterable[str] = DEFAULT_REDACT_KEYS) -> ToolDisplay:
        """The display of `tool` (None: a tool this process does not have loaded)."""
        names = secret_names(tool, configured=configured)
        if tool is None:
            return cls(secret_names=names)
        return cls(tool.description, _field_order(tool), names, tool.confirm)


def _field_order(tool: Tool) -> tuple[str, ...]:
    """The order the tool declares its arguments in: its args model's fields, else its JSON Schema's
    properties (an MCP tool's `inputSchema`)."""
    if tool.args_model is not None:
        return tuple(tool.args_model.model_fields)
    properties = tool.json_schema().get("properties")
    return tuple(properties) if isinstance(properties, dict) else ()


UNKNOWN_TOOL = ToolDisplay()
"""How a tool not loaded here is shown: no description, arguments as stored, the built-in secret names."""


def argument_lines(args: Any, display: ToolDisplay | None = None) -> list[str]:
    """One `name: value` line per argument, in the tool's order, secrets redacted, nothing cut."""
    return [f"{name}: {value}" for name, value in argument_pairs(args, display)]


def argument_pairs(args: Any, display: ToolDisplay | None = None) -> list[tuple[str, str]]:
    """(name, value) as `argument_lines` shows them; a call whose arguments are not an object is one value."""
    display = display or UNKNOWN_TOOL
    shown = redact(args, display.secret_names, mask=Redacted.of)
    if not isinstance(shown, Mapping):
        return [("(arguments)", literal(shown))]
    return [(key_text(name), literal(shown[name])) for name in ordered(shown, display.order)]


def ordered(args: Mapping[str, Any], order: Sequence[str]) -> list[str]:
    """The keys of `args`: the declared ones in `order`, then any others as stored."""
    declared = [name for name in order if name in args]
    return declared + [name for name in args if name not in set(declared)]


def key_text(name: Any) -> str:
    """A plain identifier as it is; any other name quoted and escaped like a string value."""
    return name if isinstance(name, str) and _BARE_KEY.match(name) else literal(str(name))


def literal(value: Any) -> str:
    """`value` as an unambiguous JSON-style literal on one line.

    Strings are quoted, so `"100"` and `100` differ; a newline is `\\n`, so no value can draw a
    line that looks like another argument; invisible and direction-changing characters are
    `\\uXXXX` escapes. Backticks are `\\u0060` too: Slack shows arguments in a code block, which a
    literal ``` would close, and every surface shows the same text.
    """
    match value:
        case Redacted():
            return str(value)
        case str():
            return '"' + "".join(_escaped(char) for char in value) + '"'
        case bool() | None | int() | float():
            return json.dumps(value)
        case Mapping():
            return "{" + ", ".join(f"{literal(str(k))}: {literal(v)}" for k, v in value.items()) + "}"
        case list() | tuple():
            return "[" + ", ".join(literal(v) for v in value) + "]"
        case _:
            return literal(str(value))


def read_literal(text: str) -> Any:
    """The value `literal` showed as `text` (its inverse; for checking that what is shown is exact)."""
    def pair(match: re.Match[str]) -> str:
        code = int(match.group(2), 16) - 0x10000
        return f"{match.group(1)}\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"

    # JSON, except that a character beyond the BMP is one `\\UXXXXXXXX` rather than a surrogate pair.
    return json.loads(_ASTRAL.sub(pair, text))


def _escaped(char: str) -> str:
    if char in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[char]
    return "\\u0060" if char == "`" else shown_char(char)


def shown_char(char: str) -> str:
    """`char` itself, or a `\\u202e`-style escape if it draws nothing, or moves, reorders or joins
    what is drawn (a control, format or invisible character, a space other than the plain one)."""
    code = ord(char)
    if code in _INVISIBLE or (char != " " and unicodedata.category(char) in _ESCAPED_CATEGORIES):
        return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
    return char
