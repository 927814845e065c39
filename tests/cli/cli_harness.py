"""The real `signoff` CLI in a scratch directory with a clean environment: as a subprocess, or in-process.

The subprocess is the whole truth (console script, stdin, exit status, stderr); in-process runs of
`bot.cli.main` go through the same entry point and error handling, minus the interpreter start-up,
for the many checks where that cost would dominate the suite.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from signoff.bot.cli import main

_SCRUBBED = ("SIGNOFF_", "SLACK_", "OPENAI_", "ANTHROPIC_")

# Root passes every file permission check by two capabilities (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH).
# Dropped from the bounding set, a program it then runs is held to the owner's permission bits like
# anyone else's (and stays root, so it can still read the interpreter under root's home).
_WITHOUT_ROOTS_FILE_POWERS = """
import ctypes, os, sys
if os.geteuid() == 0:
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2):
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
"""


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()


class Signoff:
    """`signoff ...` in `cwd`; nothing from the caller's SIGNOFF_*/SLACK_*/model variables leaks in."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUBBED)}
        self.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(cwd), os.environ.get("PYTHONPATH")]))

    def __call__(self, *args: str, answers: str | None = None, env: dict[str, str] | None = None,
                 unprivileged: bool = False) -> Result:
        """Run `python -m bot.cli ARGS` as a child process; no answers means stdin is /dev/null.

        `unprivileged`: with file permissions applying to it even when the tests run as root (as
        CI does), so that a directory without write permission refuses it."""
        command = ["-m", "signoff.bot.cli", *args]
        done = subprocess.run(
            python_unprivileged(command) if unprivileged else [sys.executable, *command],
            cwd=self.cwd, env={**self.env, **(env or {})},
            input=answers, stdin=None if answers is not None else subprocess.DEVNULL,
            capture_output=True, text=True, timeout=120,
        )
        return Result(done.returncode, done.stdout, done.stderr)

    def here(self, *args: str, answers: str = "", env: dict[str, str] | None = None) -> Result:
        """Run `bot.cli.main(ARGS)` in this process, with the same directory, environment and stdin."""
        out, err = io.StringIO(), io.StringIO()
        with self._environment(env), contextlib.chdir(self.cwd), _stdin(answers), \
                contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(list(args))
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            else:
                raise AssertionError("main() returned instead of exiting")
        return Result(code, out.getvalue(), err.getvalue())

    @contextlib.contextmanager
    def _environment(self, extra: dict[str, str] | None) -> Iterator[None]:
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update({**self.env, **(extra or {})})
        try:
            yield
        finally:
            os.environ.clear()
            os.environ.update(saved)

    @property
    def outbox(self) -> Path:
        """Where `signoff run` (and `serve`) write the demo tools' emails and refunds."""
        return self.cwd / "outbox"

    @property
    def demo_outbox(self) -> Path:
        """Where `signoff demo` (and `--demo`) write them, beside the demo's database."""
        return self.cwd / "signoff-demo-outbox"


def python_unprivileged(arguments: list[str]) -> list[str]:
    """`python ARGUMENTS` held to file permissions even when the tests run as root."""
    return [sys.executable, "-c", _WITHOUT_ROOTS_FILE_POWERS, *arguments]


@contextlib.contextmanager
def _stdin(text: str) -> Iterator[None]:
    saved, sys.stdin = sys.stdin, io.StringIO(text)
    try:
        yield
    finally:
        sys.stdin = saved
