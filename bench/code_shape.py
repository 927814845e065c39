"""`python bench/code_shape.py [--root DIR] [--json]`: the library's shape, read from its source.

Reads runtime/, tools/, bot/ and signoff/ under the root (not the tests; signoff/'s links to the other
three are not followed, so nothing counts twice) and reports, in Markdown or JSON:
module and function lengths against the style's limits; the loose mapping types (`dict[str, Any]`,
`Dict[str, Any]`, `Mapping[str, Any]`) wherever a type is written; lookups by string key
(`x["key"]` outside annotations and `Literal[...]`, and `.get`/`.pop`/`.setdefault` with a string
first argument); and event types written as bare strings (the string value of a `"type"` key in a
dict display or a mapping pattern, and a string compared with `x["type"]` or `x.get("type")` by
`==`, `!=`, `in`, `not in` or a `match` case). Every `"type"` counts, a Slack block's or a JSON
Schema's as much as an audit event's: the report lists them so that each can be told apart.
Function lengths run from the def line to the last line, decorators excluded.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import tokenize
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PACKAGES = ("runtime", "tools", "bot", "signoff")
MODULE_LIMIT, FUNCTION_LIMIT = 400, 40
LOOSE_MAPPINGS = ("dict", "Dict", "Mapping")
KEY_METHODS = frozenset({"get", "pop", "setdefault"})
TOP_KEYS = 20
"""How many of the most used string keys the Markdown report names (the JSON has them all)."""


def sources(root: Path) -> Iterator[Path]:
    for package in PACKAGES:
        yield from sorted(p for p in (root / package).rglob("*.py")
                          if "tests" not in p.relative_to(root).parts and not linked(root, p))


def linked(root: Path, path: Path) -> bool:
    """Whether `path` is reached through a symbolic link below `root` (signoff/runtime is runtime/)."""
    return any(folder.is_symlink() for folder in [path, *path.parents] if root in folder.parents)


def name_of(node: ast.AST) -> str | None:
    """`x` of `x` and of `a.b.x`."""
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def text_of(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def functions(node: ast.AST, prefix: str = "") -> Iterator[tuple[str, int]]:
    """Each function and method under `node`, nested ones too, as (qualified name, lines)."""
    for child in ast.iter_child_nodes(node):
        name = prefix
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            name = f"{prefix}{child.name}."
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            yield name[:-1], (child.end_lineno or child.lineno) - child.lineno + 1
        yield from functions(child, name)


def loose_mapping(node: ast.AST) -> str | None:
    """`dict[str, Any]` (or `Dict`, `Mapping`) as written, if `node` is one."""
    if not isinstance(node, ast.Subscript) or name_of(node.value) not in LOOSE_MAPPINGS:
        return None
    key_value = node.slice.elts if isinstance(node.slice, ast.Tuple) else []
    if len(key_value) == 2 and name_of(key_value[0]) == "str" and name_of(key_value[1]) == "Any":
        return f"{name_of(node.value)}[str, Any]"
    return None


def in_annotations(tree: ast.AST) -> set[int]:
    """The ids of every node inside an annotation: a subscript there is a type, not a lookup."""
    roots = [getattr(n, "annotation", None) for n in ast.walk(tree) if isinstance(n, ast.arg | ast.AnnAssign)]
    roots += [n.returns for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    return {id(inner) for root in roots if root is not None for inner in ast.walk(root)}


def string_key(node: ast.AST, annotations: set[int]) -> tuple[str, str] | None:
    """("subscript" or "call", the key) if `node` looks a value up by a string constant."""
    if isinstance(node, ast.Subscript) and id(node) not in annotations and name_of(node.value) != "Literal":
        key = text_of(node.slice)
        return ("subscript", key) if key is not None else None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in KEY_METHODS:
        key = text_of(node.args[0]) if node.args else None
        return ("call", key) if key is not None else None
    return None


def is_type_lookup(node: ast.AST) -> bool:
    """`x["type"]` or `x.get("type")`."""
    if isinstance(node, ast.Subscript):
        return text_of(node.slice) == "type"
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
            and bool(node.args) and text_of(node.args[0]) == "type")


def strings_in(node: ast.AST) -> list[str]:
    """The string constants of `node`: itself, or the elements of a tuple, list or set display."""
    elements = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
    return [text for element in elements if (text := text_of(element)) is not None]


def case_strings(pattern: ast.pattern | None) -> list[str]:
    """The string constants a `match` case pattern compares with: `"a"`, `"a" | "b"`, `"a" as x`."""
    if isinstance(pattern, ast.MatchOr):
        return [text for inner in pattern.patterns for text in case_strings(inner)]
    if isinstance(pattern, ast.MatchAs):
        return case_strings(pattern.pattern)
    return strings_in(pattern.value) if isinstance(pattern, ast.MatchValue) else []


def event_types(node: ast.AST) -> list[str]:
    """The event types `node` writes as bare strings."""
    if isinstance(node, ast.Dict):
        return [t for k, v in zip(node.keys, node.values, strict=True) if text_of(k) == "type" and (t := text_of(v))]
    if isinstance(node, ast.MatchMapping):
        return [t for k, p in zip(node.keys, node.patterns, strict=True) if text_of(k) == "type" for t in case_strings(p)]
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        left, right = node.left, node.comparators[0]
        if isinstance(node.ops[0], ast.Eq | ast.NotEq | ast.In | ast.NotIn):
            return strings_in(right) if is_type_lookup(left) else strings_in(left) if is_type_lookup(right) else []
    if isinstance(node, ast.Match) and is_type_lookup(node.subject):
        return [text for case in node.cases for text in case_strings(case.pattern)]
    return []


def measure(root: Path) -> dict[str, Any]:
    modules: dict[str, int] = {}
    long_functions: list[dict[str, Any]] = []
    loose: Counter[str] = Counter({f"{name}[str, Any]": 0 for name in LOOSE_MAPPINGS})
    lookups: Counter[str] = Counter()
    keys: Counter[str] = Counter()
    events: Counter[str] = Counter()
    for path in sources(root):
        where = path.relative_to(root).as_posix()
        with tokenize.open(path) as file:  # the encoding the module declares
            text = file.read()
        modules[where] = len(text.splitlines())
        tree = ast.parse(text, filename=where)
        long_functions += [{"path": where, "name": name, "lines": lines}
                           for name, lines in functions(tree) if lines > FUNCTION_LIMIT]
        annotations = in_annotations(tree)
        for node in ast.walk(tree):
            loose.update(filter(None, [loose_mapping(node)]))
            if (found := string_key(node, annotations)) is not None:
                lookups[found[0]] += 1
                keys[found[1]] += 1
            events.update(event_types(node))
    return summary(root, modules, long_functions, loose, lookups, keys, events)


def summary(root: Path, modules: dict[str, int], long_functions: list[dict[str, Any]], loose: Counter[str],
            lookups: Counter[str], keys: Counter[str], events: Counter[str]) -> dict[str, Any]:
    longest = max(modules, key=lambda where: modules[where], default=None)
    return {
        "root": str(root),
        "modules": {"count": len(modules), "lines": sum(modules.values()),
                    "max": {"path": longest, "lines": modules[longest] if longest else 0},
                    "over_limit": sorted(({"path": p, "lines": n} for p, n in modules.items() if n > MODULE_LIMIT),
                                        key=lambda m: -m["lines"])},
        "functions": {"over_limit": sorted(long_functions, key=lambda f: -f["lines"])},
        "loose_mappings": dict(loose),
        "string_keys": {"subscripts": lookups["subscript"], "calls": lookups["call"], "total": sum(lookups.values()),
                        "distinct": len(keys), "keys": dict(keys.most_common())},
        "event_types": {"distinct": len(events), "types": dict(sorted(events.items()))},
    }


def markdown(shape: dict[str, Any]) -> str:
    modules, functions, keys, events = (shape[k] for k in ("modules", "functions", "string_keys", "event_types"))
    folders = ", ".join(f"{package}/" for package in PACKAGES[:-1]) + f" and {PACKAGES[-1]}/"
    lines = [f"# Code shape of {folders}", "",
             f"- Modules: {modules['count']}, {modules['lines']} lines; the longest: "
             f"`{modules['max']['path']}` ({modules['max']['lines']} lines)",
             f"- Modules over {MODULE_LIMIT} lines: {len(modules['over_limit'])}"]
    lines += [f"  - `{m['path']}` ({m['lines']})" for m in modules["over_limit"]]
    lines.append(f"- Functions over {FUNCTION_LIMIT} lines: {len(functions['over_limit'])}")
    lines += [f"  - `{f['path']}:{f['name']}` ({f['lines']})" for f in functions["over_limit"]]
    lines += [f"- `{name}`: {count}" for name, count in shape["loose_mappings"].items()]
    top = ", ".join(f"`{key}` {count}" for key, count in list(keys["keys"].items())[:TOP_KEYS])
    lines += [f"- String-key lookups: {keys['total']} ({keys['subscripts']} `x[\"key\"]`, {keys['calls']} "
              f"`.get/.pop/.setdefault(\"key\")`), {keys['distinct']} distinct keys; the most used: {top}",
              f"- Event types written as bare strings: {events['distinct']}: "
              + ", ".join(f"`{name}` {count}" for name, count in events["types"].items())]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/code_shape.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent,
                        help="the repository to measure (default: the one this script is in)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    args = parser.parse_args(argv)
    shape = measure(args.root.resolve())
    sys.stdout.write(json.dumps(shape, indent=2) + "\n" if args.json else markdown(shape))
    return 0


if __name__ == "__main__":
    sys.exit(main())
