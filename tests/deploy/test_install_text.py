"""No shipped text tells people to install Signoff from a package index: it is published on none, so
`pip install signoff[...]` fails (or installs someone else's package). Installs are from a clone
(`pip install -e ".[postgres]"`) or a wheel built from it (`dist/signoff-<version>-...whl[postgres]`)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FROM_AN_INDEX = re.compile(r"""pip install\s+(?:-\S+\s+)*["']?signoff(?:\[|["'\s]|$)""", re.MULTILINE)


def offenders(paths: Iterable[Path]) -> list[str]:
    """`path:line: text` for each place that installs `signoff` by name."""
    found = []
    for path in paths:
        text = path.read_text(errors="replace")
        for match in FROM_AN_INDEX.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(f"{path.relative_to(ROOT)}:{line}: {text.splitlines()[line - 1].strip()}")
    return found


@pytest.mark.parametrize(("text", "by_name"), [
    ("pip install 'signoff[mcp]'", True), ('pip install "signoff[postgres,openai]"', True),
    ("pip install -U signoff", True), ("pip install signoff[otel] mcp-server-git", True),
    ('pip install -e ".[postgres]"', False), ('pip install "dist/signoff-0.1.0-py3-none-any.whl[postgres]"', False),
    ("pip install signoff-git-tools", False),
])
def test_the_pattern_tells_an_install_by_name_from_one_from_a_clone_or_a_wheel(text, by_name):
    assert bool(FROM_AN_INDEX.search(f"before\n{text}\n")) is by_name


def shipped_texts() -> list[Path]:
    deploy = [p for p in (ROOT / "deploy").rglob("*") if p.is_file()]
    return [*deploy, *(ROOT / "docs").glob("*.md"), ROOT / "README.md", ROOT / ".env.example"]


def test_no_guide_or_deploy_file_installs_signoff_from_an_index():
    assert offenders(shipped_texts()) == []


def test_no_error_hint_in_the_code_installs_signoff_from_an_index():
    code = [p for folder in ("bot", "tools", "runtime", "signoff") for p in (ROOT / folder).glob("**/*.py")
            if not p.is_symlink()]
    assert offenders(code) == []
