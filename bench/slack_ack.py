"""Benchmark 3: how fast `signoff serve` answers Slack, in a burst and at a steady rate, and how soon
an approved tool runs; with `--profile`, what bounds it; with `--sweep`, what other counts change.

A real `signoff serve` process (HTTP mode, gunicorn) talks to FakeSlack. Bursts of concurrent
signed requests: slash commands that start runs, Approve clicks on the approval requests those
runs posted, and `/signoff list`. Then the same three kinds again on a fresh database, sent at a
steady rate: an open loop, each request leaving at its appointed time whether or not earlier ones
were answered. Latency is from sending the request to its HTTP response; the click-to-tool time
runs from sending the click to the tool's row in the execution ledger.

`python -m bench.slack_ack --profile` runs the bursts with the server's worker process recorded by
py-spy, once per pass (the threads running or ready to run, the thread holding the GIL, every
thread), then once more taking snapshots of its thread pools, and ranks where the time goes.
`python -m bench.slack_ack --sweep` runs the burst with other numbers of run workers
(SIGNOFF_WORKERS) and of gunicorn processes and threads. Both need py-spy (`pip install py-spy`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, func, select

from bench import pg, report, serve_proc
from bench.stats import ms, summary
from signoff.runtime.adapters.db import make_engine, upgrade
from signoff.runtime.adapters.tables import approvals, runs, tool_executions
from signoff.runtime.schema import TERMINAL


@dataclass(frozen=True)
class Plan:
    burst: int
    """Requests of each kind released at once."""
    rate: float
    """Requests a second at the steady rate..."""
    seconds: float
    """...for this long, for each kind."""
    backends: tuple[str, ...]


FULL = Plan(burst=100, rate=20, seconds=10, backends=("sqlite", "postgresql"))
QUICK = Plan(burst=5, rate=10, seconds=1, backends=("sqlite",))
APPROVER = "U0APPROVER"
APPROVE_ACTION = "signoff.approve"
WAIT_S = 180
KINDS = ("start_command", "approve_click", "list_command")
TARGETS_MS = {"burst": 200, "steady": 50, "click_to_tool": 300}
"""The issue's p99 targets: a burst of 100 acknowledged, a steady 20/s acknowledged, click to tool run."""

Watch = Callable[[serve_proc.Server, str], AbstractContextManager[Any]]
"""What to do around each phase of a measurement (the profile records the server during it)."""


def run(quick: bool = False, postgres_url: str | None = None) -> dict[str, Any]:
    if not serve_proc.available():
        return {"skipped": "`signoff serve` or the fake Slack API is not importable"}
    plan = QUICK if quick else FULL
    result: dict[str, Any] = {"plan": {"burst": plan.burst, "steady": {"rate": plan.rate, "seconds": plan.seconds}},
                              "backends": {}}
    for backend in plan.backends:
        with fresh_database(backend, postgres_url) as url:
            if url is None:
                continue
            data = measure(url, plan.burst)
        with fresh_database(backend, postgres_url) as url:
            assert url is not None
            data["steady"] = measure_steady(url, plan.rate, plan.seconds)
        result["backends"][backend] = data
    return result


