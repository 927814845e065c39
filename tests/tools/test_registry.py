from __future__ import annotations

import itertools
import sys
import textwrap

import pytest

from signoff.tools.base import Tool
from signoff.tools.registry import ToolsetError, describe_tools, load_toolsets

DEMO_NAMES = ["search_handbook", "lookup_orders", "send_email", "issue_refund"]
_numbers = itertools.count()


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """Write Python source as a fresh importable module and return its name."""
    monkeypatch.syspath_prepend(str(tmp_path))
    names = []

    def write(source: str) -> str:
        name = f"signoff_user_tools_{next(_numbers)}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        names.append(name)
        return name

    yield write
    for name in names:
        sys.modules.pop(name, None)


TOOLS_SOURCE = """
    from signoff.tools import Tool

    def restart(args, key):
        return {"restarted": args["service"], "key": key}

    TOOLS = [
        Tool("restart_service", restart, side_effect=True, idempotent=True, description="Restart a service."),
        Tool("ping", lambda args, key: "pong", description="Check the bot is alive."),
    ]

    def make_tools():
        return TOOLS[1:]

    class Registry:
        TOOLS = TOOLS[:1]
"""


def problems_of(spec: str, outbox) -> list[str]:
    with pytest.raises(ToolsetError) as info:
        load_toolsets(spec, outbox=outbox)
    return info.value.problems


def test_demo_loads_the_four_demo_tools_without_touching_the_outbox(tmp_path):
    outbox = tmp_path / "outbox"
    tools = load_toolsets("demo", outbox=outbox)
    assert list(tools) == DEMO_NAMES
    assert all(isinstance(tool, Tool) and tool.name == name for name, tool in tools.items())
    assert not outbox.exists()


def test_a_user_module_list_loads_next_to_the_demo(user_module, tmp_path):
    name = user_module(TOOLS_SOURCE)
    tools = load_toolsets(f" demo , {name}:TOOLS ", outbox=tmp_path)
    assert list(tools) == [*DEMO_NAMES, "restart_service", "ping"]
    assert tools["restart_service"].fn({"service": "api"}, "run-1:2") == {"restarted": "api", "key": "run-1:2"}


def test_a_callable_is_called_and_a_dotted_attribute_is_followed(user_module, tmp_path):
    name = user_module(TOOLS_SOURCE)
    assert list(load_toolsets(f"{name}:make_tools", outbox=tmp_path)) == ["ping"]
    assert list(load_toolsets(f"{name}:Registry.TOOLS", outbox=tmp_path)) == ["restart_service"]


@pytest.mark.parametrize("spec", ["", "   ", ",", " , ,"])
def test_an_empty_spec_is_a_config_error(spec, tmp_path):
    [problem] = problems_of(spec, tmp_path)
    assert "no toolsets named" in problem


def test_a_stray_comma_is_named(tmp_path):
    assert problems_of("demo,,", tmp_path) == [
        "toolset entry 2 of 'demo,,' is empty (a stray comma?)",
        "toolset entry 3 of 'demo,,' is empty (a stray comma?)",
    ]


def test_a_missing_module_is_named(tmp_path):
    [problem] = problems_of("demo,no_such_package.tools:TOOLS", tmp_path)
    assert problem.startswith("toolset 'no_such_package.tools:TOOLS': no module named 'no_such_package'")


def test_a_module_whose_own_import_fails_is_told_apart_from_a_missing_one(user_module, tmp_path):
    missing_dependency = user_module("import no_such_dependency_xyz\nTOOLS = []\n")
    broken = user_module("raise RuntimeError('database password missing')\n")
    problems = problems_of(f"{missing_dependency}:TOOLS,{broken}:TOOLS", tmp_path)
    assert problems == [
        f"toolset '{missing_dependency}:TOOLS': importing '{missing_dependency}' failed: "
        "No module named 'no_such_dependency_xyz'",
        f"toolset '{broken}:TOOLS': importing '{broken}' raised RuntimeError: database password missing",
    ]


def test_a_missing_attribute_is_named(user_module, tmp_path):
    name = user_module(TOOLS_SOURCE)
    assert problems_of(f"{name}:TOOLZ", tmp_path) == [f"toolset '{name}:TOOLZ': '{name}' has no attribute 'TOOLZ'"]


@pytest.mark.parametrize("entry", ["tools", "tools.demo", "my tools:TOOLS", "pkg.mod:", ":TOOLS", "pkg..mod:X"])
def test_a_malformed_entry_is_named(entry, tmp_path):
    [problem] = problems_of(entry, tmp_path)
    assert problem.startswith(f"toolset {entry!r}: ")


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("TOOLS = {'ping': None}", "expected a list of Tool, got dict"),
        ("TOOLS = 'ping'", "expected a list of Tool, got str"),
        ("TOOLS = []", "the list of tools is empty"),
        (
            "from tools import Tool\nTOOLS = [Tool('ok', print), {'name': 'x'}, print]",
            "not a Tool: item 1 is dict, item 2 is builtin_function_or_method",
        ),
        ("def TOOLS():\n    raise KeyError('OPS_TOKEN')", "calling TOOLS() raised KeyError: 'OPS_TOKEN'"),
        ("def TOOLS():\n    return None", "expected a list of Tool, got NoneType"),
    ],
)
def test_something_other_than_a_list_of_tools_is_named(user_module, tmp_path, source, expected):
    name = user_module(source)
    assert problems_of(f"{name}:TOOLS", tmp_path) == [f"toolset '{name}:TOOLS': {expected}"]


def test_a_tool_defined_in_two_sets_is_named_with_both(user_module, tmp_path):
    name = user_module("""
        from signoff.tools import Tool
        TOOLS = [Tool("send_email", lambda args, key: None, side_effect=True)]
    """)
    assert problems_of(f"demo,{name}:TOOLS", tmp_path) == [
        f"tool 'send_email' is defined by both 'demo' and '{name}:TOOLS'"
    ]


def test_a_tool_defined_twice_in_one_set_and_a_set_listed_twice_are_named(user_module, tmp_path):
    name = user_module("""
        from signoff.tools import Tool
        TOOLS = [Tool("ping", lambda a, k: 1), Tool("ping", lambda a, k: 2)]
    """)
    assert problems_of(f"demo,{name}:TOOLS,demo", tmp_path) == [
        f"toolset '{name}:TOOLS' defines tool 'ping' twice",
        "toolset 'demo' is listed twice",
    ]


def test_every_problem_is_reported_at_once(user_module, tmp_path):
    name = user_module(TOOLS_SOURCE)
    problems = problems_of(f"nope_pkg:TOOLS,{name}:MISSING,demo,{name}:TOOLS,demo", tmp_path)
    assert len(problems) == 3
    assert [p.split(":")[0] for p in problems] == ["toolset 'nope_pkg", f"toolset '{name}", "toolset 'demo' is listed twice"]


def test_describe_tools_lists_each_tool_with_its_kind_and_timeout(tmp_path):
    listing = describe_tools(load_toolsets("demo", outbox=tmp_path)).splitlines()
    assert [line.split()[0] for line in listing] == DEMO_NAMES
    assert "read-only, 5s" in listing[0]
    assert "side effect, 10s" in listing[2]
    plain = Tool("deploy", lambda a, k: None, side_effect=True, timeout_s=None)
    assert describe_tools([plain]) == "deploy  side effect, not idempotent, no timeout  (no description)"
    assert describe_tools({}) == "(no tools)"
