"""MkDocs hook: a page shows figures a script wrote, never figures typed by hand.

A line `<!-- generated: BENCHMARKS.md bench:steps -->` in a page is replaced, as the site is built,
by the block that `bench/run` writes between `<!-- bench:steps -->` and `<!-- /bench:steps -->` in
BENCHMARKS.md (at the root of the repository). A block that is not there fails the build.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

MARKER = re.compile(r"^<!-- generated: (?P<file>[\w.-]+) (?P<block>[\w:-]+) -->$", re.MULTILINE)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    root = Path(config.config_file_path).parent

    def block(found: re.Match[str]) -> str:
        source = root / found["file"]
        name = found["block"]
        text = source.read_text(encoding="utf-8") if source.is_file() else ""
        inside = re.search(rf"^<!-- {re.escape(name)} -->\n(.*?)^<!-- /{re.escape(name)} -->$", text,
                           re.MULTILINE | re.DOTALL)
        if inside is None:
            raise PluginError(f"{page.file.src_path}: no block {name} in {found['file']}")
        return inside[1].rstrip("\n")

    return MARKER.sub(block, markdown)
