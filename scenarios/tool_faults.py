"""Tool servers dying or stalling in the middle of an approved side effect: a real MCP server SIGKILLed
while its write is in flight, and a real HTTP API that applies a refund, then stalls past the tool's
time limit or resets the connection.

Whether such a call took effect is unknown to Signoff, so its run must stop as `needs_reconciliation`
naming the call, and the call must never run again unless a person presses Retry (then once, with
the same key). A dead MCP server is restarted by Signoff and its tools work again; the other runs
carry on meanwhile. The servers (`scenarios.toolservers`) write each effect they apply to the
world's effects log, so the invariants count them like the scenario tools' own.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from scenarios.drive import APPROVER, Driver, approval_message, message_with, posted_approval
from scenarios.outcome import Outcome, observed
from scenarios.serve import Serve
from scenarios.toolservers import (
    MCP_READ,
    MCP_WRITE,
    REFUNDS,
    FaultApi,
    McpFault,
    McpServerFiles,
    arm_mcp_write,
    mcp_server_entry,
)
from scenarios.world import ROOT, World, wait_until
from signoff.bot.slack.blocks import APPROVE_ACTION, RECONCILE_DONE_ACTION, RECONCILE_RETRY_ACTION
from signoff.runtime.records import RunRecord
from signoff.tools.base import Tool
from signoff.tools.http.config import tool_name as http_tool_name
from signoff.tools.mcp import McpServers
from signoff.tools.mcp.toolset import tool_name as mcp_tool_name
from signoff.tools.registry import load_toolsets

SERVER = "faults"
WRITE = mcp_tool_name(SERVER, MCP_WRITE)
READ = mcp_tool_name(SERVER, MCP_READ)
MCP_TIMEOUT_S = 10.0
"""The MCP server's time limit per call: longer than the scenario takes to kill a hanging write."""
MCP_SCRIPT: list[dict[str, Any]] = [
    {"tool": WRITE, "args": {"to": "ada@example.com", "text": "Your refund is on its way."}},
    {"tool": READ, "args": {}},
    {"final": "Ada was written to."},
]

API = "shop"
REFUND = http_tool_name(API, "refund")
GET_ORDER = http_tool_name(API, "get_order")
API_TIMEOUT_S = 1.5
"""The refund's time limit: a stall of `toolservers.STALL_S` outlives it."""
API_SCRIPT: list[dict[str, Any]] = [
    {"tool": GET_ORDER, "args": {"order": "A-1001"}},
    {"tool": REFUND, "args": {"order": "A-1001", "amount": 42}},
    {"tool": GET_ORDER, "args": {"order": "A-1001"}},
    {"final": "A-1001 was refunded."},
]
QUIET_S = 3.0
"""How long a run waiting for reconciliation is watched for its call being made again by itself:
past a lease (2 s) and a few sweeps (1 s), when recovery would act on it."""


def _contracts(world: World, spec: str, *, mcp_config: Path | None = None,
               http_config: Path | None = None) -> list[Tool]:
    """The tools `spec` gives serve, loaded here too for their contracts (what the invariants read
    runs against: names, gates, arguments); an MCP server started to list them is stopped again."""
    servers = McpServers.from_file(mcp_config, os.environ) if mcp_config is not None else None
    try:
        return list(load_toolsets(spec, outbox=world.dir / "outbox", mcp=servers, http_config=http_config).values())
    finally:
        if servers is not None:
            servers.close()


# -- an MCP server SIGKILLed mid-call ------------------------------------------------------------------