@contextmanager
def fresh_database(backend: str, postgres_url: str | None) -> Iterator[str | None]:
    """An empty database of `backend` for one measurement, dropped afterwards; None if there is none."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory(prefix="signoff-ack-") as tmp:
            yield f"sqlite:///{Path(tmp) / 'ack.db'}"
    elif postgres_url is not None:
        with pg.dedicated_schema(postgres_url, "bench_ack") as url:
            yield url
    else:
        yield None


# -- the burst ---------------------------------------------------------------------------------------


def measure(url: str, burst: int, *, workers: int = 4, gunicorn: serve_proc.Gunicorn | None = None,
            watch: Watch | None = None, warm: bool = True) -> dict[str, Any]:
    """Three bursts of `burst` requests, each released at once and each let settle before the next:
    `/signoff <goal>` (until every run has asked for approval), Approve on each request (until
    every tool has run and every run has ended), `/signoff list`.

    `warm`: first a burst of `/signoff list` from the requesters-to-be, not counted, so the bursts
    meet a server that has started its threads and opened its database connections, as one that
    has been serving for a while has."""
    return three_kinds(url, burst, fire, "U0REQ", workers=workers, gunicorn=gunicorn, watch=watch, warm=warm)


def fire(count: int, send: Callable[[int], tuple[int, float, str]]) -> dict[str, Any]:
    """`count` requests at once (a barrier releases them together); latency summary and status codes."""
    barrier = threading.Barrier(count)

    def one(i: int) -> tuple[int, float, str]:
        barrier.wait()
        return send(i)

    with ThreadPoolExecutor(max_workers=count) as pool:
        answers = list(pool.map(one, range(count)))
    return answered(answers)


def answered(answers: list[tuple[int, float, str]]) -> dict[str, Any]:
    statuses: dict[str, int] = {}
    for status, _, _ in answers:
        statuses[str(status)] = statuses.get(str(status), 0) + 1
    return {**summary([elapsed for _, elapsed, _ in answers]), "statuses": statuses}


# -- the steady rate ---------------------------------------------------------------------------------


def measure_steady(url: str, rate: float, seconds: float, *, workers: int = 4) -> dict[str, Any]:
    """The same three kinds, each sent at `rate` a second for `seconds`, one kind after another:
    `/signoff <goal>`, then (once every run has asked) Approve on each request, then (once every
    tool has run and every run has ended) `/signoff list`."""
    result = three_kinds(url, round(rate * seconds), lambda count, send: paced(count, rate, send), "U0STEADY",
                         workers=workers, warm=False)
    result.pop("rss_after")
    return {"rate": rate, "seconds": seconds, **result}


Send = Callable[[int], tuple[int, float, str]]
"""Send request i; its HTTP status, seconds to the answer, and the answer."""


def three_kinds(url: str, count: int, send_all: Callable[[int, Send], dict[str, Any]], requesters: str, *,
                workers: int = 4, gunicorn: serve_proc.Gunicorn | None = None, watch: Watch | None = None,
                warm: bool = True) -> dict[str, Any]:
    """`count` of each kind, sent by `send_all` (at once, or paced), each kind let settle before the
    next: `/signoff <goal>` (until every run has asked for approval), Approve on each request (until
    every tool has run and every run has ended), `/signoff list`; on a `signoff serve` of its own."""
    engine = make_engine(url)
    upgrade(engine)
    load = os.getloadavg()
    server = serve_proc.start(url, sweep_interval="15s", workers=workers, gunicorn=gunicorn)
    phases = Phases(server, watch)
    try:
        if warm:
            fire(count, lambda i: server.command("list", f"{requesters}{i:04d}"))
        with phases("start_command", count):
            starts = send_all(count, lambda i: server.command(f"benchmark run {i}: look up, then notify",
                                                              f"{requesters}{i:04d}"))
            wait_for(lambda: posted_approvals(engine) >= count, "approval requests to be posted")
        cards = approval_cards(engine, server)
        sent_at: dict[str, datetime] = {}

        def click(i: int) -> tuple[int, float, str]:
            key, card = cards[i]
            sent_at[key] = datetime.now(UTC)
            return server.click(card, APPROVE_ACTION, APPROVER)

        with phases("approve_click", count):
            clicks = send_all(count, click)
            wait_for(lambda: finished_executions(engine) >= count, "approved tools to run")
            # The runs' last step (the final answer, posted to Slack) would otherwise overlap the next kind.
            wait_for(lambda: unfinished_runs(engine) == 0, "runs to end")
        to_tool = click_to_tool(engine, sent_at)
        with phases("list_command", count):
            lists = send_all(count, lambda i: server.command("list", APPROVER))
        rss = server.rss()
    finally:
        server.stop()
        engine.dispose()
    return {"start_command": starts, "approve_click": clicks, "list_command": lists,
            "click_to_tool": summary(to_tool), "rss_after": rss, "usage": phases.usage,
            "load_before": [round(x, 2) for x in load]}


def paced(count: int, rate: float, send: Callable[[int], tuple[int, float, str]]) -> dict[str, Any]:
    """An open loop: request i leaves at t0 + i/rate whatever became of the earlier ones. The pool
    may grow to `count` threads, so a slow answer never holds back a later request. `late_max_ms`:
    how far behind its appointed time the latest request left (the load generator's own delay)."""
    lateness = [0.0] * count

    def one(i: int, due: float) -> tuple[int, float, str]:
        lateness[i] = time.perf_counter() - due
        return send(i)

    sent: list[Future[tuple[int, float, str]]] = []
    begin = time.perf_counter() + 0.05
    with ThreadPoolExecutor(max_workers=count) as pool:
        for i in range(count):
            due = begin + i / rate
            pause = due - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            sent.append(pool.submit(one, i, due))
    return {**answered([future.result() for future in sent]), "late_max_ms": round(max(lateness) * 1000, 2)}


# -- what the server and the machine did meanwhile ---------------------------------------------------


class Phases:
    """Times each phase of a measurement and what it cost: the server's CPU (and how much of it the
    kernel's), this process's (the load generator and FakeSlack), and how busy the machine's cores
    were (other programs too)."""

    def __init__(self, server: serve_proc.Server, watch: Watch | None = None) -> None:
        self.server, self.watch = server, watch
        self.usage: dict[str, dict[str, Any]] = {}

    @contextmanager
    def __call__(self, name: str, requests: int) -> Iterator[None]:
        served = self.server.served()
        with self.watch(self.server, name) if self.watch is not None else nullcontext():
            wall, (user, system), own_cpu, machine = (time.perf_counter(), self.server.cpu_seconds(),
                                                      time.process_time(), machine_ticks())
            yield
            wall = time.perf_counter() - wall
            user_now, system_now = self.server.cpu_seconds()
            user, system = user_now - user, system_now - system
            own_cpu = time.process_time() - own_cpu
            busy, total = (now - then for now, then in zip(machine_ticks(), machine, strict=True))
        self.usage[name] = {
            "wall_s": round(wall, 3), "server_cpu_s": round(user + system, 3), "server_system_s": round(system, 3),
            "bench_cpu_s": round(own_cpu, 3), "server_cpu_ms_per_request": round((user + system) * 1000 / requests, 2),
            "machine_busy": round(busy / total, 3) if total else 0.0,
            # Everything else the cores ran meanwhile: PostgreSQL, a profiler, other programs.
            "others_cpu_s": round(busy / os.sysconf("SC_CLK_TCK") - user - system - own_cpu, 3),
            **in_app(served, self.server.served(), SERVED_AS[name]),
        }


SERVED_AS = {"start_command": "command", "approve_click": "interaction", "list_command": "command"}
"""The kind the server's `/metrics` counts each phase's requests under."""


def in_app(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]], kind: str) -> dict[str, Any]:
    """The server's own timing of the requests of `kind` answered between two `Server.served()`:
    their mean, and the histogram bucket (its upper bound; None past the last) holding the median
    and the 99th percentile. Between the client's latency and this lie the wait for a gunicorn
    thread, the HTTP exchange, and the load generator's own delays."""
    then, now = before.get(kind, {}), after.get(kind, {})
    count = now.get("count", 0.0) - then.get("count", 0.0)
    if count <= 0:
        return {}
    bounds = sorted((float(key[3:]), now[key] - then.get(key, 0.0)) for key in now
                    if key.startswith("le=") and key != "le=+Inf")

    def bucket(q: float) -> float | None:
        return next((bound * 1000 for bound, n in bounds if n >= q * count), None)

    return {"in_app_n": count, "in_app_mean_ms": round((now["sum"] - then.get("sum", 0.0)) * 1000 / count, 1),
            "in_app_p50_at_most_ms": bucket(0.5), "in_app_p99_at_most_ms": bucket(0.99)}


