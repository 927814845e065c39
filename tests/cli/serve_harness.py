"""`signoff serve` as a child process, in HTTP mode on a free port, until the test is done with it."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serving(signoff, env: dict[str, str]) -> Iterator[tuple[str, Path]]:
    """`signoff serve` with `env`, once it answers its health check: (its URL, the file its output
    goes to). It is stopped on the way out, so the whole output is in the file then."""
    port = free_port()
    log = signoff.cwd / "serve.log"
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as output:  # a file, not a pipe nobody reads while it runs
        process = subprocess.Popen([sys.executable, "-m", "signoff.bot.cli", "serve"], cwd=signoff.cwd,
                                   env={**signoff.env, **env, "SIGNOFF_PORT": str(port)},
                                   stdout=output, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                assert process.poll() is None, log.read_text()
                try:
                    if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.1)
            else:
                raise AssertionError(f"it never answered its health check:\n{log.read_text()}")
            yield url, log
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
