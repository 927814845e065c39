"""The bot package's modules import one another without a cycle, and each imports on its own."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import signoff.bot

PACKAGE = Path(signoff.bot.__file__).parent
BOT = "signoff.bot"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join([BOT, *parts[:-1]] if parts[-1] == "__init__" else [BOT, *parts])


SOURCES = {module_name(path): path for path in PACKAGE.rglob("*.py")}
MODULES = set(SOURCES)


def bot_imports(module: str) -> set[str]:
    """The bot modules `module` imports anywhere in its source: at the top, in a function, under TYPE_CHECKING."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(SOURCES[module].read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0 and node.module, f"{module}: a relative import"
            # `from signoff.bot import blocks` imports the package and the module `signoff.bot.blocks`.
            found |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    # Importing `signoff.bot.x` runs the package's `__init__` first; that is not a cycle of ours.
    return (found & MODULES) - {module, BOT}


def first_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle in `graph` (module -> modules it imports), as a path back to its start; None if none."""
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return path[path.index(module):] + [module]
        if module in done:
            return None
        for imported in sorted(graph[module]):
            cycle = visit(imported, [*path, module])
            if cycle:
                return cycle
        done.add(module)
        return None

    return next((cycle for module in sorted(graph) if (cycle := visit(module, []))), None)


def test_the_cycle_finder_finds_a_cycle():
    assert first_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert first_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_bot_modules_import_one_another_without_a_cycle():
    graph = {module: bot_imports(module) for module in MODULES}
    assert graph["signoff.bot.app"] >= {"signoff.bot.listeners", "signoff.bot.workers"}  # the graph is read, not empty
    cycle = first_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_every_bot_module_imports_on_its_own_in_a_fresh_interpreter():
    # One interpreter per module: a cycle that only bites in one import order shows up here.
    probes = {module: subprocess.Popen([sys.executable, "-c", f"import {module}"], stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True) for module in sorted(MODULES)}
    failed = {}
    for module, probe in probes.items():
        _, err = probe.communicate(timeout=120)
        if probe.returncode != 0:
            failed[module] = err.strip().splitlines()[-1:]
    assert failed == {}