def run_mcp_server_killed(kind: str = "sqlite", timeout: float = 40.0) -> Outcome:
    """Three runs on one serve: A's write is killed after the server applied the note (a person
    marks it done), B's before (a person retries it), and C waits for its approval meanwhile."""
    outcome = Outcome(f"tools/mcp-server-killed-mid-call/{kind}", "tools", runs=3)
    with observed(outcome, lambda: World(kind, MCP_SCRIPT)) as world:
        files = McpServerFiles(world.dir / "mcp-faults")
        config = world.dir / "mcp.json"
        config.write_text(json.dumps({"mcpServers": {SERVER: mcp_server_entry(
            files, SERVER, world.effects, ROOT, MCP_TIMEOUT_S)}}), encoding="utf-8")
        serve = world.start(SIGNOFF_TOOLS=f"mcp:{SERVER}", SIGNOFF_MCP_CONFIG=str(config))
        world.tools = _contracts(world, f"mcp:{SERVER}", mcp_config=config)
        driver = Driver(world, pick=lambda: serve)
        a, b, c = (driver.start(f"write to Ada ({name})") for name in ("A", "B", "C"))
        keys = {run_id: _posted(world, run_id).key for run_id in (a, b, c)}
        kills: list[tuple[int, float]] = []
        faults: list[tuple[str, McpFault]] = [(a, "after_effect"), (b, "before_effect")]
        for run_id, fault in faults:
            kills.append(_kill_mid_write(outcome, world, serve, files, run_id, keys[run_id], fault))
            outcome.faults += 1
            waiting = world.db.store.get_run(c, history=False)
            outcome.expect(waiting is not None and waiting.status == "awaiting_approval"
                           and _posted(world, c).status == "pending",
                           f"{c} is {waiting and waiting.status} after the server died under {run_id}'s call: "
                           "a run that was not calling it must be left as it was")
        # A person checks and marks A's note done (it was written), retries B's (it was not), approves C's.
        outcome.expect(driver.settle([a, b, c], timeout), f"the runs did not settle within {timeout:g}s")
        _expect_mcp_story(outcome, world, serve, files, {a: "done", b: "retry", c: None}, keys, kills)
    return outcome


def _kill_mid_write(outcome: Outcome, world: World, serve: Serve, files: McpServerFiles, run_id: str, key: str,
                    fault: McpFault) -> tuple[int, float]:
    """Approve the run's write with `fault` armed, SIGKILL the server while the write hangs, and check
    that the run stops for a person naming the call; the killed process id and when it was killed."""
    label = f"{run_id} ({fault})"
    arm_mcp_write(files, fault)
    _approve(world, serve, _posted(world, run_id).approval_id)
    hung = wait_until(lambda: next((h for h in files.read(files.hanging) if h["key"] == key), None), 20,
                      what=f"the write {key} hanging in the MCP server")
    outcome.expect(_in_flight(world, run_id, key),
                   f"{label}: while the write hangs, Signoff does not hold it as started on a consumed approval")
    os.kill(int(hung["pid"]), signal.SIGKILL)
    killed = (int(hung["pid"]), time.time())
    _expect_reconciliation(outcome, world, run_id, key, WRITE, label)
    applied = [e for e in world.effect_lines() if e["key"] == key]
    outcome.expect(len(applied) == (1 if fault == "after_effect" else 0) and bool(hung["applied"]) == bool(applied),
                   f"{label}: the server applied the note {len(applied)} times before it died")
    time.sleep(QUIET_S)
    calls = [call for call in files.read(files.calls) if call["key"] == key]
    outcome.expect(len(calls) == 1, f"{label}: the write reached the server {len(calls)} times before a person "
                                    "decided; a call of unknown outcome must not run again by itself")
    return killed


def _expect_mcp_story(outcome: Outcome, world: World, serve: Serve, files: McpServerFiles,
                      actions: dict[str, str | None], keys: dict[str, str], kills: list[tuple[int, float]]) -> None:
    """Every run is done and its note took effect once: reached the server once when marked done (or
    never asked about), twice when retried; serve's worker started the server again after each kill,
    and every run's later read was answered by a server that was alive."""
    lives = files.read(files.lives)
    workers = set(serve.workers)
    killed = {pid for pid, _ in kills}
    for pid, at in kills:
        outcome.expect(any(life["ppid"] in workers and life["at"] > at for life in lives),
                       f"the server killed as {pid} was not started again by serve's worker {sorted(workers)}: "
                       f"its lives were {lives}")
    alive = {life["pid"] for life in lives} - killed
    for run_id, action in actions.items():
        run = world.db.store.get_run(run_id)
        outcome.expect(run is not None and run.status == "done", f"{run_id} ended {run and run.status}, not done")
        applied = [e for e in world.effect_lines() if e["key"] == keys[run_id] and e["effect"]]
        outcome.expect(len(applied) == 1, f"{run_id}: its note took effect {len(applied)} times, not once")
        attempts = 2 if action == "retry" else 1
        calls = [call for call in files.read(files.calls) if call["key"] == keys[run_id]]
        outcome.expect(len(calls) == attempts,
                       f"{run_id}: its write reached the server {len(calls)} times, not {attempts}")
        reconciled = [e.get("action") for e in world.db.store.timeline(run_id) if e["type"] == "reconciled"]
        expected = [action] if action else []
        outcome.expect(reconciled == expected, f"{run_id}: reconciled {reconciled}, not {expected}")
        answers = [(e.get("result") or {}).get("pid") for e in _tool_entries(run, READ)]
        outcome.expect(len(answers) == 1 and answers[0] in alive,
                       f"{run_id}: its read after the write answered {answers}, not from a server that was alive")
    outcome.notes.append(f"server lives: {len(lives)} (the arbiter's check, the worker's, one per kill); "
                         f"killed: {len(kills)}; writes that reached it: {len(files.read(files.calls))}")


