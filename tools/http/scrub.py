"""Blanking out what a server echoes of the credentials an HTTP API's headers carry, in whatever form.

A secret is found as it is, or escaped character by character in any mix of the forms servers write:
JSON (`\\/`, `\\u002F` or `\\u002f`, surrogate pairs), percent-encoding (`%2F`, `%2f`, `+` for a
space), HTML character references (`&#47;`, `&#x2F;`, `&sol;`) and `\\xHH`; or in base64 (standard or
URL-safe, padded or not) at any offset of what was encoded, so the base64 of `Bearer <token>` or of
`user:<token>` is found too. A secret that is itself base64 of text (a Basic credential) is also
looked for decoded, and so is the password in it.

What is found is replaced by `***`. A text that still holds a secret once decoded one more time (an
encoding of an encoding) is withheld whole. Pure: no I/O.
"""

from __future__ import annotations

import base64
import binascii
import html
import html.entities
import json
import re
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import unquote_plus

SCRUBBED = "***"
WITHHELD = "[withheld: it held a credential of the API's headers, encoded]"
MAX_LEADING_ZEROS = 8
"""Zeros an HTML character reference may pad its number with and still be found (bounded, so the
longest form of a secret, `Scrubber.reach`, is bounded too)."""
_JSON_ESCAPES = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
                 "\t": "\\t"}
_ENTITY_NAMES: dict[str, list[str]] = {}
for _name, _char in html.entities.html5.items():
    if _name.endswith(";") and len(_char) == 1:
        _ENTITY_NAMES.setdefault(_char, []).append(_name)
_BASE64_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_")
_ESCAPED_MARKS = ("%", "+", "&", "\\")
"""A text with none of these holds no escape a second decoding could undo."""
_JSON_STRING_ESCAPE = re.compile(r'\\(?:u([0-9a-fA-F]{4})|(["\\/bfnrt]))')
_JSON_UNESCAPED = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


