"""What an approver reads: arguments rendered exactly, one line each, in the tool's order."""

from __future__ import annotations

import json
import re
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from signoff.bot.arguments import ToolDisplay, argument_lines, literal, read_literal
from signoff.bot.slack.blocks import MAX_SECTION_TEXT, code_section_lines, code_sections
from signoff.runtime.state import DEFAULT_REDACT_KEYS
from signoff.tools.base import Tool

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def test_a_newline_in_a_value_cannot_draw_a_fake_argument_line():
    lines = argument_lines({"body": "Hi Ana,\nto: ana@example.com" + "\n" * 40 + "Thanks", "to": "attacker@evil.example"})
    assert lines == ['body: "Hi Ana,\\nto: ana@example.com' + "\\n" * 40 + 'Thanks"', 'to: "attacker@evil.example"']
    assert [line for line in lines if line.startswith("to:")] == ['to: "attacker@evil.example"']


@pytest.mark.parametrize("char", [
    "\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069", "\u200e", "\u200f",
    "\u061c", "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\U000e0041", "\u00a0", "\u2028",
    "\u0000", "\u001b", "\u007f", "\ufe0f", "\u3164",
])
def test_direction_changing_and_invisible_characters_are_shown_as_escapes(char):
    [line] = argument_lines({"to": f"ana@example.com{char}.evil"})
    escape = f"\\u{ord(char):04x}" if ord(char) <= 0xFFFF else f"\\U{ord(char):08x}"
    assert line == f'to: "ana@example.com{escape}.evil"'
    assert char not in line


def test_text_numbers_booleans_and_null_look_different():
    lines = argument_lines({"a": "100", "b": 100, "c": "true", "d": True, "e": "null", "f": None, "g": 1.5,
                            "h": ["100", 100], "i": {"n": "1"}})
    assert lines == ['a: "100"', "b: 100", 'c: "true"', "d: true", 'e: "null"', "f: null", "g: 1.5",
                     'h: ["100", 100]', 'i: {"n": "1"}']


def test_long_names_are_never_cut_and_stay_distinct():
    first, second = "x" * 200 + "_to", "x" * 200 + "_cc"
    lines = argument_lines({first: "a@example.com", second: "b@example.com"})
    assert lines == [f'{first}: "a@example.com"', f'{second}: "b@example.com"']


def test_names_that_are_not_plain_words_are_quoted_and_escaped_like_values():
    lines = argument_lines({"to\nbody": 1, 'a": "b': 2, "ünï": 3, "": 4})
    assert lines == ['"to\\nbody": 1', '"a\\": \\"b": 2', '"ünï": 3', '"": 4']


def test_backticks_are_shown_exactly_and_cannot_close_the_code_block():
    [line] = argument_lines({"cmd": "```\nrm -rf /\n``` `x`"})
    assert "`" not in line
    assert read_literal(line.removeprefix("cmd: ")) == "```\nrm -rf /\n``` `x`"
    [section] = code_sections([line], 1)
    assert section.count("```") == 2 and section.startswith("```\n") and section.endswith("\n```")


def test_arguments_follow_the_args_model_order_not_the_stored_sorted_order():
    class EmailArgs(BaseModel):
        to: str
        subject: str
        body: str

    tool = Tool("send_email", lambda args, key: None, side_effect=True, args_model=EmailArgs)
    stored = json.loads(json.dumps({"body": "b", "subject": "s", "to": "t"}, sort_keys=True))
    assert argument_lines(stored, ToolDisplay.of(tool)) == ['to: "t"', 'subject: "s"', 'body: "b"']
    # Arguments the model keeps beyond its fields (extra="allow") follow, as stored.
    assert argument_lines({**stored, "a_extra": 1}, ToolDisplay.of(tool))[-1] == "a_extra: 1"


def test_only_declared_and_built_in_secret_names_are_redacted():
    tool = Tool("deploy", lambda args, key: None, side_effect=True, redact=("pin",))
    args = {"run_token": "rt-1", "sql_auth": "peer", "pin": "4321", "password": "hunter2", "apiKey": "k",
            "Client-Secret": "c", "private_key": "p", "passwd": "w"}
    shown = dict(line.split(": ", 1) for line in argument_lines(args, ToolDisplay.of(tool)))
    assert shown["run_token"] == '"rt-1"' and shown["sql_auth"] == '"peer"'
    hidden = {k for k, v in shown.items() if v.startswith("[redacted: ")}
    assert hidden == {"pin", "password", "apiKey", '"Client-Secret"', "private_key", "passwd"}
    assert "4321" not in json.dumps(shown) and "hunter2" not in json.dumps(shown)


def test_a_redacted_value_shows_its_length_and_a_fingerprint():
    [line] = argument_lines({"password": "correct horse battery"}, ToolDisplay(secret_names=DEFAULT_REDACT_KEYS))
    assert re.fullmatch(r"password: \[redacted: 21 chars, #[0-9a-f]{8}\]", line)
    [other] = argument_lines({"password": {"a": 1}})
    assert re.fullmatch(r"password: \[redacted: object, 7 chars of JSON, #[0-9a-f]{8}\]", other)


def test_different_secrets_never_look_the_same_and_a_string_cannot_pose_as_one():
    one, two = (argument_lines({"token": value})[0] for value in ("sk-live-aaaa", "sk-live-aaab"))
    assert one != two
    posing = argument_lines({"note": "[redacted: 12 chars, #00000000]"})[0]
    assert posing == 'note: "[redacted: 12 chars, #00000000]"'  # quoted: a value, not a redaction


@given(json_values)
@settings(max_examples=300, deadline=None)
def test_every_value_is_shown_on_one_line_and_reads_back_exactly(value):
    text = literal(value)
    assert "\n" not in text and "`" not in text
    assert not any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in text)
    assert read_literal(text) == value


@given(st.lists(st.text(min_size=1, max_size=5000), min_size=1, max_size=6))
@settings(max_examples=100, deadline=None)
def test_code_sections_keep_every_character_and_never_split_an_escape(values):
    lines = argument_lines({f"k{i}": v + "&<>" for i, v in enumerate(values)})
    sections = code_sections(lines, 1000)
    assert sections is not None and all(len(s) <= MAX_SECTION_TEXT for s in sections)
    inside = [re.search(r"```\n(.*)\n```", s, re.DOTALL).group(1) for s in sections]  # type: ignore[union-attr]
    for part in inside:
        assert not re.search(r"&(?!(amp|lt|gt);)", part)
        assert not re.search(r"(?<!\\)(\\\\)*\\(u[0-9a-f]{0,3}|U[0-9a-f]{0,7})?$", part)
    assert code_section_lines(sections) == lines