def _in_flight(world: World, run_id: str, key: str) -> bool:
    """The call is under way as Signoff records it: its approval used, its ledger row started."""
    approval = world.db.store.approval_for_key(key)
    started = [e for e in world.db.store.executions(run_id) if e["key"] == key and e["status"] == "started"]
    return approval is not None and approval.status == "consumed" and len(started) == 1


# -- an HTTP API stalling or resetting after it applied the call ---------------------------------------


def run_http_api_stalls(kind: str = "sqlite", timeout: float = 40.0) -> Outcome:
    """Three runs on one serve: X's refund stalls past its time limit (a person marks it done), Y's
    resets the connection (a person retries it, with the same key), and Z reads while X's stalls."""
    outcome = Outcome(f"tools/http-api-stalls-mid-call/{kind}", "tools", runs=3)
    with observed(outcome, lambda: World(kind, API_SCRIPT)) as world, FaultApi(world.effects, REFUND) as api:
        config = world.dir / "apis.json"
        config.write_text(json.dumps(_api_config(api.url)), encoding="utf-8")
        serve = world.start(SIGNOFF_TOOLS=f"http:{API}", SIGNOFF_HTTP_TOOLS=str(config))
        world.tools = _contracts(world, f"http:{API}", http_config=config)
        driver = Driver(world, pick=lambda: serve)
        x, y = (driver.start(f"refund A-1001 ({name})") for name in ("X", "Y"))
        keys = {run_id: _posted(world, run_id).key for run_id in (x, y)}

        api.arm("stall")
        _approve(world, serve, _posted(world, x).approval_id)
        wait_until(lambda: api.stalling(keys[x]), 10, what=f"{x}'s refund stalling in the API")
        reads_before = len(api.seen("GET"))
        z = driver.start("refund A-1001 (Z)")  # its first step reads while X's refund holds its connection
        keys[z] = _posted(world, z).key
        outcome.expect(len(api.seen("GET")) > reads_before and api.stalling(keys[x]),
                       f"{z}'s read was not answered while {x}'s refund stalled")
        outcome.faults += 1
        _expect_reconciliation(outcome, world, x, keys[x], REFUND, f"{x} (stall)")

        api.arm("reset")
        _approve(world, serve, _posted(world, y).approval_id)
        outcome.faults += 1
        _expect_reconciliation(outcome, world, y, keys[y], REFUND, f"{y} (reset)")
        time.sleep(QUIET_S)
        for run_id in (x, y):
            applied = [e for e in world.effect_lines() if e["key"] == keys[run_id]]
            outcome.expect(api.posts(keys[run_id]) == 1 and len(applied) == 1,
                           f"{run_id}: before a person decided, {api.posts(keys[run_id])} refunds were sent with its "
                           f"key and {len(applied)} applied; a call of unknown outcome must not run again by itself")

        # The API dedupes on Idempotency-Key, so a person may retry Y's: it must go out once more, same key.
        retry = wait_until(lambda: message_with(world, RECONCILE_RETRY_ACTION, y), 10, what=f"{y}'s Retry button")
        reply = serve.click(retry, RECONCILE_RETRY_ACTION, APPROVER)
        outcome.expect(reply.status == 200, f"Retry answered {reply.status}: {reply.body[:200]}")
        wait_until(lambda: api.posts(keys[y]) == 2, 10, what=f"{y}'s refund sent again after Retry")
        outcome.expect(driver.settle([x, y, z], timeout), f"the runs did not settle within {timeout:g}s")
        _expect_api_story(outcome, world, api, {x: 1, y: 2, z: 1}, keys)
    return outcome


