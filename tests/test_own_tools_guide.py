"""The guide's command line for one's own tool module in the current folder (docs/tools.md) works as
it says, and without `PYTHONPATH` the error is the one the guide quotes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.test_namespace import guide_tool_example

ROOT = Path(__file__).resolve().parents[1]
GUIDE = (ROOT / "docs" / "tools.md").read_text(encoding="utf-8")


def project(tmp_path: Path) -> Path:
    (tmp_path / "mycompany").mkdir()
    (tmp_path / "mycompany" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "mycompany" / "ops.py").write_text(guide_tool_example(), encoding="utf-8")
    return tmp_path


def shell(folder: Path, line: str) -> str:
    """`line` run by bash in `folder`, with this interpreter's `signoff` first on PATH and no settings
    nor PYTHONPATH of the caller's: what it printed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SIGNOFF_", "SLACK_")) and k != "PYTHONPATH"}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    done = subprocess.run(["bash", "-c", line], cwd=folder, env=env, capture_output=True, text=True, timeout=120)
    return done.stdout + done.stderr


def test_the_guides_pythonpath_line_finds_a_tool_module_in_the_current_folder(tmp_path):
    [line] = [found for found in re.findall(r"```bash\n(.*?)```", GUIDE, re.S) if "PYTHONPATH=." in found]

    said = shell(project(tmp_path), line.split("#")[0].strip())

    assert re.search(r"^ok tools: demo,mycompany\.ops:TOOLS -> .*restart_service$", said, re.M), said


def test_without_it_the_error_is_the_one_the_guide_quotes(tmp_path):
    said = shell(project(tmp_path), "SIGNOFF_TOOLS=demo,mycompany.ops:TOOLS signoff check")

    quoted = "no module named 'mycompany' (is it installed, or on PYTHONPATH?)"
    assert quoted in GUIDE
    assert quoted in said, said
