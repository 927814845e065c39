"""MkDocs hook: the table of audit event types is the code's own list, never typed by hand.

A line `<!-- event types -->` in a page is replaced, as the site is built, by a table of every
event type and what it means (`signoff.runtime.events.EVENT_MEANINGS`).
"""

from __future__ import annotations

from typing import Any

from signoff.runtime.events import EVENT_MEANINGS

MARKER = "<!-- event types -->"


def event_table() -> str:
    rows = [f"| `{name}` | {meaning} |" for name, meaning in EVENT_MEANINGS.items()]
    return "\n".join(["| Event | What it records |", "|---|---|", *rows])


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return markdown.replace(MARKER, event_table()) if MARKER in markdown else markdown
