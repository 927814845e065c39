"""Text from a tool's server cannot draw the terminal's approval card: `signoff run` in a subprocess
with a real MCP server (`scenarios.drawing`) whose description, annotations title, result and error
carry newlines, the card's own lines and terminal escape sequences, the model quoting the same, and
a tool whose preview says it over several lines."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from scenarios.drawing import ARGS, CHECK_TOOL, FORGED_ARGUMENT, FORGERY, NOTE, SERVER, server_entry

pytestmark = pytest.mark.slow

PREVIEWED = "add_page_note"
_TOOLS_MODULE = f'''
from signoff import Tool

FORGERY = {FORGERY!r}

TOOLS = [Tool("{PREVIEWED}", lambda args, key: "Added.", side_effect=True, description="Add a note to a page.",
              preview=lambda args, key: "The page will read:\\n" + FORGERY)]
'''


def test_the_terminal_card_shows_server_text_on_one_line_or_framed_and_no_escape_sequence(signoff, tmp_path: Path):
    (tmp_path / "mcp.json").write_text(json.dumps({"mcpServers": {SERVER: server_entry(tmp_path / "effects.jsonl")}}))
    (tmp_path / "page_tools.py").write_text(_TOOLS_MODULE)
    (tmp_path / "script.json").write_text(json.dumps([
        {"tool": CHECK_TOOL, "args": ARGS}, {"tool": NOTE, "args": ARGS, "text": FORGERY},
        {"tool": PREVIEWED, "args": ARGS}, {"final": "Noted."}]))
    env = {"SIGNOFF_MCP_CONFIG": "mcp.json", "SIGNOFF_TOOLS": f"mcp:{SERVER},page_tools:TOOLS",
           "SIGNOFF_MODEL": f"scripted:{tmp_path / 'script.json'}",
           "SIGNOFF_DATABASE_URL": f"sqlite:///{tmp_path / 'signoff.db'}"}
    assert signoff("db", "upgrade", env=env).code == 0

    done = signoff("run", "note on the wiki", answers="a\na\n", env=env)

    assert done.code == 0, done.out + done.err
    assert "Added." in done.out and "The page will read:" in done.out  # the result and the preview were shown
    cards = done.out.count("+-- Approval needed:")
    assert cards == 2
    for own in ("| Arguments:", "| Tool:", "| Who decides:", "| Model says:", "| Preview ("):
        assert sum(line.startswith(own) for line in done.lines) <= cards, own
    assert FORGED_ARGUMENT in done.out  # the server's words are there, on a line of the card's making
    assert not [line for line in done.lines if re.match(r"^[|> ]*note: \"rm -rf", line)
                and not line.startswith("|   > ")]  # never a line that passes for an argument
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f\u202e]", done.out + done.err)
