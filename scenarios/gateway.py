"""The MCP gateway attacked: the gateway killed while a write waits for its approval, and one
JSON-RPC request sent again (twice at once while it waits, and once more after it ran).

The client is the scenario, speaking JSON-RPC lines to a real `signoff gateway` process, which asks
a real `signoff serve` with a key; the upstream is the tool-fault scenarios' MCP server, which writes
each note it is asked for to the world's effects log, under the key the gateway passes, so the
invariants check it as any side effect: approved (I1), once (I2).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

from scenarios.api import SCRIPT, _approve, _key
from scenarios.drive import has_ended
from scenarios.outcome import Outcome, observed
from scenarios.toolservers import MCP_WRITE, McpServerFiles, mcp_server_entry
from scenarios.toolset import TOOLS
from scenarios.world import ROOT, Policy, World, wait_until
from signoff.runtime.caller_runs import CallerCall
from signoff.runtime.state import TERMINAL
from signoff.tools.mcp.toolset import tool_name

GATEWAY = [sys.executable, "-m", "signoff.bot.cli", "gateway", "--config"]
SERVER = "notes"
WRITE = tool_name(SERVER, MCP_WRITE)
GATEWAY_TOOLS = [*TOOLS, CallerCall(tool=WRITE, args={}).as_tool()]
"""The world's tools as the invariants count effects: the notes the gateway's calls write are side
effects, not idempotent, so one written twice is a violation (I2)."""
TTL_S = 8


class RawGateway:
    """`signoff gateway` spoken to in JSON-RPC lines, one answer queue per request id."""

    def __init__(self, config: Path, env: dict[str, str]) -> None:
        self.process = subprocess.Popen([*GATEWAY, str(config)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, env=env, cwd=ROOT, text=True)
        self._answers: dict[Any, queue.Queue[dict[str, Any]]] = {}
        self.notifications: list[str] = []
        """The methods of the notifications the gateway sent, in order."""
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.request(0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                       "clientInfo": {"name": "raw-test-client", "version": "1"}})
        self.initialized = self.answer(0)
        self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def request(self, request_id: Any, method: str, params: dict[str, Any]) -> None:
        self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})

    def call(self, request_id: Any, tool: str, args: dict[str, Any]) -> None:
        self.request(request_id, "tools/call", {"name": tool, "arguments": args})

    def answer(self, request_id: Any, timeout: float = 60) -> dict[str, Any]:
        return self._queue(request_id).get(timeout=timeout)

    def kill(self) -> None:
        self.process.kill()
        self._closed()

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self._closed()

    def _closed(self) -> None:
        self.process.wait(30)
        self._reader.join(30)
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None and not pipe.closed:
                with contextlib.suppress(BrokenPipeError):  # the gateway died with unread input
                    pipe.close()

    def _send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()

    def _queue(self, request_id: Any) -> queue.Queue[dict[str, Any]]:
        with self._lock:
            return self._answers.setdefault(request_id, queue.Queue())

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            message = json.loads(line)
            if "id" in message and "method" not in message:
                self._queue(message["id"]).put(message)
            elif "id" not in message and "method" in message:
                with self._lock:
                    self.notifications.append(message["method"])


def _gateway(world: World, serve: Any) -> RawGateway:
    """A gateway in front of the notes server, asking `serve` with a key of the world's."""
    config = world.dir / "gateway.json"
    entry = mcp_server_entry(McpServerFiles(world.dir / "notes"), SERVER, world.effects, ROOT, 10.0)
    config.write_text(json.dumps({"mcpServers": {SERVER: entry}}), encoding="utf-8")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp"),
           "PYTHONPATH": str(ROOT), "SIGNOFF_URL": f"http://127.0.0.1:{serve.port}", "SIGNOFF_API_KEY": _key(world)}
    return RawGateway(config, env)


def _pending(world: World) -> Any:
    return wait_until(lambda: next((a for a in world.db.store.list_approvals(status="pending", limit=20)
                                    if a.tool == WRITE), None), 60, what=f"the approval of {WRITE}")


def _text(answer: dict[str, Any]) -> str:
    return " ".join(block.get("text", "") for block in (answer.get("result") or {}).get("content", []))


def run_gateway_killed_while_waiting(kind: str = "sqlite") -> Outcome:
    """The gateway dies (SIGKILL) while its write waits for a person: the approval expires, and the
    note is never written, by anyone."""
    outcome = Outcome(f"gateway/killed-while-waiting/{kind}", "gateway", runs=1, faults=1)
    with observed(outcome, lambda: World(kind, SCRIPT, policy=Policy(ttl=timedelta(seconds=TTL_S)), tools=GATEWAY_TOOLS)) as world:
        serve = world.start()
        gateway = _gateway(world, serve)
        gateway.call(1, WRITE, {"to": "Ada", "text": "orphaned"})
        waiting = _pending(world)
        gateway.kill()
        expired = wait_until(lambda: next((a for a in world.db.store.list_approvals(run_id=waiting.run_id, limit=1)
                                           if a.status != "pending"), None), TTL_S + 40, what="the expiry")
        outcome.expect(expired.status == "expired", f"the orphaned approval ended {expired.status}, not expired")
        try:  # the expiry ends the caller's run too, once a worker takes it up after the sweep
            wait_until(lambda: has_ended(world, waiting.run_id, TERMINAL), 30, what="the run to end")
        except TimeoutError:
            outcome.expect(False, f"{waiting.run_id} did not end after its approval expired")
        written = [e for e in world.effect_lines() if e.get("tool") == WRITE]
        outcome.expect(not written, f"the note of a gateway that died waiting was written {len(written)} times")
        outcome.expect(world.db.store.executions(waiting.run_id) == [], "the orphaned call was started")
    return outcome


def run_retried_request(kind: str = "sqlite") -> Outcome:
    """One request (the same JSON-RPC id, the same call) sent twice at once while it waits, then once
    more after it ran: one approval, one note written, every other answer `Not run again`."""
    outcome = Outcome(f"gateway/retried-request/{kind}", "gateway", runs=1, races=1, hostile=2)
    with observed(outcome, lambda: World(kind, SCRIPT, tools=GATEWAY_TOOLS)) as world:
        serve = world.start()
        gateway = _gateway(world, serve)
        try:
            args = {"to": "Ada", "text": "once"}
            gateway.call(5, WRITE, args)
            gateway.call(5, WRITE, args)
            waiting = _pending(world)
            _approve(world, serve, waiting.run_id)
            answers = [gateway.answer(5), gateway.answer(5)]
            gateway.call(5, WRITE, args)
            answers.append(gateway.answer(5))
        finally:
            gateway.close()
        ran = [a for a in answers if not (a.get("result") or {}).get("isError")]
        outcome.expect(len(ran) == 1, f"{len(ran)} of the 3 answers ran the call: {[_text(a) for a in answers]}")
        refused = [a for a in answers if "Not run again" in _text(a)]
        outcome.expect(len(refused) == 2, f"the repeats were not refused as run already: {[_text(a) for a in answers]}")
        asked = [a for a in world.db.store.list_approvals(limit=20) if a.tool == WRITE]
        outcome.expect(len(asked) == 1, f"one request was asked about {len(asked)} times")
        written = [e for e in world.effect_lines() if e.get("tool") == WRITE]
        outcome.expect(len(written) == 1, f"the note was written {len(written)} times")
    return outcome
