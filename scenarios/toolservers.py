"""The external tool servers of the tool-fault scenarios, each a real process or socket Signoff talks to,
each applying its effects to the world's effects log in the lines `scenarios.toolset` writes, so the
invariants count them like any other effect.

- `python -m scenarios.toolservers DIR NAME EFFECTS`: an MCP server over stdio, started (and
  restarted) by `signoff serve` as server NAME. `write_note` is a side effect; armed by the scenario
  (`arm_mcp_write`), its next call applies the note or not and then hangs, saying so in DIR, until
  the scenario SIGKILLs the process. `whoami` is a read that answers with the process id.
- `FaultApi(effects, tool)`: an HTTP API on 127.0.0.1 in a thread of the scenario. `POST /refunds` applies
  a refund once per `Idempotency-Key`, as a payment API does; armed (`arm`), its next call applies
  it and then stalls past the tool's time limit, or resets the connection. `GET /orders/{order}` reads.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

from scenarios.toolset import append_effect, read_effects
from signoff.tools.mcp.connection import IDEMPOTENCY_META_KEY
from signoff.tools.mcp.toolset import tool_name

MCP_WRITE = "write_note"
MCP_READ = "whoami"
HANG_S = 30.0
"""How long an armed MCP write hangs when nobody kills its server (then it fails, having said so)."""
McpFault = Literal["after_effect", "before_effect"]
"""Where an armed MCP write hangs: after applying the note, or before."""
ApiFault = Literal["stall", "reset"]
"""What an armed refund does once applied: stall past the time limit, or reset the connection."""
STALL_S = 8.0
"""How long a stalled refund holds its connection before answering (unless the API is closed first)."""
REFUNDS = "/refunds"
ORDERS = "/orders/"


def _append_line(path: Path, line: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as out:
        fcntl.flock(out, fcntl.LOCK_EX)
        out.write(json.dumps(line, sort_keys=True) + "\n")
        out.flush()
        os.fsync(out.fileno())


# -- the MCP server ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class McpServerFiles:
    """What the MCP server tells the scenario, in its directory: each life (`pid`, `ppid`), each
    write call as it arrived, each armed write as it hangs (`applied` or not), and the arming."""

    directory: Path

    @property
    def lives(self) -> Path:
        return self.directory / "lives.jsonl"

    @property
    def calls(self) -> Path:
        return self.directory / "calls.jsonl"

    @property
    def hanging(self) -> Path:
        return self.directory / "hanging.jsonl"

    @property
    def armed(self) -> Path:
        return self.directory / "armed"

    @staticmethod
    def read(which: Path) -> list[dict[str, Any]]:
        """The lines written to one of the files so far (a torn last line, from a kill, is skipped)."""
        return read_effects(which)


def mcp_server_entry(files: McpServerFiles, name: str, effects: Path, root: Path, timeout_s: float) -> dict[str, Any]:
    """The `mcpServers` entry that starts this MCP server with the interpreter running the scenario."""
    files.directory.mkdir(parents=True, exist_ok=True)
    return {"command": sys.executable, "args": ["-m", "scenarios.toolservers", str(files.directory), name, str(effects)],
            "cwd": str(root), "env": {"PYTHONPATH": str(root)}, "timeout": timeout_s}


def arm_mcp_write(files: McpServerFiles, fault: McpFault) -> None:
    """Make the server's next `write_note` hang at `fault` (written whole, then moved in place)."""
    staged = files.armed.with_suffix(".staged")
    staged.write_text(fault, encoding="utf-8")
    os.replace(staged, files.armed)


def _take_armed(files: McpServerFiles) -> str | None:
    """The fault armed for this call, taken so that no other call gets it (a rename is atomic)."""
    taken = files.armed.with_name(f"armed.taken.{os.getpid()}.{time.monotonic_ns()}")
    try:
        os.rename(files.armed, taken)
    except FileNotFoundError:
        return None
    fault = taken.read_text(encoding="utf-8").strip()
    taken.unlink()
    return fault


