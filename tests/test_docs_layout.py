"""The project layout guide (docs/architecture.md) names every module of the library, so a newcomer
who reads it finds each file of runtime/, tools/, bot/ and signoff/ there, with what it is for.

A module counts as named when its file name is written as code in the guide: `approval_rows.py`,
`adapters/approval_rows.py` or `approval_rows`. Package files (`__init__.py`, `__main__.py`) and the
migrations' versions are not modules a reader looks for; signoff/runtime, signoff/tools and
signoff/bot are links to the other parts, not modules of their own.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "architecture.md"
PARTS = ("runtime", "tools", "bot", "signoff")
NOT_MODULES = {"__init__.py", "__main__.py"}


def library_modules(root: Path) -> list[Path]:
    """Every module of the library under `root`, as a path relative to it."""
    modules = []
    for part in PARTS:
        for path in sorted((root / part).rglob("*.py")):
            where = path.relative_to(root)
            linked = any((root / Path(*where.parts[:depth])).is_symlink() for depth in range(1, len(where.parts)))
            if path.name in NOT_MODULES or linked or "tests" in where.parts:
                continue
            if "migrations" in where.parts and "versions" in where.parts:
                continue
            modules.append(where)
    return modules


def named_in(guide: str) -> set[str]:
    """The module names the guide writes as code: `x.py` anywhere in a code span, or a bare `x`."""
    spans = re.findall(r"`([^`]+)`", guide)  # a span may go on across a line break
    names = {name for span in spans for name in re.findall(r"(\w+)\.py\b", span)}
    return names | {span.strip() for span in spans if re.fullmatch(r"\w+", span.strip())}


def unnamed(guide: str, modules: list[Path]) -> list[str]:
    named = named_in(guide)
    return [module.as_posix() for module in modules if module.stem not in named]


def test_the_layout_guide_names_every_module_of_the_library():
    modules = library_modules(ROOT)
    assert {"runtime/adapters/approval_rows.py", "tools/registry.py", "bot/cli/audit.py",
            "signoff/client.py"} <= {module.as_posix() for module in modules}
    assert not any(module.parts[:2] == ("signoff", "runtime") for module in modules)  # a link, not a module

    assert unnamed(GUIDE.read_text(encoding="utf-8"), modules) == []


def test_a_module_the_guide_does_not_write_as_code_is_reported(tmp_path):
    for module in ("runtime/approval_rows.py", "runtime/adapters/db.py", "bot/words.py", "runtime/__init__.py",
                   "runtime/migrations/versions/0001_initial.py"):
        (tmp_path / module).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / module).write_text("", encoding="utf-8")
    (tmp_path / "signoff").mkdir()
    (tmp_path / "signoff" / "runtime").symlink_to(tmp_path / "runtime", target_is_directory=True)
    guide = "Approvals as rows (`adapters/approval_rows.py`), engines in `db`; the words of the bot."

    assert unnamed(guide, library_modules(tmp_path)) == ["bot/words.py"]
