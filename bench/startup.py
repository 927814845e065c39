"""Benchmark: how soon `signoff` answers from a fresh process.

`signoff --help`, `signoff --version` and the help of a command (goal: at most 250 ms each), and how
soon `signoff serve` is ready, from starting the process to `GET /readyz` answering 200, with a
SQLite database and the demo tools (goal: at most 2 s). Every sample is a new process, as a person
at a shell or an orchestrator restarting a container makes one; the median and the slowest count.
The CPU time each command line's process used is shown beside its wall time: on a busy machine the
wall time grows with the load, the CPU time much less.

Python's bytecode is cached first, in a directory of the benchmark's own, as an installed package
has it: the figures are start-up, not compiling the sources.
`python -m bench.startup [--quick]` prints the figures.
"""

from __future__ import annotations

import argparse
import http.client
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bench import report, serve_proc
from bench.stats import ms, summary

FULL = {"samples": 10, "serve_samples": 5}
QUICK = {"samples": 2, "serve_samples": 1}
GOAL_MS = {"cli": 250.0, "serve": 2000.0}
LINES: dict[str, tuple[list[str], str]] = {
    "--help": (["--help"], "Usage: signoff [OPTIONS] COMMAND"),
    "--version": (["--version"], "signoff "),
    "runs --help": (["runs", "--help"], "Usage: signoff runs [OPTIONS] COMMAND"),
    "run --help": (["run", "--help"], "Usage: signoff run [OPTIONS] GOAL"),
}
"""Each command line timed: its arguments, and what its output starts with when it worked."""
READY_TIMEOUT_S = 60.0
POLL_S = 0.01


def signoff_command() -> list[str]:
    """The `signoff` console script installed beside this interpreter, as people run it; `python -m
    signoff` where there is none."""
    script = shutil.which("signoff", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-m", "signoff"]


def environment(cache: Path) -> dict[str, str]:
    """This environment without Signoff's own settings, its bytecode cached under `cache`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SIGNOFF_", "SLACK_"))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(cache)
    return env


def children_cpu() -> float:
    """CPU seconds (user and system) of this process's children that have ended."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def time_line(command: list[str], args: list[str], expected: str, env: Mapping[str, str],
              cwd: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of `signoff ARGS` from its start to its exit; raises unless it worked."""
    cpu = children_cpu()
    start = time.perf_counter()
    done = subprocess.run([*command, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    elapsed = time.perf_counter() - start
    if done.returncode != 0 or not done.stdout.startswith(expected):
        raise RuntimeError(f"signoff {' '.join(args)} exited with {done.returncode}:\n{done.stdout}{done.stderr}")
    return elapsed, children_cpu() - cpu


def serve_env(base: Mapping[str, str], slack: Any, database_url: str, port: int, outbox: Path) -> dict[str, str]:
    """What `signoff serve` needs in HTTP mode, against the fake Slack API, with the demo tools."""
    return {**base, "SLACK_BOT_TOKEN": slack.token, "SLACK_SIGNING_SECRET": serve_proc.SECRET,
            "SLACK_API_URL": slack.url, "SIGNOFF_DATABASE_URL": database_url, "SIGNOFF_TOOLS": "demo",
            "SIGNOFF_PORT": str(port), "SIGNOFF_APPROVERS": "U0APPROVER", "SIGNOFF_OUTBOX": str(outbox),
            "SIGNOFF_LOG_LEVEL": "WARNING"}


def readyz(port: int) -> int | None:
    """The status `GET /readyz` answers; None while nothing listens."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", "/readyz")
        return conn.getresponse().status
    except OSError:
        return None
    finally:
        conn.close()