def machine_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks of all cores since boot, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return sum(fields) - idle, sum(fields)


# -- reading the store -------------------------------------------------------------------------------


def wait_for(ready: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def posted_approvals(engine: Engine) -> int:
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(approvals).where(
            approvals.c.status == "pending", approvals.c.message.is_not(None))).scalar_one()


def finished_executions(engine: Engine) -> int:
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(tool_executions).where(
            tool_executions.c.status == "succeeded")).scalar_one()


def unfinished_runs(engine: Engine) -> int:
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(runs).where(
            runs.c.status.not_in(sorted(TERMINAL)))).scalar_one()


def approval_cards(engine: Engine, server: serve_proc.Server) -> list[tuple[str, dict[str, Any]]]:
    """(key, the approval message as Slack shows it) for every pending approval."""
    with engine.connect() as conn:
        rows = conn.execute(select(approvals.c.key, approvals.c.message).where(approvals.c.status == "pending")
                            .order_by(approvals.c.requested_at)).all()
    cards = []
    for key, message in rows:
        ref = json.loads(message)
        cards.append((key, server.slack.message(ref["channel"], ref["ts"])))
    return cards


def click_to_tool(engine: Engine, sent_at: dict[str, datetime]) -> list[float]:
    with engine.connect() as conn:
        rows = conn.execute(select(tool_executions.c.key, tool_executions.c.finished_at)
                            .where(tool_executions.c.key.in_(list(sent_at)))).all()
    assert len(rows) == len(sent_at), (len(rows), len(sent_at))
    return [(finished - sent_at[key]).total_seconds() for key, finished in rows]


# -- the profile -------------------------------------------------------------------------------------

PASSES = {"active": {"gil": False, "idle": False}, "gil": {"gil": True, "idle": False},
          "idle": {"gil": False, "idle": True}}
"""py-spy's three recordings of the same burst: threads the OS shows running (`--idle` off), the
thread holding the GIL (`--gil`), and every thread whether running or not (`--idle`)."""
RATE = 100
"""py-spy samples a second."""

COMPONENTS = (
    ("signature check", ("slack_sdk/signature/", "hmac.py", "hashlib.py")),
    ("JSON", ("json/",)),
    ("logging", ("logging/",)),
    ("database (SQLAlchemy, psycopg, sqlite3)", ("sqlalchemy/", "psycopg/", "psycopg_pool/", "sqlite3/")),
    ("Slack Web API calls (slack_sdk, http.client)", ("slack_sdk/web/", "slack_sdk/http_retry/", "urllib/",
                                                       "http/client.py")),
    ("pydantic", ("pydantic/",)),
    ("Bolt (dispatch, middleware, ack handoff)", ("slack_bolt/", "slack_sdk/")),
    ("Signoff runtime", ("signoff/runtime/", "signoff/tools/", "bench/workload.py")),
    ("Signoff Slack edge (WSGI, listeners, messages)", ("signoff/bot/",)),
    ("gunicorn", ("gunicorn/",)),
    ("scheduler (APScheduler)", ("apscheduler/",)),
    ("thread handoffs (pools, locks, queues, thread starts)", ("threading.py", "concurrent/futures/", "queue.py")),
)
"""Where a sample is spent: its innermost frame whose file one of these names (else "other")."""

ROLES = ("requests", "listeners", "runs", "gunicorn main loop", "scheduler", "other threads")
FRAME = re.compile(r"^(?P<function>.*) \((?P<file>.*?):(?P<line>\d+)\)$")


