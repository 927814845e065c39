"""The README is a newcomer's page: short, and every link in it leads somewhere that exists.

The guides in docs/ are checked by `mkdocs build --strict` in CI; the README is read on GitHub and
in the package's metadata, where nothing checks its links but this.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def prose(markdown: str) -> str:
    """The text outside fenced code blocks and inline code, where a link is a link."""
    without_fences = re.sub(r"^(`{3,}).*?^\1", "", markdown, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", without_fences)


def anchors(markdown: str) -> set[str]:
    """The anchors GitHub and MkDocs give the headings of a page."""
    headings = re.findall(r"^#{1,6} (.+)$", prose(markdown), re.M)
    slugs = (re.sub(r"[^\w\s-]", "", heading.replace("`", "")).strip().lower() for heading in headings)
    return {re.sub(r"[-\s]+", "-", slug) for slug in slugs}


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(prose(page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked.read_text(encoding="utf-8")):
            broken.append(f"{target}: no such heading")
    return broken


def guides() -> set[str]:
    """Every page of the documentation site, as mkdocs.yml's nav lists them."""
    def pages(entry: object) -> set[str]:
        if isinstance(entry, str):
            return {entry}
        values = entry.values() if isinstance(entry, dict) else entry if isinstance(entry, list) else []
        return set().union(*(pages(value) for value in values))
    return pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"])


def test_the_readme_links_every_guide_and_every_link_leads_somewhere_that_exists():
    linked = {target.partition("#")[0] for target in LINK.findall(prose(README.read_text(encoding="utf-8")))}
    assert {f"docs/{page}" for page in guides()} - linked == set()
    assert broken_links(README) == []


def test_the_readme_is_a_page_a_newcomer_reads_in_five_minutes():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines < 300, f"README.md has {lines} lines; move the detail into a guide in docs/"
