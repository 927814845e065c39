"""Benchmark: what the MCP gateway adds to a read, against the same upstream called directly.

The upstream is `mcp-server-time` (`get_current_time`, read-only by its annotations), over stdio
with the official MCP client SDK both times. Through the gateway, each call is also asked of a real
`signoff serve` (HTTP mode, SQLite file) with the Python client: the policy allows the read, then
the upstream is called. The overhead is the median through the gateway minus the median direct.

`python -m bench.gateway [--quick]` prints the table; `python -m bench --only gateway` saves it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import report, serve_proc
from bench.stats import ms, summary

TOOL, ARGS = "get_current_time", {"timezone": "UTC"}
UPSTREAM = [sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]


async def _timed(command: list[str], env: dict[str, str] | None, tool: str, n: int) -> list[float]:
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
    return seconds


def _key(database_url: str) -> str:
    from datetime import UTC, datetime

    from signoff.runtime.adapters.api_keys import SqlApiKeys
    from signoff.runtime.adapters.db import make_engine, upgrade
    from signoff.runtime.api_keys import ApiKey, new_callback_secret, new_secret, secret_hash

    engine = make_engine(database_url)
    upgrade(engine)
    secret = new_secret()
    SqlApiKeys(engine).create_key(ApiKey("bench-gateway", serve_proc.CHANNEL, ("*",), None,
                                         created_at=datetime.now(UTC)), secret_hash(secret), new_callback_secret())
    engine.dispose()
    return secret


def run(quick: bool = False) -> dict[str, Any]:
    import anyio

    n = 10 if quick else 200
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
        finally:
            server.stop()
    result = {"n": n, "direct": summary(direct), "gateway": summary(through)}
    result["overhead_median_ms"] = result["gateway"]["median_ms"] - result["direct"]["median_ms"]
    return result


def markdown(result: dict[str, Any]) -> str:
    direct, gateway = result["direct"], result["gateway"]
    rows = [["mcp-server-time, called directly", ms(direct["median_ms"]), ms(direct["p99_ms"])],
            ["the same, through `signoff gateway`", ms(gateway["median_ms"]), ms(gateway["p99_ms"])]]
    return "\n".join([
        f"A read (`get_current_time`) over stdio with the MCP client SDK, {result['n']} one after another; "
        "through the gateway each call is also asked of `signoff serve` (SQLite file), which allows it:", "",
        report.table(["path", "median (ms)", "p99 (ms)"], rows), "",
        f"The gateway adds **{ms(result['overhead_median_ms'])} ms** at the median (goal: under 5 ms).",
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    print(markdown(run(parser.parse_args().quick)), file=sys.stdout)


if __name__ == "__main__":
    main()