@dataclass(frozen=True)
class Stack:
    thread: str
    frames: tuple[tuple[str, str], ...]
    """(function, file) from the outermost frame to the innermost."""
    count: int

    @property
    def role(self) -> str:
        name, files = self.thread, {file for _, file in self.frames}
        if name.startswith("signoff-listener"):
            return "listeners"
        if name.startswith(("signoff-run", "tool-", "lease-")):
            return "runs"
        if any(function == "ThreadWorker.handle" for function, _ in self.frames):
            return "requests"
        if name == "MainThread":
            return "gunicorn main loop"
        if name == "APScheduler" or any(file.startswith("apscheduler/") for file in files):
            return "scheduler"
        return "other threads"

    @property
    def busy(self) -> bool:
        """Working, rather than a listener thread waiting for work (only `--idle` records those)."""
        return self.role != "listeners" or any(function == "_WorkItem.run" for function, _ in self.frames)

    @property
    def component(self) -> str:
        for _, file in reversed(self.frames):
            for name, prefixes in COMPONENTS:
                if file.startswith(prefixes):
                    return name
        return "other"

    @property
    def place(self) -> str:
        """Where a thread on the request path is, for telling waiting from working."""
        function, file = self.frames[-1] if self.frames else ("", "")
        if file == "slack_bolt/listener/thread_runner.py" and function == "ThreadListenerRunner.run":
            return "Bolt's ack poll (sleeps 10 ms a turn)"
        if self.within(lambda fn, f: f == "sqlalchemy/pool/impl.py" and fn == "QueuePool._do_get"):
            return "database: waiting for a pooled connection"
        component = self.component
        if component.startswith("database"):
            if self.within(lambda fn, f: f == "signoff/runtime/adapters/db.py" and fn.endswith("_begin")):
                return "database: BEGIN (SQLite: waiting for the write lock)"
            if self.within(lambda fn, f: fn in ("Connection.commit", "Connection._commit_impl")):
                return "database: COMMIT"
            return "database: queries"
        if component.startswith("Slack Web API"):
            return "Slack Web API"
        if file in ("threading.py", "queue.py") or file.startswith("concurrent/futures/"):
            return "locks, queues"
        if file in ("socket.py", "selectors.py") or file.startswith("gunicorn/"):
            return "socket (request in, response out)"
        return "Python code"

    @property
    def innermost(self) -> str:
        function, file = self.frames[-1] if self.frames else ("?", "?")
        return f"{function} ({file})"

    def within(self, mark: Callable[[str, str], bool]) -> bool:
        return any(mark(function, file) for function, file in self.frames)


INCLUSIVE: dict[str, Callable[[str, str], bool]] = {
    "Bolt's App.dispatch (middleware, listeners before their ack)": lambda fn, file: fn == "App.dispatch",
    "our listeners (commands, decisions)": lambda fn, file: file.startswith("signoff/bot/slack/")
    and fn.startswith(("Commands.", "Decisions.", "RunButtons.", "Home.")),
    "the runner (runtime/runner.py)": lambda fn, file: file == "signoff/runtime/runner.py",
    "the worker pool's runs (Workers._execute)": lambda fn, file: fn == "Workers._execute",
    "database (SQLAlchemy and drivers)": lambda fn, file: file.startswith(("sqlalchemy/", "psycopg/", "sqlite3/")),
    "Slack Web API calls": lambda fn, file: file.startswith("slack_sdk/web/"),
    "signature check": lambda fn, file: file.startswith("slack_sdk/signature/"),
    "logging": lambda fn, file: file.startswith("logging/"),
    "JSON": lambda fn, file: file.startswith("json/"),
    "gunicorn (outside the app)": lambda fn, file: file.startswith("gunicorn/") and fn != "ThreadWorker.handle",
}
"""Inclusive shares: samples with any frame in each (they overlap, so they do not add up)."""


def read_raw(path: Path) -> list[Stack]:
    """py-spy's raw format with `--threads`: `thread (TID): NAME;frame;...;frame COUNT` a line."""
    stacks = []
    for line in path.read_text(errors="replace").splitlines():
        line, _, count = line.rpartition(" ")
        if not line or not count.isdigit():
            continue
        thread, *frames = line.split(";")
        name = thread.split(": ", 1)[1] if ": " in thread else ""
        parsed = tuple((m["function"], m["file"]) for m in map(FRAME.match, frames) if m is not None)
        stacks.append(Stack(name, parsed, int(count)))
    return stacks