def time_serve(command: list[str], env: Mapping[str, str], port: int, workdir: Path) -> tuple[float, float]:
    """(seconds to the first HTTP answer, seconds to `/readyz` answering 200) of one `signoff serve`."""
    log_path = workdir / f"serve-{port}.log"
    with log_path.open("wb") as log:
        start = time.perf_counter()
        process = subprocess.Popen([*command, "serve"], env=env, cwd=workdir, stdout=log, stderr=subprocess.STDOUT)
        try:
            first: float | None = None
            while (elapsed := time.perf_counter() - start) < READY_TIMEOUT_S:
                if process.poll() is not None:
                    raise RuntimeError(f"signoff serve exited with {process.returncode}:\n"
                                       f"{log_path.read_text(errors='replace')[-3000:]}")
                status = readyz(port)
                if status is not None and first is None:
                    first = elapsed
                if status == 200:
                    assert first is not None
                    return first, elapsed
                time.sleep(POLL_S)
            raise RuntimeError(f"signoff serve was not ready within {READY_TIMEOUT_S:.0f} s")
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def measure_serve(command: list[str], env: Mapping[str, str], samples: int, workdir: Path) -> dict[str, Any]:
    """Start `signoff serve` `samples` times on a SQLite database whose schema is already current,
    after one start that warms the bytecode cache."""
    from signoff.runtime.adapters.db import make_engine, upgrade
    from tests.fakes.slack import FakeSlack

    database_url = f"sqlite:///{workdir / 'startup.db'}"
    engine = make_engine(database_url)
    try:
        upgrade(engine)
    finally:
        engine.dispose()
    slack = FakeSlack().start()
    try:
        def once() -> tuple[float, float]:
            port = serve_proc.free_port()
            return time_serve(command, serve_env(env, slack, database_url, port, workdir / "outbox"), port, workdir)

        once()
        timings = [once() for _ in range(samples)]
    finally:
        slack.stop()
    return {"first_answer": summary([first for first, _ in timings]), "ready": summary([ready for _, ready in timings])}


def run(quick: bool = False) -> dict[str, Any]:
    plan = QUICK if quick else FULL
    command = signoff_command()
    with tempfile.TemporaryDirectory(prefix="signoff-startup-") as tmp:
        workdir = Path(tmp)
        env = environment(workdir / "pycache")
        lines: dict[str, Any] = {}
        for name, (args, expected) in LINES.items():
            time_line(command, args, expected, env, workdir)  # caches the bytecode this line imports
            timings = [time_line(command, args, expected, env, workdir) for _ in range(plan["samples"])]
            lines[name] = {**summary([wall for wall, _ in timings]), "cpu": summary([cpu for _, cpu in timings])}
        serve: dict[str, Any] = (measure_serve(command, env, plan["serve_samples"], workdir) if serve_proc.available()
                                 else {"skipped": "`signoff serve` or the fake Slack API is not importable"})
    met = {"cli": all(timing["median_ms"] <= GOAL_MS["cli"] for timing in lines.values()),
           "serve": serve["ready"]["median_ms"] <= GOAL_MS["serve"] if "ready" in serve else None}
    return {"plan": dict(plan), "command": " ".join(Path(part).name for part in command), "lines": lines,
            "serve": serve, "goals": {"ms": dict(GOAL_MS), "met": met}}


def markdown(result: dict[str, Any]) -> str:
    goal_cli, goal_serve = result["goals"]["ms"]["cli"], result["goals"]["ms"]["serve"]
    rows = [[f"`signoff {name}`", timing["n"], ms(timing["median_ms"]), ms(timing["max_ms"]),
             ms(timing["cpu"]["median_ms"]), f"≤ {goal_cli:.0f}", report.verdict(timing["median_ms"] <= goal_cli)]
            for name, timing in result["lines"].items()]
    serve = result["serve"]
    if "ready" in serve:
        first, ready = serve["first_answer"], serve["ready"]
        rows.append(["`signoff serve`: first HTTP answer", first["n"], ms(first["median_ms"]), ms(first["max_ms"]),
                     "", "", ""])
        rows.append(["`signoff serve`: `/readyz` answers 200", ready["n"], ms(ready["median_ms"]),
                     ms(ready["max_ms"]), "", f"≤ {goal_serve:.0f}", report.verdict(result["goals"]["met"]["serve"])])
    else:
        rows.append(["`signoff serve`", 0, "–", "–", "", f"≤ {goal_serve:.0f}", f"not measured: {serve['skipped']}"])
    return "\n".join([
        f"Milliseconds from starting a new process (`{result['command']}`) to its exit, or for `signoff serve` "
        "(HTTP mode, SQLite, the demo tools) to its answers, and the CPU time a command line used; the goal is "
        "on the median wall time:", "",
        report.table(["command line", "processes", "median", "max", "CPU median", "goal", "verdict"], rows),
    ])


def main(argv: list[str] | None = None, out: Callable[[str], Any] = print) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="few processes: checks the script, not the speed")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    out(markdown(run(args.quick)))
    print(f"bench: startup done in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
