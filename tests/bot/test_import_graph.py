"""The bot package's modules import one another without a cycle, each imports on its own, and the
imports go one way: the shared modules (settings, wiring, words, arguments) import neither surface,
the Slack edge nothing of the CLI, and the CLI the Slack edge only inside a function (`signoff serve`).
Stores are built in one place: of the bot, only the composition root (wiring) builds one or imports an
adapter, and the runtime's pure core imports no adapter at all."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import signoff.bot
import signoff.runtime
import signoff.runtime.ports

PACKAGE = Path(signoff.bot.__file__).parent
BOT = "signoff.bot"
SLACK, CLI = f"{BOT}.slack", f"{BOT}.cli"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join([BOT, *parts[:-1]] if parts[-1] == "__init__" else [BOT, *parts])


SOURCES = {module_name(path): path for path in PACKAGE.rglob("*.py")}
MODULES = set(SOURCES)


def import_names(node: ast.Import | ast.ImportFrom, module: str) -> set[str]:
    """The module names one import statement names: `from a import b` names `a` and `a.b` (b may be a module)."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names}
    assert node.level == 0 and node.module, f"{module}: a relative import"
    return {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}


def imports_by_place(module: str, source: str) -> tuple[set[str], set[str]]:
    """The bot modules `source` (the text of `module`) imports: (when it is imported, at the top,
    in a class or under TYPE_CHECKING; only when one of its functions runs)."""
    at_import: set[str] = set()
    in_functions: set[str] = set()

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.Import | ast.ImportFrom):
                (in_functions if inside else at_import).update(import_names(child, module) & MODULES)
            visit(child, inside)

    visit(ast.parse(source), in_function=False)
    return at_import, in_functions - at_import


def bot_imports(module: str) -> set[str]:
    """The bot modules `module` imports anywhere in its source."""
    at_import, in_functions = imports_by_place(module, SOURCES[module].read_text(encoding="utf-8"))
    # Importing `signoff.bot.x` runs the package's `__init__` first; that is not a cycle of ours.
    return (at_import | in_functions) - {module, BOT}


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


# -- which way imports go ------------------------------------------------------------------------


def side(module: str) -> str:
    """`slack`, `cli`, or `shared` (the `signoff.bot` package and its top-level modules)."""
    for package, name in ((SLACK, "slack"), (CLI, "cli")):
        if module == package or module.startswith(package + "."):
            return name
    return "shared"


FORBIDDEN = {"shared": {"slack", "cli"}, "slack": {"cli"}, "cli": set()}
"""What each side may never import, not even inside a function."""
LAZY_ONLY = {"cli": {"slack"}}
"""What a side may import only inside a function, so importing the side does not import it."""


def direction_problems(module: str, source: str) -> list[str]:
    """Each import in `source` (the text of `module`) that goes the wrong way, as `module -> imported`."""
    at_import, in_functions = imports_by_place(module, source)
    mine = side(module)
    problems = [f"{module} -> {name}" for name in sorted(at_import | in_functions) if side(name) in FORBIDDEN[mine]]
    problems += [f"{module} -> {name} (outside a function)" for name in sorted(at_import)
                 if side(name) in LAZY_ONLY.get(mine, set())]
    return problems


def test_the_cycle_finder_finds_a_cycle():
    assert first_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert first_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_bot_modules_import_one_another_without_a_cycle():
    graph = {module: bot_imports(module) for module in MODULES}
    assert graph[f"{SLACK}.app"] >= {f"{SLACK}.listeners", f"{SLACK}.workers"}  # the graph is read, not empty
    cycle = first_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_direction_check_catches_each_wrong_way():
    assert direction_problems(f"{BOT}.words", "from signoff.bot.slack.blocks import safe") == [
        f"{BOT}.words -> {SLACK}.blocks"]
    assert direction_problems(f"{BOT}.wiring", "def f():\n    import signoff.bot.cli.console\n") == [
        f"{BOT}.wiring -> {CLI}.console"]
    assert direction_problems(f"{SLACK}.notifier", "def f():\n    from signoff.bot.cli import rendering\n") == [
        f"{SLACK}.notifier -> {CLI}", f"{SLACK}.notifier -> {CLI}.rendering"]
    assert direction_problems(f"{CLI}.ops", "from signoff.bot.slack.serve import serve") == [
        f"{CLI}.ops -> {SLACK}.serve (outside a function)"]
    assert direction_problems(f"{CLI}.ops", "class C:\n    from signoff.bot.slack import serve\n") == [
        f"{CLI}.ops -> {SLACK} (outside a function)", f"{CLI}.ops -> {SLACK}.serve (outside a function)"]
    lazy = "def serve():\n    from signoff.bot.slack.serve import serve\n"
    assert direction_problems(f"{CLI}.ops", lazy) == []
    assert direction_problems(f"{SLACK}.app", "from signoff.bot.words import is_slack_user") == []
    assert direction_problems(f"{CLI}.rendering", "from signoff.bot.arguments import argument_lines") == []


def test_shared_modules_import_neither_surface_and_slack_never_imports_the_cli():
    assert {side(m) for m in MODULES} == {"shared", "slack", "cli"}  # all three sides are read
    problems = [p for module in sorted(MODULES)
                for p in direction_problems(module, SOURCES[module].read_text(encoding="utf-8"))]
    assert problems == []


def test_the_cli_imports_the_slack_edge_only_for_signoff_serve():
    lazily = {name for module in MODULES if side(module) == "cli"
              for name in bot_imports(module) if side(name) == "slack"}
    assert lazily == {f"{SLACK}.serve"}
    probe = subprocess.run([sys.executable, "-c", "import sys, signoff.bot.cli; "
                            "print(sorted(m for m in sys.modules if m.startswith(('slack_bolt', 'signoff.bot.slack'))))"],
                           capture_output=True, text=True, timeout=120, check=True)
    assert probe.stdout.strip() == "[]"  # so `signoff --help` starts without Bolt


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


