"""A PostgreSQL server of a scenario's own, which it may crash and restart.

The machine's shared server must never be stopped (other work uses it), so a scenario that needs
the server itself to die gets a throwaway cluster: `initdb` in a temporary directory, started on a
free port with full durability, crashed with `pg_ctl stop -m immediate` (no shutdown checkpoint:
the next start replays the WAL, as after a power cut or an OOM kill) and started again.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from scenarios.serve import free_port

SERVER_USER = "postgres"
"""PostgreSQL refuses to run as root; as root we run it as this user."""


class Unavailable(Exception):
    """No PostgreSQL server binaries here (or no user to run them as): the scenario is skipped."""


def bin_dir() -> Path:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), reverse=True)
    if not candidates:
        raise Unavailable("no PostgreSQL server binaries (pg_ctl, initdb) on this machine")
    return Path(candidates[0]).parent


class PrivateServer:
    """One throwaway cluster: `start()`, `crash()`, `start()` again, and `destroy()` at the end."""

    def __init__(self) -> None:
        self.bin = bin_dir()
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            try:
                pwd.getpwnam(SERVER_USER)
            except KeyError:
                raise Unavailable(f"running as root and there is no {SERVER_USER!r} user to run PostgreSQL as") from None
            self.as_user = ["runuser", "-u", SERVER_USER, "--"]
        self.dir = Path(tempfile.mkdtemp(prefix="signoff-pg-"))
        self.data = self.dir / "data"
        self.port = free_port()
        if self.as_user:
            shutil.chown(self.dir, SERVER_USER)
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")
        self.up = False

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        options = (f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=on "
                   "-c synchronous_commit=on -c max_connections=200")
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.dir / "server.log"), "-w", "start")
        self.up = True

    def crash(self) -> None:
        """Stop at once, as a crash would: clients lose their connections mid-transaction."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        self.up = False

    def destroy(self) -> None:
        if self.up:
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
            self.up = False
        shutil.rmtree(self.dir, ignore_errors=True)

    def log(self) -> str:
        try:
            return (self.dir / "server.log").read_text(errors="replace")
        except OSError:
            return ""

    def _run(self, program: str, *args: str) -> None:
        command = [*self.as_user, str(self.bin / program), *args]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=self.dir)
        if done.returncode != 0:
            raise RuntimeError(f"{program} failed ({done.returncode}): {(done.stderr or done.stdout)[-800:]}")
