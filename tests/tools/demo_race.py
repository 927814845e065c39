"""Run a demo tool function in several real processes at once.

Each child imports the tools, says it is ready and waits on stdin; the parent releases all of
them together once every one is ready, so the calls overlap as closely as processes allow.
Plain subprocesses rather than `multiprocessing`, whose children re-import the test runner.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from signoff.tools import base
from signoff.tools.base import ToolFailed
from signoff.tools.demo.issue_refund import record_refund
from signoff.tools.demo.send_email import deliver

TARGETS = {"send_email": deliver, "issue_refund": record_refund}
ROOT = Path(base.__file__).resolve().parents[1]


def race(tool: str, calls: list[tuple[Path, dict[str, Any], str]]) -> list[tuple[str, Any]]:
    """Run `tool`'s function once per `(outbox, args, key)`, each in its own process.

    Returns ("ok", result) or ("failed", message) per call, in the order of `calls`.
    """
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    children = [
        subprocess.Popen(
            [sys.executable, __file__, tool, str(outbox), json.dumps(args), key],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
        )
        for outbox, args, key in calls
    ]
    for child in children:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    outcomes = []
    for child in children:
        out, _ = child.communicate(timeout=60)
        assert child.returncode == 0, out
        status, payload = json.loads(out)
        outcomes.append((status, payload))
    return outcomes


def _child(tool: str, outbox: str, args: str, key: str) -> None:
    target = TARGETS[tool]
    print("ready", flush=True)
    sys.stdin.readline()
    try:
        outcome = ["ok", target(Path(outbox), json.loads(args), key)]
    except ToolFailed as exc:
        outcome = ["failed", str(exc)]
    print(json.dumps(outcome))


if __name__ == "__main__":
    _child(*sys.argv[1:])