def profile(backends: tuple[str, ...], postgres_url: str | None, out: Path, burst: int = 100,
            nonblocking: bool = True, repeat: int = 1) -> dict[str, Any]:
    """The burst of `measure` under py-spy, once per pass (see PASSES) and `repeat` times over, per
    backend; the summary of each phase. `nonblocking`: py-spy reads the stacks without pausing the
    server, which pausing slows several times over (see `Server.spy`)."""
    out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"burst": burst, "rate": RATE, "nonblocking": nonblocking, "repeat": repeat,
                              "backends": {}}
    for backend in backends:
        recorded: dict[str, list[Recording]] = {name: [] for name in PASSES}
        latencies: dict[str, list[dict[str, Any]]] = {name: [] for name in PASSES}
        for round_ in range(repeat):
            for name, flags in PASSES.items():
                with fresh_database(backend, postgres_url) as url:
                    if url is None:
                        break
                    print(f"profile: {backend}, py-spy {name} ({round_ + 1}/{repeat}) ...", file=sys.stderr, flush=True)
                    record = recorder(out / f"{backend}-{name}-{round_ + 1}", {**flags, "nonblocking": nonblocking},
                                      recorded[name])
                    found = measure(url, burst, watch=record)
                latencies[name].append({kind: {k: found[kind][k] for k in ("median_ms", "p99_ms")}
                                        for kind in (*KINDS, "click_to_tool")})
        snapshots: dict[str, list[dict[str, int]]] = {}
        for round_ in range(repeat if all(recorded.values()) else 0):
            with fresh_database(backend, postgres_url) as url:
                assert url is not None
                print(f"profile: {backend}, pool snapshots ({round_ + 1}/{repeat}) ...", file=sys.stderr, flush=True)
                watch, found = pools()
                measure(url, burst, watch=watch)
            for phase, taken in found.items():
                snapshots.setdefault(phase, []).extend(taken)
        if all(recorded.values()):
            result["backends"][backend] = {
                "latencies": latencies,
                "phases": {phase: summarise_phase({name: [r for r in found if r.phase == phase]
                                                   for name, found in recorded.items()}, burst * repeat)
                           for phase in KINDS},
                "pools": {phase: summarise_pools(taken) for phase, taken in snapshots.items()},
            }
    return result


def pools(phases: tuple[str, ...] = ("start_command", "approve_click"),
          every_s: float = 0.1) -> tuple[Watch, dict[str, list[dict[str, int]]]]:
    """A watch that, during `phases`, takes a `py-spy dump` of the server every `every_s` while
    requests are in flight, and counts what the two pools on the ack path are doing: Bolt's
    listener threads (working before their listener's ack, or after it) and gunicorn's request
    threads (in a request, and of those waiting in Bolt's poll for a listener's ack)."""
    found: dict[str, list[dict[str, int]]] = {}

    @contextmanager
    def watch(watched: serve_proc.Server, phase: str) -> Iterator[None]:
        if phase not in phases:
            yield
            return
        stop, snapshots = threading.Event(), found.setdefault(phase, [])

        def snap() -> None:
            while not stop.wait(every_s):
                counts = thread_counts(watched.dump())
                if counts["threads"] and (counts["requests"] or snapshots):  # from the first request on
                    snapshots.append(counts)
                if snapshots and not counts["requests"]:  # all answered: the pools' part is over
                    return

        sampler = threading.Thread(target=snap, name="pool-snapshots", daemon=True)
        sampler.start()
        try:
            yield
        finally:
            stop.set()
            sampler.join()

    return watch, found


def summarise_pools(snapshots: list[dict[str, int]]) -> dict[str, Any]:
    """Over the snapshots taken while requests were in flight: the mean and most of each count, and
    how often every listener thread was working (so the next request's ack had to wait for one)."""
    from signoff.bot.slack.app import LISTENER_THREADS

    if not snapshots:
        return {"snapshots": 0}
    keys = [k for k in snapshots[0] if k != "threads"]
    full = sum(s["listeners_working"] >= LISTENER_THREADS for s in snapshots)
    return {"snapshots": len(snapshots), "listener_pool_full_share": round(full / len(snapshots), 2),
            **{f"{k}_mean": round(sum(s[k] for s in snapshots) / len(snapshots), 1) for k in keys},
            **{f"{k}_max": max(s[k] for s in snapshots) for k in keys}}


AFTER_ACK = ("_finish", "_finish_event", "Decisions.on_approve", "Decisions.on_approve_similar",
             "Decisions.on_approve_all", "Decisions.on_deny", "Workers.submit")
"""Frames that mean a listener thread works after its request's ack: the rest a listener hands
back to run after its ack (`listeners._finish`); else Approve and Deny, which ack first, and a
command, which acks just before it hands its run to a worker."""


def thread_counts(dump: str) -> dict[str, int]:
    """Counts from one `py-spy dump` (each thread: a header line, then its frames innermost first)."""
    threads = [block.split("\n") for block in dump.split("\nThread ")[1:]]
    listeners = [t for t in threads if '"signoff-listener' in t[0]]
    working = [t for t in listeners if any("_WorkItem.run (" in line for line in t)]
    requests = [t for t in threads if any("ThreadWorker.handle (" in line for line in t)]

    def innermost(thread: list[str]) -> str:
        return next((line.strip() for line in thread[1:] if line.strip()), "")

    return {"threads": len(threads), "listeners": len(listeners), "listeners_working": len(working),
            "listeners_after_ack": sum(any(f"{name} (" in line for name in AFTER_ACK for line in t) for t in working),
            "requests": len(requests),
            # Bolt's request thread sleeping 10 ms a turn until a listener thread has acked.
            "requests_awaiting_ack": sum(innermost(t).startswith("ThreadListenerRunner.run (") for t in requests),
            "requests_in_database": sum(any("(sqlalchemy/" in line for line in t) for t in requests),
            # concurrent.futures serialises every pool's submit on one lock, held while a pool starts a thread.
            "requests_in_pool_submit": sum(innermost(t).startswith("ThreadPoolExecutor.submit (") for t in requests)}


