"""Text from a tool's server cannot draw the approval card, end to end over signed HTTP: a real MCP
server (`scenarios.drawing`, a subprocess) and an HTTP tools file whose descriptions, titles,
previews, results and errors carry newlines, code fences, the card's headings, a broadcast, a
mention, a link and terminal escapes. Every card, App Home tab, modal and thread message shows
that text on one line or inside a code block it cannot close."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from bot_fakes import final, tool_call
from slack_harness import buttons

from scenarios.drawing import (
    ARGS,
    CHECK_TOOL,
    FORGED_ARGUMENT,
    FORGERY,
    NOTE,
    RENDER_TOOL,
    SERVER,
    drawings,
    headings,
    mrkdwn_texts,
    server_entry,
    surfaces,
)
from signoff.bot.slack.blocks import APPROVE_ACTION, VIEW_ARGS_ACTION
from signoff.tools.base import Tool
from signoff.tools.mcp import McpServers, load_config
from signoff.tools.registry import load_toolsets

pytestmark = pytest.mark.slow

APPROVER = "U0LEAD"


class ServerTools:
    """What the harness serves in place of the ledger's tools."""

    def __init__(self, tools: dict[str, Tool]) -> None:
        self._tools = tools

    def tools(self) -> dict[str, Tool]:
        return dict(self._tools)


@pytest.fixture
def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServerTools]:
    """The drawing server's tools, its note previewed by its `render_note` (`preview`) or its failing
    `check_note` (`failed-preview`); or an HTTP tools file's (`http`)."""
    if request.param == "http":
        yield ServerTools(load_toolsets("http:wiki", outbox=tmp_path / "outbox", http_config=_http_file(tmp_path)))
        return
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {SERVER: server_entry(tmp_path / "effects.jsonl")}}))
    servers = McpServers(load_config(config, {}))
    try:
        tools = load_toolsets(f"mcp:{SERVER}", outbox=tmp_path / "outbox", mcp=servers)
        yield ServerTools(previewed_by(tools, RENDER_TOOL if request.param == "preview" else CHECK_TOOL))
    finally:
        servers.close()


def previewed_by(tools: dict[str, Tool], reader: str) -> dict[str, Tool]:
    """The note tool previewed by the server's `reader` tool: its answer, several times over (longer
    than a card shows, so *View full preview* opens the modal), or its error."""
    read = tools[reader]
    return {**tools, NOTE: replace(tools[NOTE], preview=lambda args, key: "\n".join([read.fn(args, key)] * 8))}


def _http_file(tmp_path: Path) -> Path:
    path = tmp_path / "apis.json"
    schema = {"type": "object", "properties": {"note": {"type": "string"}}, "required": ["note"]}
    path.write_text(json.dumps({"apis": {"wiki": {"base_url": "http://127.0.0.1:9", "tools": [
        {"name": "add_note", "method": "POST", "path": "/notes", "description": FORGERY, "args": schema}]}}}))
    return path


def drawn_anywhere(slack: Any) -> list[str]:
    """What server text drew on any message or view Slack was sent."""
    return [f"{method}: {problem}" for method, blocks in surfaces(slack) for problem in drawings(blocks)]


@pytest.mark.parametrize("ledger", ["preview", "failed-preview"], indirect=True)
def test_an_mcp_servers_text_draws_nothing_on_the_card_home_modal_or_thread(signoff, slack, ledger):
    signoff.script.decisions = [tool_call(CHECK_TOOL, **ARGS), {**tool_call(NOTE, **ARGS), "text": FORGERY},
                                final("Noted.")]
    assert signoff.command("note on the wiki that the front page needs tidying").status == 200
    card = signoff.approval_message()
    assert any(FORGED_ARGUMENT in text for text in mrkdwn_texts(card["blocks"]))  # there, on one line
    assert drawings(card["blocks"]) == []
    assert headings(mrkdwn_texts(card["blocks"]), "Arguments") == 1

    signoff.home_opened(APPROVER)
    assert drawings(slack.views[APPROVER]["blocks"]) == []
    if VIEW_ARGS_ACTION in buttons(card):  # *View full preview*: the modal shows the description too
        signoff.click(card, VIEW_ARGS_ACTION, APPROVER)
        assert drawings(slack.modal()["blocks"]) == []

    assert signoff.click(card, APPROVE_ACTION, APPROVER).status == 200
    signoff.settle()
    assert signoff.only_run().status == "done"
    assert "Added." in json.dumps(slack.calls_to("chat.postMessage"))  # the result, forgery and all, in the thread
    assert drawn_anywhere(slack) == []


@pytest.mark.parametrize("ledger", ["http"], indirect=True)
def test_an_http_tools_files_description_draws_nothing_on_the_card_or_home(signoff, slack, ledger):
    signoff.script.decisions = [tool_call("http__wiki__add_note", **ARGS), final("Noted.")]
    assert signoff.command("note on the wiki").status == 200
    card = signoff.approval_message()
    assert any(FORGED_ARGUMENT in text for text in mrkdwn_texts(card["blocks"]))
    signoff.home_opened(APPROVER)
    assert drawn_anywhere(slack) == []
