"""The gateway over Streamable HTTP, at `/mcp` of a real `signoff serve` with `SIGNOFF_GATEWAY_CONFIG`:
the official MCP client's Streamable HTTP transport, an approval API key as its bearer token."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import anyio
import httpx
import httpx2
import pytest
from harness import (
    approve,
    commits,
    keys,
    make_repo,
    pending_approval,
    require_prerequisites,
    servers,
    stage_all,
    text_of,
    write_config,
)
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from scenarios.world import Policy, World

T = TypeVar("T")
COMMIT = "mcp__git__git_commit"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_repo(tmp_path_factory.mktemp("http") / "repo")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, repo: Path) -> Iterator[World]:
    require_prerequisites()
    here = tmp_path_factory.mktemp("http-config")
    upstreams = {name: entry for name, entry in servers(repo, here / "hostile.jsonl").items()
                 if name in ("git", "time", "hostile")}
    config = write_config(here / "servers.json", upstreams)
    world = World("sqlite", [{"final": "unused: the gateway proposes its own calls"}],
                  policy=Policy(ttl=timedelta(seconds=30)), env={"SIGNOFF_GATEWAY_CONFIG": str(config)})
    try:
        world.start()
        yield world
    finally:
        world.close()


@pytest.fixture(scope="module")
def secret(world: World) -> str:
    return keys(world, "create", "http-gateway", "--channel", "C0RUNS").splitlines()[-1]


def mcp_url(world: World) -> str:
    return f"http://127.0.0.1:{world.serves[0].port}/mcp"


def over_http(world: World, secret: str, body: Callable[[Client], Awaitable[T]], **headers: str) -> T:
    async def session() -> T:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {secret}", **headers},
                                  timeout=httpx2.Timeout(30, read=300))
        async with http, Client(streamable_http_client(mcp_url(world), http_client=http)) as client:
            return await body(client)
    return anyio.run(session)


def test_a_read_over_http_returns_at_once(world: World, secret: str, repo: Path) -> None:
    async def body(client: Client) -> tuple[list[str], Any]:
        listed = [tool.name for tool in (await client.list_tools()).tools]
        return listed, await client.call_tool("mcp__git__git_status", {"repo_path": str(repo)})

    listed, status = over_http(world, secret, body)
    assert {"mcp__git__git_status", COMMIT, "mcp__time__get_current_time"} <= set(listed)
    assert not status.is_error and "notes.txt" in text_of(status)


def test_a_commit_over_http_waits_for_approve_and_runs_once(world: World, secret: str, repo: Path) -> None:
    stage_all(repo)

    async def body(client: Client) -> Any:
        results: list[Any] = []

        async def committing() -> None:
            results.append(await client.call_tool(COMMIT, {"repo_path": str(repo), "message": "Over HTTP"}))

        async with anyio.create_task_group() as group:
            group.start_soon(committing)
            await anyio.to_thread.run_sync(lambda: approve(world, pending_approval(world, COMMIT)))
        return results[0]

    committed = over_http(world, secret, body)
    assert not committed.is_error, text_of(committed)
    assert commits(repo) == ["Over HTTP"]
    [row] = [a for a in world.db.store.list_approvals(limit=20) if a.tool == COMMIT]
    assert [e["status"] for e in world.db.store.executions(row.run_id)] == ["succeeded"]


@pytest.mark.parametrize("authorization", [None, "Bearer sk_signoff_not-a-key", "Basic dXNlcjpwYXNz"])
def test_a_missing_or_wrong_key_is_refused_before_the_gateway_answers(world: World, authorization: str | None) -> None:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
               **({"Authorization": authorization} if authorization else {})}
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    answer = httpx.post(mcp_url(world), json=listing, headers=headers, timeout=30)
    assert answer.status_code == 401 and answer.headers["WWW-Authenticate"].startswith("Bearer")
    assert "mcp__git" not in answer.text


def test_the_sdk_client_with_a_wrong_key_gets_nothing(world: World) -> None:
    async def body(client: Client) -> Any:
        return await client.list_tools()

    with pytest.raises(Exception) as refused:  # the SDK says only that the server answered an error
        over_http(world, "sk_signoff_wrong", body)
    assert "error response" in repr(refused.value)


def test_a_key_asks_only_about_the_tools_it_names(world: World, repo: Path) -> None:
    narrow = keys(world, "create", "http-time-only", "--channel", "C0RUNS", "--tools", "mcp__time__*").splitlines()[-1]

    async def body(client: Client) -> tuple[Any, Any]:
        now = await client.call_tool("mcp__time__get_current_time", {"timezone": "UTC"})
        status = await client.call_tool("mcp__git__git_status", {"repo_path": str(repo)})
        return now, status

    now, status = over_http(world, narrow, body)
    assert not now.is_error
    assert status.is_error and "may not ask about mcp__git__git_status" in text_of(status)

    async def listing(client: Client) -> list[str]:
        return [tool.name for tool in (await client.list_tools()).tools]

    # The list shows the key's tools only, whatever the client claims in the header the gateway uses.
    for claimed in ({}, {"X-Signoff-Key-Tools": '["*"]'}):
        listed = over_http(world, narrow, listing, **claimed)
        assert listed and all(name.startswith("mcp__time__") for name in listed), listed


def test_a_client_over_http_is_told_the_tool_list_changed(world: World, secret: str) -> None:
    async def body(client: Client) -> tuple[Any, Any, Any]:
        before = {tool.name: tool for tool in (await client.list_tools()).tools}
        async with client.listen(tools_list_changed=True) as changes:
            await client.call_tool("mcp__hostile__change_tools", {})
            with anyio.fail_after(30):
                told = await changes.__anext__()
        after = {tool.name: tool for tool in (await client.list_tools()).tools}
        return before, told, after

    before, told, after = over_http(world, secret, body)
    assert type(told).__name__ == "ToolsListChanged"
    assert "destination" not in before["mcp__hostile__move_note"].input_schema["properties"]
    assert "destination" in after["mcp__hostile__move_note"].input_schema["properties"]