@dataclass(frozen=True)
class Recording:
    """One py-spy recording of one phase."""

    phase: str
    path: Path
    seconds: float
    errors: int

    @property
    def ticks(self) -> float:
        """Samples taken: py-spy's rate over the time it sampled, less those it could not take."""
        return max(self.seconds * RATE - self.errors, 1.0)


def recorder(prefix: Path, flags: dict[str, bool], recorded: list[Recording]) -> Watch:
    """A watch that records each phase with py-spy into `{prefix}-{phase}.txt`, adding each recording
    to `recorded`."""

    @contextmanager
    def record(server: serve_proc.Server, phase: str) -> Iterator[None]:
        path = prefix.with_name(f"{prefix.name}-{phase}.txt")
        spy = server.spy(path, rate=RATE, **flags)
        try:
            yield
        finally:
            spy.stop()
            recorded.append(Recording(phase, path, spy.seconds, spy.errors))

    return record


def summarise_phase(recordings: dict[str, list[Recording]], requests: int) -> dict[str, Any]:
    """Where one phase's samples went, and how the threads answering requests spent their time.

    Each pass is a separate burst, so the passes are compared per request: a sample stands for
    the time between two samples, and thread-milliseconds are divided by the requests of the phase."""
    stacks = {name: [s for r in found for s in read_raw(r.path)] for name, found in recordings.items()}
    ticks = {name: sum(r.ticks for r in found) for name, found in recordings.items()}
    seconds = {name: sum(r.seconds for r in found) for name, found in recordings.items()}
    active, gil, every = stacks["active"], stacks["gil"], stacks["idle"]
    # The main thread is in every sample of the --idle pass: its count is the samples taken, exactly.
    ticks["idle"] = max(sum(s.count for s in every if s.role == "gunicorn main loop"), 1)

    def shares(found: list[Stack], key: Callable[[Stack], str]) -> list[tuple[str, float]]:
        """Each key's share of the samples in percent, largest first."""
        counts: Counter[str] = Counter()
        for stack in found:
            counts[key(stack)] += stack.count
        total = sum(counts.values()) or 1
        return [(k, round(100 * v / total, 1)) for k, v in counts.most_common()]

    on_path = ("requests", "listeners")

    def per_request(name: str, key: Callable[[Stack], str]) -> dict[str, float]:
        """Thread-milliseconds per request on the request path (request and listener threads)."""
        counts: Counter[str] = Counter()
        for stack in stacks[name]:
            if stack.role in on_path and stack.busy:
                counts[key(stack)] += stack.count
        sample_ms = 1000 * seconds[name] / ticks[name]
        return {k: round(v * sample_ms / requests, 1) for k, v in counts.most_common()}

    def inclusive(found: list[Stack]) -> list[tuple[str, float]]:
        total = sum(s.count for s in found) or 1
        shares_ = {name: 100 * sum(s.count for s in found if s.within(mark)) / total for name, mark in INCLUSIVE.items()}
        return [(name, round(share, 1)) for name, share in sorted(shares_.items(), key=lambda kv: -kv[1])]

    wall = per_request("idle", lambda s: s.place)
    running = per_request("active", lambda s: s.place)
    holding = per_request("gil", lambda s: s.place)
    # Not on a CPU while in Python code rather than in a call that blocks: the thread waits for the GIL.
    off_cpu = {place: round(wall[place] - running.get(place, 0.0), 1) for place in wall}
    path = [s for s in active if s.role in on_path]
    return {
        "seconds": {k: round(v, 2) for k, v in seconds.items()},
        "samples": {name: sum(s.count for s in found) for name, found in stacks.items()},
        "ticks": {k: round(v) for k, v in ticks.items()},
        # Of gunicorn's request threads, Bolt's listener threads and the run workers: how many were
        # working at a time, on average (a pool that is always full makes the next request wait).
        "busy_threads": {role: round(sum(s.count for s in every if s.role == role and s.busy
                                         and (role != "runs" or s.thread.startswith("signoff-run"))) / ticks["idle"], 1)
                         for role in ("requests", "listeners", "runs")},
        "gil_held_share": round(sum(s.count for s in gil) / ticks["gil"], 3),
        # Threads the OS shows running or ready to run (more than the cores: some wait for one).
        "threads_runnable": round(sum(s.count for s in active) / ticks["active"], 2),
        "cpu_by_role": shares(active, lambda s: s.role),
        "gil_by_role": shares(gil, lambda s: s.role),
        "cpu_by_component": shares(active, lambda s: s.component),
        "gil_by_component": shares(gil, lambda s: s.component),
        "cpu_inclusive": inclusive(active),
        "request_path_cpu_by_component": shares(path, lambda s: s.component),
        "request_path_top_functions": shares(path, lambda s: s.innermost)[:12],
        "request_path_ms_per_request": {
            "busy": round(sum(wall.values()), 1), "on_cpu": round(sum(running.values()), 1),
            "holding_gil": round(sum(holding.values()), 1), "by_place": wall, "on_cpu_by_place": running,
            "holding_gil_by_place": holding, "off_cpu_by_place": off_cpu,
            "waiting_for_gil_at_least": off_cpu.get("Python code", 0.0),
        },
    }