# -- where stores are built ----------------------------------------------------------------------

COMPOSITION_ROOT = f"{BOT}.wiring"
ADAPTERS = "signoff.runtime.adapters"
STORE_BUILDERS = frozenset({"SqlStore", "MemoryStore", "make_engine", "create_engine"})
"""What builds a store, or the engine under one."""
RUNTIME = Path(signoff.runtime.__file__).parent
OUTSIDE_THE_CORE = {"adapters", "migrations"}
"""The runtime's packages that are not its pure core: the stores and the schema's migrations."""
SEQUENCING_IO = {"signoff.runtime.runner", "signoff.runtime.worker", "signoff.runtime.telling"}
"""The runtime's modules that sequence I/O, through the store's Protocols (see tests/runtime/test_purity.py)."""


def store_problems(module: str, source: str) -> list[str]:
    """Each import of an adapter and each store built in `source` (the text of `module`), anywhere in it."""
    problems = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import | ast.ImportFrom):
            adapters = sorted(n for n in import_names(node, module) if n == ADAPTERS or n.startswith(ADAPTERS + "."))
            problems += [f"{module} imports {adapters[0]}"] if adapters else []
        elif isinstance(node, ast.Call):
            called = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            problems += [f"{module} calls {called}"] if called in STORE_BUILDERS else []
    return problems


def core_sources() -> dict[str, Path]:
    """The runtime's pure core, by module name: all of it but its adapters, migrations and the modules
    that sequence I/O."""
    found = {}
    for path in sorted(RUNTIME.rglob("*.py")):
        parts = path.relative_to(RUNTIME).with_suffix("").parts
        name = ".".join(["signoff.runtime", *(parts[:-1] if parts[-1] == "__init__" else parts)])
        if parts[0] not in OUTSIDE_THE_CORE and name not in SEQUENCING_IO:
            found[name] = path
    return found


def test_the_store_check_catches_each_adapter_import_and_each_store_built():
    assert store_problems("m", "from signoff.runtime.adapters.db import masked, sqlite_file") == [
        "m imports signoff.runtime.adapters.db"]
    assert store_problems("m", "def f():\n    from signoff.runtime import adapters\n") == [
        "m imports signoff.runtime.adapters"]
    assert store_problems("m", "if TYPE_CHECKING:\n    import signoff.runtime.adapters.sql\n") == [
        "m imports signoff.runtime.adapters.sql"]
    assert store_problems("m", "store = SqlStore(make_engine(url))") == ["m calls SqlStore", "m calls make_engine"]
    assert store_problems("m", "store = memory.MemoryStore()") == ["m calls MemoryStore"]
    assert store_problems("m", "from signoff.bot.wiring import open_store\nstore = open_store(url)") == []
    assert store_problems("m", "from signoff.runtime.ports import Store") == []


def test_only_the_composition_root_builds_a_store_or_imports_an_adapter():
    root = store_problems(COMPOSITION_ROOT, SOURCES[COMPOSITION_ROOT].read_text(encoding="utf-8"))
    assert f"{COMPOSITION_ROOT} calls SqlStore" in root  # the check reads the modules it is given
    problems = [p for module in sorted(MODULES - {COMPOSITION_ROOT})
                for p in store_problems(module, SOURCES[module].read_text(encoding="utf-8"))]
    assert problems == []


def test_the_pure_core_imports_no_adapter():
    core = core_sources()
    assert {"signoff.runtime.loop", "signoff.runtime.agent", "signoff.runtime.ports"} <= set(core)
    assert not set(core) & SEQUENCING_IO and not any(".adapters" in name for name in core)
    problems = [p for module, path in core.items() for p in store_problems(module, path.read_text(encoding="utf-8"))]
    assert problems == []


# -- what the notifiers read ------------------------------------------------------------------------

NOTIFIERS = (f"{BOT}.slack.notifier", f"{BOT}.slack.glass_cards", f"{BOT}.cli.notifier")
"""The modules that tell people: they draw what the runner hands them (`runtime.cards.Card`)."""
STORE_METHODS = frozenset(name for name in dir(signoff.runtime.ports.Store)
                          if not name.startswith("_") and callable(getattr(signoff.runtime.ports.Store, name)))


CLOCKS = frozenset({"datetime", "time"})
"""Modules whose `now` is not the store's."""


def store_calls(source: str) -> list[str]:
    """Each method of the `Store` port that `source` calls, by name (`x.list_grants(...)`)."""
    return sorted({node.func.attr for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
                   and isinstance(node.func, ast.Attribute) and node.func.attr in STORE_METHODS
                   and not (isinstance(node.func.value, ast.Name) and node.func.value.id in CLOCKS)})


def test_the_store_read_check_catches_a_read():
    assert {"list_grants", "receipt_of", "get_approval"} <= STORE_METHODS
    assert store_calls("grant = self.reads.list_grants(live=False)\nx = store.receipt_of(approval_id=a)") == [
        "list_grants", "receipt_of"]
    assert store_calls("self._update(channel, ts, message)\nself._post(channel, message)") == []
    assert store_calls("at = datetime.now(UTC)") == [] and store_calls("at = self.store.now()") == ["now"]


def test_no_notifier_reads_the_store():
    assert {module: calls for module in NOTIFIERS
            if (calls := store_calls(SOURCES[module].read_text(encoding="utf-8")))} == {}
