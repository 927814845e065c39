"""Where figures go: JSON under bench/results/ and generated blocks inside BENCHMARKS.md.

Each benchmark owns the text between `<!-- bench:NAME -->` and `<!-- /bench:NAME -->`; the prose
around those blocks is written by people and left alone.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
MARKDOWN = ROOT / "BENCHMARKS.md"


def save_json(name: str, data: dict[str, Any], results: Path = RESULTS) -> Path:
    results.mkdir(parents=True, exist_ok=True)
    path = results / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    return path


def write_block(name: str, body: str, markdown: Path = MARKDOWN) -> None:
    """Replace the generated block `name` in the markdown file, appending it if it is not there yet."""
    begin, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    block = f"{begin}\n{body.strip()}\n{end}"
    text = markdown.read_text(encoding="utf-8") if markdown.exists() else "# Benchmarks\n"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text)
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    markdown.write_text(text, encoding="utf-8")


def table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def verdict(met: bool | None) -> str:
    return {True: "**met**", False: "**missed**", None: "not measured"}[met]
