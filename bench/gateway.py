"""Benchmark: what the MCP gateway adds to a read, against the same upstream called directly.

The upstream is `mcp-server-time` (`get_current_time`, read-only by its annotations), over stdio
with the official MCP client SDK both times. Through the gateway, each call is also asked of a real
`signoff serve` (HTTP mode, SQLite file) with the Python client: the policy allows the read, then
the upstream is called. The overhead is the median through the gateway minus the median direct.

Calls are made back to back, and again one every `PACE_S` (a model's turn between two calls is far
longer, and the server finishes the last run meanwhile). Where the time goes is measured beside:
each of the approval API's steps a read takes (ask, start, outcome), from the Python client.

`python -m bench.gateway [--quick]` prints the table; `python -m bench --only gateway` saves it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import report, serve_proc
from bench.stats import ms, summary

TOOL, ARGS = "get_current_time", {"timezone": "UTC"}
PACE_S = 0.1
UPSTREAM = [sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]


async def _timed(command: list[str], env: dict[str, str] | None, tool: str, n: int, pace_s: float = 0.0
                 ) -> list[float]:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    parameters = StdioServerParameters(command=command[0], args=command[1:], env=env, cwd=str(report.ROOT))
    seconds = []
    async with Client(stdio_client(parameters)) as client:
        await client.call_tool(tool, ARGS)  # warm: the first call pays for imports and connections
        for _ in range(n):
            began = time.perf_counter()
            result = await client.call_tool(tool, ARGS)
            seconds.append(time.perf_counter() - began)
            assert not result.is_error, result
            if pace_s:
                await asyncio.sleep(pace_s)
    return seconds


async def _steps(url: str, secret: str, n: int) -> dict[str, list[float]]:
    """The approval API's steps of one read, each timed from the Python client as the gateway makes them:
the ask that starts the call the policy allows, and the outcome."""
    from signoff.client import AsyncSignoff

    steps: dict[str, list[float]] = {"ask_and_start": [], "outcome": []}
    async with AsyncSignoff(url, secret) as signoff:
        for i in range(n + 1):
            began = time.perf_counter()
            approval = await signoff.request(f"mcp__time__{TOOL}", ARGS, key=f"bench-steps-{i}", side_effect=False,
                                             start=True)
            assert approval.started_here, approval
            await approval.start()  # asks nothing more: the request started it
            started = time.perf_counter()
            await approval.succeeded({"bench": i})
            if i:  # the first pays for connections
                steps["ask_and_start"].append(started - began)
                steps["outcome"].append(time.perf_counter() - started)
    return steps


def _key(database_url: str, name: str = "bench-gateway") -> str:
    from datetime import UTC, datetime

    from signoff.runtime.adapters.api_keys import SqlApiKeys
    from signoff.runtime.adapters.db import make_engine, upgrade
    from signoff.runtime.api_keys import ApiKey, new_callback_secret, new_secret, secret_hash

    engine = make_engine(database_url)
    upgrade(engine)
    secret = new_secret()
    SqlApiKeys(engine).create_key(ApiKey(name, serve_proc.CHANNEL, ("*",), None,
                                         created_at=datetime.now(UTC)), secret_hash(secret), new_callback_secret())
    engine.dispose()
    return secret


def run(quick: bool = False) -> dict[str, Any]:
    import anyio

    n = 10 if quick else 200
    paced = 10 if quick else 50
    direct = anyio.run(_timed, UPSTREAM, None, TOOL, n)
    with tempfile.TemporaryDirectory(prefix="signoff-bench-gateway-") as workdir:
        url = f"sqlite:///{Path(workdir) / 'signoff.db'}"
        secret = _key(url)
        config = Path(workdir) / "servers.json"
        config.write_text(json.dumps({"mcpServers": {"time": {"command": UPSTREAM[0], "args": UPSTREAM[1:]}}}))
        server = serve_proc.start(url)
        try:
            env = {"PYTHONPATH": str(report.ROOT), "SIGNOFF_URL": f"http://127.0.0.1:{server.port}",
                   "SIGNOFF_API_KEY": secret}
            gateway = [sys.executable, "-m", "signoff.bot.cli", "gateway", "--config", str(config)]
            through = anyio.run(_timed, gateway, env, f"mcp__time__{TOOL}", n)
            through_paced = anyio.run(_timed, gateway, env, f"mcp__time__{TOOL}", paced, PACE_S)
            # Another key: the gateway's made three requests a call, up to the API's rate per key.
            steps = anyio.run(_steps, env["SIGNOFF_URL"], _key(url, "bench-steps"), paced)
        finally:
            server.stop()
    result = {"n": n, "paced_n": paced, "direct": summary(direct), "gateway": summary(through),
              "gateway_paced": summary(through_paced), "steps": {k: summary(v) for k, v in steps.items()}}
    result["overhead_median_ms"] = result["gateway"]["median_ms"] - result["direct"]["median_ms"]
    return result


def markdown(result: dict[str, Any]) -> str:
    direct, gateway, paced = result["direct"], result["gateway"], result["gateway_paced"]
    rows = [["mcp-server-time, called directly", ms(direct["median_ms"]), ms(direct["p99_ms"])],
            ["the same, through `signoff gateway`", ms(gateway["median_ms"]), ms(gateway["p99_ms"])],
            [f"the same, one call every {PACE_S * 1000:g} ms ({result['paced_n']} calls)", ms(paced["median_ms"]),
             ms(paced["p99_ms"])]]
    words = {"ask_and_start": "ask and start (`POST /v1/approvals` with `start`: the policy allows it, the run "
                              "and the ledger row are recorded)",
             "outcome": "outcome (recorded, the run ends)"}
    steps = [[words[name], ms(step["median_ms"]), ms(step["p99_ms"])] for name, step in result["steps"].items()]
    return "\n".join([
        f"A read (`get_current_time`) over stdio with the MCP client SDK, {result['n']} one after another; "
        "through the gateway each call is also asked of `signoff serve` (SQLite file), which allows it:", "",
        report.table(["path", "median (ms)", "p99 (ms)"], rows), "",
        f"The gateway adds **{ms(result['overhead_median_ms'])} ms** at the median back to back, "
        f"**{ms(paced['median_ms'] - direct['median_ms'])} ms** paced (goal: under 5 ms).", "",
        "Where it goes: the approval API's steps of one read, from the Python client:", "",
        report.table(["step", "median (ms)", "p99 (ms)"], steps),
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    print(markdown(run(parser.parse_args().quick)), file=sys.stdout)


if __name__ == "__main__":
    main()