def profile_markdown(result: dict[str, Any]) -> str:
    parts = [f"py-spy at {result['rate']} samples/s on the server's worker process, bursts of {result['burst']}, "
             f"{result['repeat']} burst(s) per pass" + (", without pausing it." if result["nonblocking"] else ".")]
    for backend, data in result["backends"].items():
        for phase, found in data["phases"].items():
            path = found["request_path_ms_per_request"]
            parts += ["", f"### {backend}: {LABELS[phase]}", "",
                      f"- GIL held {100 * found['gil_held_share']:.0f}% of the phase; {found['threads_runnable']} "
                      "threads running or runnable at a time; busy threads at a time: "
                      + ", ".join(f"{role} {n}" for role, n in found["busy_threads"].items()) + ".",
                      "- Running, by thread: " + ranked(found["cpu_by_role"]),
                      "- Running, by component (innermost frame): " + ranked(found["cpu_by_component"]),
                      "- Holding the GIL, by component: " + ranked(found["gil_by_component"]),
                      "- Running, inclusive: " + ranked(found["cpu_inclusive"], top=len(INCLUSIVE)),
                      f"- Request path (request and listener threads), thread-ms per request: busy {path['busy']}, "
                      f"running {path['on_cpu']}, holding the GIL {path['holding_gil']}, waiting for the GIL (in "
                      f"Python code, not running) {path['waiting_for_gil_at_least']}; waiting, by place: "
                      + ", ".join(f"{k} {v}" for k, v in path["off_cpu_by_place"].items() if v >= 0.5)]
            pool = data.get("pools", {}).get(phase)
            if pool and pool["snapshots"]:
                parts.append(f"- Pools on the ack path, over {pool['snapshots']} snapshots while requests were in flight: "
                             f"listener threads working {pool['listeners_working_mean']} on average "
                             f"({pool['listeners_after_ack_mean']} of them after their ack), all of them in "
                             f"{100 * pool['listener_pool_full_share']:.0f}% of snapshots; request threads in a request "
                             f"{pool['requests_mean']} (at most {pool['requests_max']}), of them waiting in Bolt's poll "
                             f"for a listener thread's ack {pool['requests_awaiting_ack_mean']}, in the database "
                             f"{pool['requests_in_database_mean']}, in a thread pool's submit "
                             f"{pool['requests_in_pool_submit_mean']}.")
    return "\n".join(parts)


def ranked(shares: list[tuple[str, float]], top: int = 8) -> str:
    return ", ".join(f"{name} {share}%" for name, share in shares[:top])


# -- other counts of workers, processes and threads --------------------------------------------------

SWEEP: tuple[tuple[str, int, serve_proc.Gunicorn | None], ...] = (
    ("signoff serve (1 process × 32 threads), 4 run workers", 4, None),
    ("signoff serve, 1 run worker", 1, None),
    ("signoff serve, 2 run workers", 2, None),
    ("signoff serve, 8 run workers", 8, None),
    ("signoff serve, 16 run workers", 16, None),
    ("gunicorn 1 process × 32 threads, 4 run workers", 4, serve_proc.Gunicorn(1, 32)),
    ("gunicorn 1 process × 8 threads, 4 run workers", 4, serve_proc.Gunicorn(1, 8)),
    ("gunicorn 1 process × 64 threads, 4 run workers", 4, serve_proc.Gunicorn(1, 64)),
    ("gunicorn 2 processes × 16 threads, 2 run workers each", 2, serve_proc.Gunicorn(2, 16)),
    ("gunicorn 2 processes × 32 threads, 4 run workers each", 4, serve_proc.Gunicorn(2, 32)),
    ("gunicorn 4 processes × 8 threads, 1 run worker each", 1, serve_proc.Gunicorn(4, 8)),
)


def sweep(backends: tuple[str, ...], postgres_url: str | None, burst: int = 100) -> dict[str, Any]:
    result: dict[str, Any] = {"burst": burst, "backends": {}}
    for backend in backends:
        rows = []
        for label, workers, gunicorn in SWEEP:
            with fresh_database(backend, postgres_url) as url:
                if url is None:
                    break
                print(f"sweep: {backend}, {label} ...", file=sys.stderr, flush=True)
                rows.append({"config": label, **measure(url, burst, workers=workers, gunicorn=gunicorn)})
        if rows:
            result["backends"][backend] = rows
    return result


def sweep_markdown(result: dict[str, Any]) -> str:
    kinds = (*KINDS, "click_to_tool")
    header = (["database", "configuration"] + [f"{LABELS[k]} p50 / p99" for k in kinds]
              + ["server CPU (s)", "other CPU meanwhile (s)"])
    rows = []
    for backend, found in result["backends"].items():
        for row in found:
            usage = row["usage"].values()
            rows.append([backend, row["config"]] + [f"{ms(row[k]['median_ms'])} / {ms(row[k]['p99_ms'])}" for k in kinds]
                        + [f"{sum(u['server_cpu_s'] for u in usage):.1f}", f"{sum(u['others_cpu_s'] for u in usage):.1f}"])
    return (f"Bursts of {result['burst']}; times in ms. Other CPU: what else the cores ran during the bursts "
            "(PostgreSQL, other programs).\n\n" + report.table(header, rows))


