"""What an MCP tool's result becomes for the model: its structured content when it has some, else its
content blocks as text (one text block is the text itself; JSON text is read as JSON)."""

from __future__ import annotations

import json
from typing import Any


def shaped(structured: Any, blocks: list[dict[str, Any]]) -> Any:
    """The result a model and the channel see, from `structuredContent` and the content blocks
    (each as the JSON the server sent)."""
    if structured is not None:
        return structured
    items = [_item(block) for block in blocks]
    if not items:
        return None
    if len(items) == 1 and isinstance(items[0], str):
        return _json_or_text(items[0])
    return items


def error_text(blocks: list[dict[str, Any]]) -> str:
    """The server's own words for an `isError` result."""
    texts = [str(block.get("text", "")).strip() for block in blocks if block.get("type") == "text"]
    return "\n".join(text for text in texts if text) or "the tool reported an error without saying why"


def _item(block: dict[str, Any]) -> Any:
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind == "resource":
        resource = block.get("resource") or {}
        if "text" in resource:
            return {"resource": resource.get("uri"), "text": resource["text"]}
        return {"resource": resource.get("uri"), "mimeType": resource.get("mimeType"),
                "omitted": "binary content is not shown"}
    if kind == "resource_link":
        return {"link": block.get("uri"), "name": block.get("name")}
    if kind in ("image", "audio"):
        return {"type": kind, "mimeType": block.get("mimeType"),
                "omitted": f"{len(str(block.get('data', '')))} characters of base64 are not shown"}
    return {"type": kind, "omitted": "content of a kind Signoff does not show"}


def _json_or_text(text: str) -> Any:
    """Text that is a JSON object or list, as that value; any other text as itself."""
    if text.lstrip()[:1] in ("{", "["):
        try:
            return json.loads(text)
        except ValueError:
            pass
    return text
