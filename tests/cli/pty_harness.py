"""`signoff` in a pseudo-terminal: what a person at a keyboard sees, types and interrupts.

The child gets the terminal as its stdin, stdout, stderr and controlling terminal, so `isatty()`
is true and Ctrl-C (`\\x03`) reaches it as SIGINT, as it would from a keyboard.
"""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import NoReturn

# Runs in the child before `signoff`: a session of its own, whose controlling terminal is the pty
# it has as stdin (so the terminal's Ctrl-C signals it).
_ATTACH = ("import fcntl, os, sys, termios; os.setsid(); fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
           "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])")


HUNG_AFTER_S = 180.0
"""How long `wait` gives a program to end before it takes it for hung: only a bound on a hang, far
beyond what the busiest machine needs, and within pytest-timeout's 300 s a test so that the failure
shows what the program was doing."""


class Terminal:
    """One `python -m signoff.bot.cli ARGS` in a pseudo-terminal; `screen` is everything it printed so far."""

    def __init__(self, *args: str, cwd: Path, env: dict[str, str]) -> None:
        self.master, slave = pty.openpty()
        try:
            # faulthandler: if the program hangs, SIGABRT puts every thread's stack on the screen.
            self.process = subprocess.Popen([sys.executable, "-c", _ATTACH, "-m", "signoff.bot.cli", *args],
                                            cwd=cwd, env={**env, "PYTHONFAULTHANDLER": "1"},
                                            stdin=slave, stdout=slave, stderr=slave)
        finally:
            os.close(slave)  # the child has its own copies: when it ends, reading the master says so
        self.screen = ""

    def expect(self, text: str, timeout: float = 60) -> str:
        """Wait until `text` is on the screen; return the screen up to and including it."""
        deadline = time.monotonic() + timeout
        while text not in self.screen:
            if not self._read(deadline - time.monotonic()):
                raise AssertionError(f"{text!r} never appeared; the screen:\n{self.screen}")
        return self.screen[: self.screen.index(text) + len(text)]

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def wait(self, timeout: float = HUNG_AFTER_S) -> int:
        """The program's exit code, once it has ended, with everything it printed on the screen.

        Waits for the end itself, however long a busy machine takes to get there: the terminal
        closing (every copy of its other end gone), then the process's exit. `timeout` only bounds a
        hung program, which fails with its threads' stacks on the screen.
        """
        deadline = time.monotonic() + timeout
        while self._read(deadline - time.monotonic()):
            pass
        try:
            return self.process.wait(timeout=max(deadline - time.monotonic(), 0))
        except subprocess.TimeoutExpired:
            self._hung(timeout)

    def _hung(self, timeout: float) -> NoReturn:
        """Fail a program still running after `timeout` s, with what it was doing on the screen."""
        self.process.send_signal(signal.SIGABRT)  # faulthandler prints the stacks, then it ends
        end = time.monotonic() + 10
        while self._read(end - time.monotonic()):
            pass
        raise AssertionError(f"the program was still running {timeout:.0f} s into wait(); "
                             f"the screen:\n{self.screen}")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        os.close(self.master)

    def _read(self, timeout: float) -> bool:
        """Add what the program printed to the screen; False once it has closed the terminal or time is up."""
        if timeout <= 0 or not select.select([self.master], [], [], timeout)[0]:
            return False
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: every copy of the terminal's other end is closed
            return False
        # The terminal turns each "\n" into "\r\n"; the screen is compared as lines.
        self.screen += data.decode(errors="replace").replace("\r\n", "\n")
        return bool(data)
