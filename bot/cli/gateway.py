"""`signoff gateway --config servers.json`: an MCP server on stdio that offers the tools of the
servers in the file, each call decided by Signoff through the approval API (`SIGNOFF_URL`,
`SIGNOFF_API_KEY`). An MCP client launches it; stdout is the protocol, so words go to stderr.
"""

from __future__ import annotations

import logging
import os

import click

from signoff.bot.cli.outcomes import EXIT_ERROR, EXIT_OK


@click.command()
@click.option("--config", "config", required=True, type=click.Path(dir_okay=False),
              help='The MCP servers to gate, in the usual {"mcpServers": {...}} format.')
@click.option("--url", envvar="SIGNOFF_URL", default="", show_envvar=True,
              help="Where `signoff serve` answers the approval API.")
@click.option("--api-key", envvar="SIGNOFF_API_KEY", default="", show_envvar=True,
              help="The key the gateway asks with (`signoff keys create`); prefer the variable.")
def gateway(config: str, url: str, api_key: str) -> int:
    """Serve MCP on stdio: every tool call of the servers in CONFIG is decided in Signoff first."""
    if not url.strip() or not api_key.strip():
        missing = " and ".join(n for n, v in (("SIGNOFF_URL", url), ("SIGNOFF_API_KEY", api_key)) if not v.strip())
        click.echo(f"error: {missing} not set: the gateway has nobody to ask, so it does not start", err=True)
        return EXIT_ERROR
    logging.basicConfig(level=logging.WARNING, format="signoff gateway: %(levelname)s %(message)s")

    import anyio

    from signoff.bot.gateway import Catalog, serve_stdio
    from signoff.client import AsyncSignoff
    from signoff.tools.mcp import McpConfigError

    try:
        catalog = Catalog.from_file(config, os.environ)
    except McpConfigError as exc:
        click.echo("error: " + "\n  ".join(["the servers cannot be used:", *exc.problems]), err=True)
        return EXIT_ERROR

    async def serve() -> None:
        async with AsyncSignoff(url.strip(), api_key.strip()) as signoff:
            await serve_stdio(catalog, signoff)

    try:
        anyio.run(serve)
    finally:
        catalog.close()
    return EXIT_OK