def _api_config(base_url: str) -> dict[str, Any]:
    """`SIGNOFF_HTTP_TOOLS` for the fault API: a read of an order, and a refund (a POST: approved, not idempotent)."""
    order = {"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]}
    refund = {"type": "object", "properties": {"order": {"type": "string"}, "amount": {"type": "integer"}},
              "required": ["order", "amount"]}
    return {"apis": {API: {"base_url": base_url, "timeout": API_TIMEOUT_S, "tools": [
        {"name": "get_order", "method": "GET", "path": "/orders/{order}", "description": "Read one order.",
         "args": order},
        {"name": "refund", "method": "POST", "path": REFUNDS, "description": "Refund an order.", "args": refund},
    ]}}}


def _expect_api_story(outcome: Outcome, world: World, api: FaultApi, sent: dict[str, int],
                      keys: dict[str, str]) -> None:
    """Every run is done; each refund took effect once, sent `sent[run]` times with its own key (and
    with no other); every read of every run was answered."""
    for run_id, times in sent.items():
        run = world.db.store.get_run(run_id)
        outcome.expect(run is not None and run.status == "done", f"{run_id} ended {run and run.status}, not done")
        outcome.expect(api.posts(keys[run_id]) == times,
                       f"{run_id}: {api.posts(keys[run_id])} refunds were sent with its key, not {times}")
        applied = [e for e in world.effect_lines() if e["key"] == keys[run_id] and e["effect"]]
        outcome.expect(len(applied) == 1, f"{run_id}: its refund took effect {len(applied)} times, not once")
        reads = _tool_entries(run, GET_ORDER)
        outcome.expect(len(reads) == 2 and all((e.get("result") or {}).get("status") == 200 for e in reads),
                       f"{run_id}: its reads answered {[e.get('result') or e.get('error') for e in reads]}")
    posts = api.seen("POST")
    outcome.expect(len(posts) == sum(sent.values()) and {p.key for p in posts} == set(keys.values()),
                   f"the API saw refunds with keys {[p.key for p in posts]}: one per approved call, and Y's again")
    outcome.notes.append(f"refunds sent: {len(posts)}; reads: {len(api.seen('GET'))}; faults: "
                         f"{', '.join(fault for _, fault in api.faulted)}")


# -- shared ---------------------------------------------------------------------------------------------


def _posted(world: World, run_id: str) -> Any:
    return wait_until(lambda: posted_approval(world, run_id), 20, what=f"{run_id}'s approval card")


def _approve(world: World, serve: Serve, approval_id: str) -> None:
    card = wait_until(lambda: approval_message(world, approval_id), 10, what=f"the card of {approval_id}")
    reply = serve.click(card, APPROVE_ACTION, APPROVER)
    if reply.status != 200:
        raise AssertionError(f"Approve answered {reply.status}: {reply.body[:200]}")


def _expect_reconciliation(outcome: Outcome, world: World, run_id: str, key: str, tool: str, label: str) -> None:
    """The run stopped as `needs_reconciliation` on the call `tool` `key`, and Slack says so, naming it."""
    stopped = wait_until(lambda: _stopped(world, run_id), 15, what=f"{label} to stop")
    stop = stopped.stop or {}
    outcome.expect(stopped.status == "needs_reconciliation" and stop.get("key") == key and stop.get("tool") == tool,
                   f"{label}: the run is {stopped.status} ({stop}), not needs_reconciliation naming {tool} {key}")
    notice = wait_until(lambda: message_with(world, RECONCILE_DONE_ACTION, run_id), 10,
                        what=f"{label}'s reconciliation notice")
    shown = json.dumps(notice.get("blocks", []))
    outcome.expect(tool in shown and key in shown, f"{label}: the reconciliation notice does not name {tool} {key}")
    outcome.notes.append(f"{label}: {stop.get('reason')}")


def _stopped(world: World, run_id: str) -> RunRecord | None:
    run = world.db.store.get_run(run_id, history=False)
    return run if run is not None and run.status not in ("running", "awaiting_approval") else None


def _tool_entries(run: RunRecord | None, tool: str) -> list[dict[str, Any]]:
    """The run's history entries of `tool`'s results, in order."""
    history = run.state.get("history", []) if run is not None else []
    return [e for e in history if e.get("role") == "tool" and e.get("tool") == tool]