def serve_mcp(files: McpServerFiles, name: str, effects: Path) -> None:
    """Run the MCP server over stdio until its client goes away (or it is killed)."""
    server = MCPServer("scenario-faults")
    write_tool = tool_name(name, MCP_WRITE)
    _append_line(files.lives, {"pid": os.getpid(), "ppid": os.getppid(), "at": time.time()})

    @server.tool(annotations=ToolAnnotations(read_only_hint=True), description="This server's process id.")
    def whoami() -> dict[str, int]:
        return {"pid": os.getpid()}

    @server.tool(name=MCP_WRITE, description="Write a note to someone (not idempotent: every call writes one).")
    def write_note(to: str, text: str, ctx: Context) -> dict[str, Any]:
        key = str((ctx.request_context.meta or {}).get(IDEMPOTENCY_META_KEY) or "")
        fault = _take_armed(files)
        _append_line(files.calls, {"key": key, "pid": os.getpid(), "fault": fault, "at": time.time()})
        applied = False
        if fault != "before_effect":
            applied = append_effect(effects, write_tool, {"to": to, "text": text}, key)
        if fault is not None:
            _append_line(files.hanging, {"key": key, "pid": os.getpid(), "applied": applied, "at": time.time()})
            time.sleep(HANG_S)
            raise RuntimeError("nobody killed this server while it hung")
        return {"written": True, "to": to}

    server.run()


# -- the HTTP API --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Seen:
    """One request as it arrived: method, path, its Idempotency-Key, and when (monotonic seconds)."""

    method: str
    path: str
    key: str | None
    at: float


class FaultApi:
    """`with FaultApi(effects, tool) as api:` serves on `api.url`; `tool` is the name Signoff calls the
    refund endpoint by (the effects log names the call as Signoff does)."""

    def __init__(self, effects: Path, tool: str) -> None:
        self.effects, self.tool = effects, tool
        self.requests: list[Seen] = []
        self.faulted: list[tuple[str, ApiFault]] = []
        """(key, fault) of each refund an armed fault ended, in order."""
        self._armed: list[ApiFault] = []
        self._holding: set[str] = set()
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _api_handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True,
                                        name="fault-api")

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def arm(self, fault: ApiFault) -> None:
        """Make the next refund end with `fault` once it is applied."""
        with self._lock:
            self._armed.append(fault)

    def posts(self, key: str) -> int:
        """Refund requests that carried `key` as their Idempotency-Key."""
        with self._lock:
            return sum(1 for r in self.requests if r.method == "POST" and r.key == key)

    def stalling(self, key: str) -> bool:
        """Whether the refund with `key` is holding its connection right now."""
        with self._lock:
            return key in self._holding

    def seen(self, method: str) -> list[Seen]:
        """Every request of `method` so far, in order."""
        with self._lock:
            return [r for r in self.requests if r.method == method]

    def __enter__(self) -> FaultApi:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()  # a stalled refund stops holding its connection
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def _arrived(self, seen: Seen) -> None:
        with self._lock:
            self.requests.append(seen)

    def _take_fault(self, key: str) -> ApiFault | None:
        """The fault armed for this refund, if one is (each armed fault ends one refund)."""
        with self._lock:
            if not self._armed:
                return None
            fault = self._armed.pop(0)
            self.faulted.append((key, fault))
            return fault

    def _stall(self, key: str) -> None:
        """Hold the refund's connection, answering nothing, until `STALL_S` passed or the API closes."""
        with self._lock:
            self._holding.add(key)
        self._closing.wait(STALL_S)
        with self._lock:
            self._holding.discard(key)

    def _refund(self, body: dict[str, Any], key: str) -> bool:
        """Apply a refund once per key; whether this request applied it."""
        return append_effect(self.effects, self.tool, body, key, dedupe=True, log_repeat=False)


def _api_handler(api: FaultApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
            pass

        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            api._arrived(Seen("GET", self.path, None, time.monotonic()))
            if not self.path.startswith(ORDERS):
                return self._send(404, {"error": "no such route"})
            return self._send(200, {"order": self.path.removeprefix(ORDERS), "status": "paid"})

        def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
            key = self.headers.get("Idempotency-Key")
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            api._arrived(Seen("POST", self.path, key, time.monotonic()))
            if self.path != REFUNDS:
                return self._send(404, {"error": "no such route"})
            if not key:
                return self._send(400, {"error": "a refund needs an Idempotency-Key"})
            applied = api._refund(body, key)
            match api._take_fault(key):
                case "stall":
                    api._stall(key)
                case "reset":
                    # SO_LINGER 0: closing sends a TCP reset, not an orderly end of the stream.
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.connection.close()
                    self.close_connection = True
                    return None
            return self._send(201 if applied else 200, {"refunded": body.get("amount"), "replayed": not applied})

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:
                self.close_connection = True  # the client gave up waiting: what a stall expects

    return Handler


if __name__ == "__main__":
    directory, server_name, effects_log = sys.argv[1:4]
    serve_mcp(McpServerFiles(Path(directory)), server_name, Path(effects_log))