class Scrubber:
    """Finds every form of `secrets` (and of what they decode to) in a text or a decoded JSON value."""

    def __init__(self, secrets: Iterable[str], min_length: int) -> None:
        plain = _with_decoded(list(secrets), min_length)
        self._patterns = [re.compile(_escaped_pattern(secret)) for secret in plain]
        cores = sorted({core for secret in plain for core in _base64_cores(secret)}, key=len, reverse=True)
        self._cores = re.compile("|".join(map(re.escape, cores))) if cores else None
        self.reach = max((sum(_form_length(char) for char in secret) for secret in plain), default=0)
        """The most characters one secret can take in any form found: a text cut at a cap is read
        this much further, so a secret across the cut is found whole before the text is cut."""

    def text(self, text: str, *, cut: int | None = None) -> str:
        """`text` with every form of a secret replaced by `***`, ending at character `cut` (a secret
        across the cut is replaced whole); withheld whole if a secret is left once decoded again."""
        if not self._patterns:
            return text[:cut]
        spans = _merged([*(span for pattern in self._patterns for span in _spans(pattern, text)),
                         *self._base64_spans(text)])
        scrubbed, at = [], 0
        end = len(text) if cut is None else cut
        for start, stop in spans:
            if start >= end:
                break
            scrubbed += [text[at:start], SCRUBBED]
            at = stop
        scrubbed.append(text[at:max(at, end)])
        shown = "".join(scrubbed)
        return WITHHELD if self._holds_encoded(shown) else shown

    def value(self, value: Any) -> Any:
        """A decoded JSON value with every string (keys too) scrubbed, and any number that shows a secret."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.value(item) for item in value]
        if isinstance(value, dict):
            return {self.text(str(key)): self.value(item) for key, item in value.items()}
        if isinstance(value, int | float) and not isinstance(value, bool):
            written = json.dumps(value)
            return value if self.text(written) == written else SCRUBBED
        return value

    def _base64_spans(self, text: str) -> Iterator[tuple[int, int]]:
        for start, stop in _spans(self._cores, text) if self._cores else ():
            # The character either side of a core holds a few of the secret's bits too.
            before = 1 if start > 0 and text[start - 1] in _BASE64_CHARS else 0
            after = 1 if stop < len(text) and text[stop] in _BASE64_CHARS else 0
            yield start - before, stop + after

    def _holds_encoded(self, text: str) -> bool:
        if not any(mark in text for mark in _ESCAPED_MARKS):
            return False
        decoded = (unquote_plus(text), html.unescape(text), _json_unescaped(text))
        patterns = [*self._patterns, *([self._cores] if self._cores else [])]
        return any(pattern.search(view) for view in decoded if view != text for pattern in patterns)


def _with_decoded(secrets: list[str], min_length: int) -> list[str]:
    """The secrets, plus the text a base64 secret decodes to and the password in a `user:password`."""
    found = list(secrets)
    for secret in secrets:
        decoded = _base64_text(secret)
        if decoded is None:
            continue
        found += [part for part in (decoded, decoded.partition(":")[2]) if len(part) >= min_length]
    return sorted(set(found), key=len, reverse=True)


def _base64_text(secret: str) -> str | None:
    if len(secret) % 4 == 1 or not re.fullmatch(r"[A-Za-z0-9+/_-]+={0,2}", secret):
        return None
    padded = secret.rstrip("=") + "=" * (-len(secret.rstrip("=")) % 4)
    try:
        text = base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return text if text.isprintable() else None


def _char_forms(char: str) -> list[str]:
    """Patterns of each way `char` can be written: itself, JSON, percent, `\\xHH`, HTML."""
    code = ord(char)
    utf8 = char.encode("utf-8")
    forms = [re.escape(char), "".join("%" + _hex(byte, 2) for byte in utf8), _json_unicode(code),
             "".join(r"\\x" + _hex(byte, 2) for byte in utf8),
             f"&#0{{0,{MAX_LEADING_ZEROS}}}{code};", f"&#[xX]0{{0,{MAX_LEADING_ZEROS}}}{_hex(code, 1)};"]
    if char == " ":
        forms.append(r"\+")
    if char in _JSON_ESCAPES:
        forms.append(re.escape(_JSON_ESCAPES[char]))
    if 0x80 <= code < 0x100:
        forms.append(r"\\x" + _hex(code, 2))
    forms += [re.escape("&" + name) for name in _ENTITY_NAMES.get(char, ())]
    return forms


def _escaped_pattern(secret: str) -> str:
    return "".join("(?:" + "|".join(_char_forms(char)) + ")" for char in secret)


def _form_length(char: str) -> int:
    """How many characters the longest form of `char` the patterns find takes."""
    code, size = ord(char), len(char.encode("utf-8"))
    references = (2 + MAX_LEADING_ZEROS + len(str(code)) + 1, 3 + MAX_LEADING_ZEROS + len(f"{code:x}") + 1)
    named = (1 + len(name) for name in _ENTITY_NAMES.get(char, ()))
    return max(3 * size, 4 * size, 6 if code < 0x10000 else 12, *references, *named)


def _hex(value: int, width: int) -> str:
    """`value` in hex, at least `width` digits, as a pattern taking either case of each letter."""
    return "".join(f"[{digit}{digit.upper()}]" if digit.isalpha() else digit for digit in f"{value:0{width}x}")


def _json_unicode(code: int) -> str:
    if code < 0x10000:
        return r"\\u" + _hex(code, 4)
    high, low = divmod(code - 0x10000, 0x400)
    return r"\\u" + _hex(0xD800 + high, 4) + r"\\u" + _hex(0xDC00 + low, 4)


def _base64_cores(secret: str) -> list[str]:
    """The base64 characters that depend on `secret` alone wherever it sits in what was encoded (one
    run for each of its three offsets from a 3-byte boundary), standard and URL-safe."""
    raw = secret.encode("utf-8")
    cores = []
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + raw).decode("ascii")
        core = encoded[(8 * offset + 5) // 6: 8 * (offset + len(raw)) // 6]
        cores += [core, core.replace("+", "-").replace("/", "_")]
    return cores


def _spans(pattern: re.Pattern[str], text: str) -> Iterator[tuple[int, int]]:
    for match in pattern.finditer(text):
        yield match.span()


def _merged(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, stop in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(stop, merged[-1][1]))
        else:
            merged.append((start, stop))
    return merged


def _json_unescaped(text: str) -> str:
    def one(match: re.Match[str]) -> str:
        if match.group(1) is not None:
            return chr(int(match.group(1), 16))
        return _JSON_UNESCAPED[match.group(2)]

    joined = _JSON_STRING_ESCAPE.sub(one, text)
    return joined.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