# -- the report --------------------------------------------------------------------------------------

LABELS = {"start_command": "`/signoff <goal>` (starts a run)", "approve_click": "Approve click",
          "list_command": "`/signoff list`", "click_to_tool": "click → approved tool has run (ledger)"}


def markdown(result: dict[str, Any]) -> str:
    if "skipped" in result:
        return f"Not measured: {result['skipped']}."
    burst, steady = result["plan"]["burst"], result["plan"]["steady"]
    count = round(steady["rate"] * steady["seconds"])
    parts = [f"**Burst:** {burst} concurrent signed requests per burst, each burst released at once; times in ms.",
             "", latency_table(result, lambda data: data, with_cpu=True), "",
             f"**Steady:** {steady['rate']:g} requests a second for {steady['seconds']:g} s ({count} of each kind, "
             "an open loop: each leaves on time whatever became of the earlier ones); times in ms.", "",
             latency_table(result, lambda data: data["steady"], with_cpu=False), ""]
    parts.append(targets(result))
    for backend, data in result["backends"].items():
        parts += ["", f"`signoff serve` resident memory after the bursts ({backend}): "
                  f"{data['rss_after']['rss_mib']} MiB (gunicorn arbiter + worker)."]
    parts += ["", "CPU seconds while measuring (server / load generator and FakeSlack / everything else: "
              "PostgreSQL, other programs):"]
    for backend, data in result["backends"].items():
        for name, usage in (("burst", data["usage"]), ("steady", data["steady"]["usage"])):
            spent = [sum(u[key] for u in usage.values()) for key in ("server_cpu_s", "bench_cpu_s", "others_cpu_s")]
            parts.append(f"- {backend}, {name}: " + " / ".join(f"{x:.1f}" for x in spent))
    return "\n".join(parts)


def latency_table(result: dict[str, Any], part: Callable[[dict[str, Any]], dict[str, Any]], with_cpu: bool) -> str:
    rows = []
    for backend, data in result["backends"].items():
        found = part(data)
        for key, label in LABELS.items():
            stats = found[key]
            codes = ", ".join(f"{n}× {code}" for code, n in sorted(stats.get("statuses", {}).items())) or "–"
            row = [backend, label, ms(stats["median_ms"]), ms(stats["p99_ms"]), ms(stats["max_ms"]), codes]
            if with_cpu:
                usage = found["usage"].get(key)
                row.append(ms(usage["server_cpu_ms_per_request"]) if usage else "–")
            rows.append(row)
    header = ["database", "request", "p50", "p99", "max", "HTTP statuses"]
    return report.table(header + (["server CPU per request (ms)"] if with_cpu else []), rows)


def targets(result: dict[str, Any]) -> str:
    """The issue's targets, each met or missed, per database."""
    lines = ["Targets (p99):"]
    for backend, data in result["backends"].items():
        burst = max(data[k]["p99_ms"] for k in KINDS)
        steady = max(data["steady"][k]["p99_ms"] for k in KINDS)
        tool = max(data["click_to_tool"]["p99_ms"], data["steady"]["click_to_tool"]["p99_ms"])
        lines.append(f"- {backend}: burst ack ≤ {TARGETS_MS['burst']} ms {report.verdict(burst <= TARGETS_MS['burst'])} "
                     f"(worst {ms(burst)}); steady ack ≤ {TARGETS_MS['steady']} ms "
                     f"{report.verdict(steady <= TARGETS_MS['steady'])} (worst {ms(steady)}); click → tool ≤ "
                     f"{TARGETS_MS['click_to_tool']} ms {report.verdict(tool <= TARGETS_MS['click_to_tool'])} "
                     f"(burst {ms(data['click_to_tool']['p99_ms'])}, steady "
                     f"{ms(data['steady']['click_to_tool']['p99_ms'])})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.slack_ack", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", action="store_true", help="record the bursts with py-spy and rank where time goes")
    parser.add_argument("--sweep", action="store_true", help="the burst with other run worker, process, thread counts")
    parser.add_argument("--blocking", action="store_true", help="with --profile: py-spy pauses the server to sample")
    parser.add_argument("--repeat", type=int, default=2, help="with --profile: bursts per py-spy pass (default 2)")
    parser.add_argument("--quick", action="store_true", help="bursts of 5 on SQLite: checks the script, not the speed")
    args = parser.parse_args(argv)
    url = pg.postgres_url()
    postgres = url if pg.reachable(url) else None
    backends, burst = ("sqlite",) if args.quick else ("sqlite", "postgresql"), 5 if args.quick else 100
    if args.profile:
        found = profile(backends, postgres, report.RESULTS / "slack_profile", burst, not args.blocking, args.repeat)
        report.save_json("slack_profile", found)
        print(profile_markdown(found))
    if args.sweep:
        found = sweep(backends, postgres, burst)
        report.save_json("slack_sweep", found)
        print(sweep_markdown(found))
    if not (args.profile or args.sweep):
        found = run(args.quick, postgres)
        report.save_json("slack", found)
        print(markdown(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
