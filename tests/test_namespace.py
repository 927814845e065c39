"""Signoff lives under `signoff.*`: a user's own `tools/`, `bot/` or `runtime/` package changes nothing.

Before, the packages were installed as the bare names `runtime`, `tools` and `bot`, and a project
with its own `tools/` package on PYTHONPATH broke `signoff --help`, `signoff check` and the
tool example of the guide to writing tools.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BARE = {"runtime", "tools", "bot"}


def guide_tool_example() -> str:
    """The "Writing your own tools" example (docs/tools.md), with its remote deployer replaced by a local one."""
    guide = (ROOT / "docs" / "tools.md").read_text(encoding="utf-8")
    [example] = [block for block in re.findall(r"```python\n(.*?)```", guide, re.S) if "# mycompany/ops.py" in block]
    deployer = ("class _Deployer:\n"
                "    def restart(self, service, idempotency_key):\n"
                "        return type('R', (), {'refused': False, 'id': 'dep-1'})()\n"
                "deployer = _Deployer()\n")
    return deployer + example


def user_project(tmp_path: Path) -> Path:
    """A project laid out the common way: its own `tools/`, `bot/` and `runtime/` packages, and its toolset."""
    for package in BARE:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text(f"OWNER = 'the user'  # {package}\n", encoding="utf-8")
    (tmp_path / "mycompany").mkdir()
    (tmp_path / "mycompany" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "mycompany" / "ops.py").write_text(guide_tool_example(), encoding="utf-8")
    return tmp_path


def run(project: Path, *command: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SIGNOFF_", "SLACK_"))}
    return subprocess.run(list(command), cwd=project, capture_output=True, text=True, timeout=120,
                          env={**clean, "PYTHONPATH": str(project), **(env or {})})


def signoff_script() -> str:
    script = shutil.which("signoff", path=str(Path(sys.executable).parent))
    assert script, "the console script `signoff` is installed next to this interpreter"
    return script


def test_a_users_own_tools_bot_and_runtime_packages_break_nothing(tmp_path):
    project = user_project(tmp_path)

    helped = run(project, signoff_script(), "--help")
    assert helped.returncode == 0, helped.stderr
    assert "Usage: signoff" in helped.stdout

    checked = run(project, signoff_script(), "check",
                  env={"SIGNOFF_TOOLS": "demo,mycompany.ops:TOOLS", "SIGNOFF_MODEL": "scripted:demo"})
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "ok tools: demo,mycompany.ops:TOOLS -> " in checked.stdout
    assert checked.stdout.rstrip().splitlines()[1].endswith(", restart_service")

    probe = ("from signoff import Agent, Budget, Tool, ToolFailed\n"
             "import mycompany.ops, runtime, tools, bot\n"
             "assert [t.name for t in mycompany.ops.TOOLS] == ['restart_service']\n"
             "assert isinstance(mycompany.ops.TOOLS[0], Tool)\n"
             "print(runtime.OWNER, tools.OWNER, bot.OWNER)\n")
    imported = run(project, sys.executable, "-c", probe)
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.split() == ["the", "user"] * 3


def test_nothing_of_signoff_is_importable_under_a_bare_name(tmp_path):
    probe = "import importlib.util\nprint([n for n in ('runtime', 'tools', 'bot') if importlib.util.find_spec(n)])"
    found = run(tmp_path, sys.executable, "-c", probe, env={"PYTHONPATH": ""})
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == "[]"


def bare_imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names if alias.name.split(".")[0] in BARE]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names += [node.module] if node.module.split(".")[0] in BARE else []
    return names


def test_our_own_code_imports_only_the_signoff_names():
    # One bare import in the repository would load a second copy of a module (and of its state).
    folders = ["runtime", "tools", "bot", "scenarios", "bench", "tests"]
    wrong = [f"{path.relative_to(ROOT)}: {name}" for folder in folders
             for path in sorted((ROOT / folder).rglob("*.py")) if ".venv" not in path.parts
             for name in bare_imports(path)]
    assert wrong == []


def test_the_wheel_installs_only_the_signoff_package_with_real_files(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for folder in ("runtime", "tools", "bot", "signoff"):
        shutil.copytree(ROOT / folder, source / folder, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp_path), "."],
                           cwd=source, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    [wheel] = tmp_path.glob("signoff-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        top_level = archive.read(next(n for n in names if n.endswith(".dist-info/top_level.txt"))).decode()
        infos = {info.filename: info for info in archive.infolist()}
    assert top_level.split() == ["signoff"]
    assert {name.split("/")[0] for name in names} == {"signoff", wheel.name.split("-py")[0] + ".dist-info"}
    # The links in signoff/ become the files they point to, data files included.
    for expected in ("signoff/runtime/agent.py", "signoff/tools/base.py", "signoff/bot/settings.py",
                     "signoff/runtime/migrations/env.py", "signoff/runtime/models/prices.json"):
        assert expected in infos and infos[expected].file_size > 0, expected
