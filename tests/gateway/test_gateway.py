"""`signoff gateway` for real: the official MCP client SDK launches it over stdio, it starts
mcp-server-git (on a throwaway repository), mcp-server-time and a hostile server of ours, and asks a
real `signoff serve` about every call with a key made by `signoff keys create`; a person approves
or denies in (fake) Slack, signed as Slack signs it."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest
from harness import (
    approve,
    commits,
    deny,
    gateway_env,
    keys,
    make_repo,
    pending_approval,
    require_prerequisites,
    servers,
    stage_all,
    staged,
    text_of,
    write_config,
)
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from scenarios.gateway import GATEWAY, RawGateway
from scenarios.world import ROOT, Policy, World, wait_until
from signoff.bot.gateway.calls import MAX_FORWARDED_CHARS

T = TypeVar("T")
TTL = timedelta(seconds=15)
COMMIT = "mcp__git__git_commit"


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    require_prerequisites()
    world = World("sqlite", [{"final": "unused: the gateway proposes its own calls"}], policy=Policy(ttl=TTL))
    try:
        world.start()
        yield world
    finally:
        world.close()


@pytest.fixture(scope="module")
def env(world: World) -> dict[str, str]:
    secret = keys(world, "create", "gateway", "--channel", "C0RUNS").splitlines()[-1]
    return gateway_env(f"http://127.0.0.1:{world.serves[0].port}", secret)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "hostile.jsonl"


@pytest.fixture
def config(tmp_path: Path, repo: Path, log: Path) -> Path:
    return write_config(tmp_path / "servers.json", servers(repo, log))


def through_gateway(config: Path, env: dict[str, str], body: Callable[[Client], Awaitable[T]]) -> T:
    """`body(client)` with an MCP client connected to a `signoff gateway` it launched over stdio."""
    async def session() -> T:
        parameters = StdioServerParameters(command=sys.executable, args=[*GATEWAY[1:], str(config)], env=env,
                                           cwd=str(ROOT))
        async with Client(stdio_client(parameters)) as client:
            return await body(client)
    return anyio.run(session)


async def while_deciding(call: Awaitable[T], decide: Callable[[], None]) -> T:
    """`call`, while a person decides in Slack (in a thread: the clicks are blocking HTTP)."""
    results: list[T] = []

    async def calling() -> None:
        results.append(await call)

    async with anyio.create_task_group() as group:
        group.start_soon(calling)
        await anyio.to_thread.run_sync(decide)
    return results[0]


def hostile_calls(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


# -- reads and writes ---------------------------------------------------------------------------------


def test_the_gateway_lists_upstream_tools_under_signoff_names_with_descriptions_flattened(config: Path,
                                                                                       env: dict[str, str]) -> None:
    async def body(client: Client) -> Any:
        return (await client.list_tools()).tools

    tools = {tool.name: tool for tool in through_gateway(config, env, body)}
    assert {"mcp__git__git_status", COMMIT, "mcp__time__get_current_time", "mcp__hostile__lying_write"} <= set(tools)
    assert tools["mcp__git__git_status"].input_schema["properties"]["repo_path"]
    lying = tools["mcp__hostile__lying_write"].description or ""
    assert "\n" not in lying and "\u202e" not in lying and "\\u202e" in lying


def test_a_read_returns_at_once(config: Path, env: dict[str, str], repo: Path) -> None:
    async def body(client: Client) -> tuple[Any, Any]:
        status = await client.call_tool("mcp__git__git_status", {"repo_path": str(repo)})
        now = await client.call_tool("mcp__time__get_current_time", {"timezone": "UTC"})
        return status, now

    status, now = through_gateway(config, env, body)
    assert not status.is_error and "notes.txt" in text_of(status)
    assert not now.is_error and "UTC" in text_of(now)


def test_a_commit_waits_for_approve_and_runs_once_with_progress(world: World, config: Path, env: dict[str, str],
                                                                repo: Path) -> None:
    progress: list[str] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    async def body(client: Client) -> Any:
        added = await while_deciding(
            client.call_tool("mcp__git__git_add", {"repo_path": str(repo), "files": ["notes.txt"]},
                             progress_callback=on_progress),
            lambda: approve(world, pending_approval(world, "mcp__git__git_add")))
        assert not added.is_error, text_of(added)
        assert commits(repo) == []
        return await while_deciding(
            client.call_tool(COMMIT, {"repo_path": str(repo), "message": "Add notes"}, progress_callback=on_progress),
            lambda: approve(world, pending_approval(world, COMMIT)))

    committed = through_gateway(config, env, body)
    assert not committed.is_error and "committed" in text_of(committed).lower()
    assert commits(repo) == ["Add notes"]
    assert any("waiting for a person" in message for message in progress)


def test_a_denied_commit_is_an_error_result_naming_who_and_why_and_writes_nothing(
        world: World, config: Path, env: dict[str, str], repo: Path) -> None:
    async def body(client: Client) -> Any:
        return await while_deciding(
            client.call_tool("mcp__git__git_add", {"repo_path": str(repo), "files": ["notes.txt"]}),
            lambda: deny(world, pending_approval(world, "mcp__git__git_add"), "not on a Friday"))

    denied = through_gateway(config, env, body)
    assert denied.is_error
    assert "denied" in text_of(denied) and "U0LEAD" in text_of(denied) and "not on a Friday" in text_of(denied)
    assert staged(repo) == [] and commits(repo) == []


# -- a retried request, a gateway that dies -----------------------------------------------------------


def test_a_retried_request_runs_nothing_twice(world: World, config: Path, env: dict[str, str], repo: Path) -> None:
    (repo / "more.txt").write_text("more\n")
    stage_all(repo)
    gateway = RawGateway(config, env)
    try:
        gateway.call(7, COMMIT, {"repo_path": str(repo), "message": "Once"})
        approve(world, pending_approval(world, COMMIT))
        first = gateway.answer(7)["result"]
        assert not first.get("isError"), first
        gateway.call(7, COMMIT, {"repo_path": str(repo), "message": "Once"})
        again = gateway.answer(7)["result"]
    finally:
        gateway.close()
    assert again["isError"] and "Not run again" in again["content"][0]["text"]
    assert commits(repo) == ["Once"]


def test_a_gateway_killed_while_a_commit_waits_runs_nothing_and_the_approval_expires(
        world: World, config: Path, env: dict[str, str], repo: Path) -> None:
    stage_all(repo)
    gateway = RawGateway(config, env)
    gateway.call(1, COMMIT, {"repo_path": str(repo), "message": "Orphan"})
    waiting = pending_approval(world, COMMIT)
    gateway.kill()
    expired = wait_until(lambda: next((a for a in world.db.store.list_approvals(run_id=waiting.run_id, limit=1)
                                       if a.status != "pending"), None), TTL.total_seconds() + 30, what="the expiry")
    assert expired.status == "expired"
    assert commits(repo) == []


# -- a hostile server ---------------------------------------------------------------------------------


def test_a_write_that_claims_to_be_read_only_runs_unasked_unless_the_operator_overrides_it(
        world: World, config: Path, env: dict[str, str], log: Path) -> None:
    async def body(client: Client) -> tuple[Any, Any]:
        lied = await client.call_tool("mcp__hostile__lying_write", {"note": "trusted the annotation"})
        guarded = await while_deciding(
            client.call_tool("mcp__guarded__lying_write", {"note": "overridden"}),
            lambda: deny(world, pending_approval(world, "mcp__guarded__lying_write"), "no"))
        return lied, guarded

    lied, guarded = through_gateway(config, env, body)
    # The classification believes the server's annotation, as `signoff tools` shows it.
    assert not lied.is_error
    assert guarded.is_error and "denied" in text_of(guarded)
    assert [c["args"]["note"] for c in hostile_calls(log) if c["tool"] == "lying_write"] == ["trusted the annotation"]


def test_a_write_whose_server_hangs_or_dies_is_an_unknown_outcome_left_to_a_person(
        world: World, config: Path, env: dict[str, str], log: Path) -> None:
    approved: list[float] = []

    def approve_hang() -> None:
        approve(world, pending_approval(world, "mcp__hostile__hang_write"))
        approved.append(time.monotonic())

    async def body(client: Client) -> tuple[Any, Any]:
        hung = await while_deciding(client.call_tool("mcp__hostile__hang_write", {"note": "h"}), approve_hang)
        approved.append(time.monotonic() - approved[0])
        died = await while_deciding(client.call_tool("mcp__hostile__crash_write", {"note": "c"}),
                                    lambda: approve(world, pending_approval(world, "mcp__hostile__crash_write")))
        return hung, died

    hung, died = through_gateway(config, env, body)
    assert 3 <= approved[1] < 3 + 8  # cut at the tool's time limit (3 s), not left hanging
    for result in (hung, died):
        assert result.is_error and "Outcome unknown" in text_of(result) and "a person is asked" in text_of(result)
    for tool in ("mcp__hostile__hang_write", "mcp__hostile__crash_write"):
        [row] = [a for a in world.db.store.list_approvals(limit=50) if a.tool == tool][:1]
        assert [e["status"] for e in world.db.store.executions(row.run_id)] == ["started"]
    assert [c["tool"] for c in hostile_calls(log)] == ["hang_write", "crash_write"]


def test_a_huge_answer_is_cut_for_the_client_saying_so(config: Path, env: dict[str, str]) -> None:
    async def body(client: Client) -> Any:
        return await client.call_tool("mcp__hostile__huge_read", {})

    huge = through_gateway(config, env, body)
    head, note = huge.content[0].text, huge.content[-1].text
    assert set(head) == {"x"} and 300_000 < len(head) <= MAX_FORWARDED_CHARS
    assert "cut by Signoff: the server answered 4000042 characters" in note  # the text and the structured copy
    # The tool promises structured content (an output schema), which is not forwarded cut: the
    # result says so as an error, rather than a success the client would refuse.
    assert huge.is_error and "not its structured content" in note


def test_signoff_unreachable_refuses_every_call_reads_too(config: Path, env: dict[str, str], repo: Path) -> None:
    async def body(client: Client) -> tuple[Any, Any]:
        read = await client.call_tool("mcp__git__git_status", {"repo_path": str(repo)})
        write = await client.call_tool("mcp__git__git_add", {"repo_path": str(repo), "files": ["notes.txt"]})
        return read, write

    for refused in through_gateway(config, {**env, "SIGNOFF_URL": "http://127.0.0.1:9"}, body):
        assert refused.is_error and "could not be asked" in text_of(refused) and "fails closed" in text_of(refused)
    assert staged(repo) == []


# -- tool list changes --------------------------------------------------------------------------------


def test_a_tool_that_changes_while_its_call_waits_voids_the_approval_and_clients_are_told(
        world: World, config: Path, env: dict[str, str], log: Path) -> None:
    async def body(client: Client) -> tuple[Any, Any, Any]:
        results: dict[str, Any] = {}
        async with client.listen(tools_list_changed=True) as changes, anyio.create_task_group() as group:
            async def moving() -> None:
                results["moved"] = await client.call_tool("mcp__hostile__move_note", {"note": "n"})

            group.start_soon(moving)
            waiting = await anyio.to_thread.run_sync(pending_approval, world, "mcp__hostile__move_note")
            results["changed"] = await client.call_tool("mcp__hostile__change_tools", {})
            with anyio.fail_after(30):
                results["told"] = await changes.__anext__()
            await anyio.to_thread.run_sync(approve, world, waiting)
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        return results, listed, waiting

    results, listed, waiting = through_gateway(config, env, body)
    assert not results["changed"].is_error and type(results["told"]).__name__ == "ToolsListChanged"
    moved = results["moved"]
    assert moved.is_error and "changed since this call was proposed" in text_of(moved), text_of(moved)
    assert "no longer holds" in text_of(moved)
    # The approver agreed to the tool as it was; nothing ran, and the new arguments are offered.
    assert [c["tool"] for c in hostile_calls(log)] == ["change_tools"]
    assert "destination" in listed["mcp__hostile__move_note"].input_schema["properties"]
    assert world.db.store.executions(waiting.run_id) == []


def test_a_client_of_the_handshake_era_is_told_the_tool_list_changed(config: Path, env: dict[str, str]) -> None:
    gateway = RawGateway(config, env)  # it speaks the 2025-11-25 protocol, as most clients do today
    try:
        assert gateway.initialized["result"]["capabilities"]["tools"]["listChanged"] is True
        gateway.request(1, "tools/list", {})
        before = {tool["name"]: tool for tool in gateway.answer(1)["result"]["tools"]}
        gateway.call(2, "mcp__hostile__change_tools", {})
        assert not gateway.answer(2)["result"].get("isError")
        wait_until(lambda: "notifications/tools/list_changed" in gateway.notifications, 30,
                   what="the list change told to the client")
        gateway.request(3, "tools/list", {})
        after = {tool["name"]: tool for tool in gateway.answer(3)["result"]["tools"]}
    finally:
        gateway.close()
    assert "destination" not in before["mcp__hostile__move_note"]["inputSchema"]["properties"]
    assert "destination" in after["mcp__hostile__move_note"]["inputSchema"]["properties"]
