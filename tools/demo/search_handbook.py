"""`search_handbook`: read-only keyword search over the built-in support handbook."""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from signoff.tools.base import Tool

_WORD = re.compile(r"[a-z0-9]+")
_STOPWORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "for", "from", "how", "i", "in", "is",
    "it", "my", "of", "on", "or", "our", "the", "to", "what", "when", "with",
})


class SearchHandbookArgs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    query: str = Field(max_length=200, description="Words to look for, e.g. 'refund policy' or 'restart'.")
    limit: int = Field(3, ge=1, le=8, description="Most entries to return.")

    @field_validator("query")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("empty query")
        return value.strip()


@cache
def handbook() -> tuple[dict[str, Any], ...]:
    """The built-in handbook entries: id, title, text, tags."""
    text = resources.files(__package__).joinpath("handbook.json").read_text(encoding="utf-8")
    return tuple(json.loads(text))


def search(query: str, limit: int = 3) -> list[dict[str, str]]:
    """Entries matching `query`, best first; title and tag hits weigh more than body hits."""
    words = set(_WORD.findall(query.lower())) - _STOPWORDS
    scored = []
    for position, entry in enumerate(handbook()):
        title = set(_WORD.findall(entry["title"].lower()))
        tags = set(_WORD.findall(" ".join(entry["tags"]).lower()))
        body = set(_WORD.findall(entry["text"].lower()))
        score = sum(3 * (w in title) + 2 * (w in tags) + (w in body) for w in words)
        if score:
            scored.append((-score, position, entry))
    return [{"id": e["id"], "title": e["title"], "text": e["text"]} for _, _, e in sorted(scored)[:limit]]


def _search_handbook(args: dict[str, Any], key: str) -> dict[str, Any]:
    parsed = SearchHandbookArgs.model_validate(args)
    return {"query": parsed.query, "results": search(parsed.query, parsed.limit)}


def search_handbook_tool() -> Tool:
    """The read-only `search_handbook` tool."""
    return Tool(
        name="search_handbook",
        fn=_search_handbook,
        args_model=SearchHandbookArgs,
        description=(
            "Search the support handbook (refunds, email etiquette, escalation, restarts, shipping, "
            "damaged items, cancellations, data requests). Read-only; returns the best matching entries."
        ),
        timeout_s=5.0,
    )
