"""The policy in force decides a gateway call, over the upstream's annotations: a rule that asks about
every tool of a server makes its write that claims to be read-only wait for a person."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from harness import (
    deny,
    gateway_env,
    keys,
    make_repo,
    pending_approval,
    require_prerequisites,
    servers,
    text_of,
    write_config,
)
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from scenarios.drive import APPROVER
from scenarios.gateway import GATEWAY
from scenarios.world import ROOT, Policy, World

DISTRUST = """\
rules:
  - name: distrust-hostile
    tool: "mcp__hostile__*"
    decision: ask
"""


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    require_prerequisites()
    world = World("sqlite", [{"final": "unused: the gateway proposes its own calls"}],
                  policy=Policy(approvers=frozenset({APPROVER}), file=DISTRUST))
    try:
        world.start()
        yield world
    finally:
        world.close()


def test_a_policy_rule_makes_a_write_that_claims_to_be_read_only_ask(world: World, tmp_path: Path) -> None:
    log = tmp_path / "hostile.jsonl"
    config = write_config(tmp_path / "servers.json", servers(make_repo(tmp_path / "repo"), log))
    secret = keys(world, "create", "gateway", "--channel", "C0RUNS").splitlines()[-1]
    env = gateway_env(f"http://127.0.0.1:{world.serves[0].port}", secret)

    async def session() -> Any:
        parameters = StdioServerParameters(command=sys.executable, args=[*GATEWAY[1:], str(config)], env=env,
                                           cwd=str(ROOT))
        async with Client(stdio_client(parameters)) as client, anyio.create_task_group() as group:
            results: list[Any] = []

            async def lying() -> None:
                results.append(await client.call_tool("mcp__hostile__lying_write", {"note": "claims to read"}))

            group.start_soon(lying)
            waiting = await anyio.to_thread.run_sync(pending_approval, world, "mcp__hostile__lying_write")
            await anyio.to_thread.run_sync(deny, world, waiting, "a write, whatever it says")
        return results[0]

    denied = anyio.run(session)
    assert denied.is_error and "a write, whatever it says" in text_of(denied)
    written = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    assert written == []
