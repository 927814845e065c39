"""Operating Signoff: `signoff db upgrade`, `check`, `manifest` and `serve`.

The `--help` of each imports this module: the database, the checks and the Slack app are imported
inside the commands that use them.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from signoff.bot.cli import CliState
from signoff.bot.cli.envfile import env_file_words
from signoff.bot.cli.options import DATABASE_URL, POLICY, load_settings
from signoff.bot.cli.outcomes import EXIT_ERROR, EXIT_OK


@click.command("upgrade")
@DATABASE_URL
def db_upgrade(database_url: str | None) -> int:
    """Create or upgrade the schema to the newest revision; prints `before -> after`."""
    from signoff.bot.wiring import masked, upgrade_schema

    settings = load_settings({"database_url": database_url})
    before, after = upgrade_schema(settings.database_url)
    click.echo(f"{masked(settings.database_url)}: {before or '(empty)'} -> {after}"
               + (" (already current)" if before == after else ""))
    return EXIT_OK


@click.group(commands=[db_upgrade])
def db() -> None:
    """Database schema commands."""


@click.command()
@POLICY
@click.option("--gateway", "gateway_config", metavar="SERVERS_JSON", type=click.Path(dir_okay=False),
              help="Check only what `signoff gateway --config SERVERS_JSON` would offer: each server, its tools, "
                   "and whether the policy lets each run unasked, asks, or refuses it.")
@click.pass_obj
def check(state: CliState, policy: str | None, gateway_config: str | None) -> int:
    """Check the configuration, the tools (each MCP server is started and lists its tools, with how
    each is gated), the approval policy, the database, Slack (auth.test) and the model.

    Prints one line per check, "ok ..." or "FAIL ... reason" ("skip ..." when not configured);
    exits 1 if any check failed. With --gateway, checks the gateway's servers and the policy instead
    (the policy `signoff serve` uses: the same SIGNOFF_POLICY, or --policy).
    """
    from signoff.bot.cli.checks import check_lines
    from signoff.bot.settings import unknown_variables
    from signoff.runtime.errors import ConfigError

    # Which .env was read: it may be where a value (or a bad one) came from.
    env_file = env_file_words(state.env_file, Path.cwd())
    try:
        settings = load_settings({"policy": policy})
    except ConfigError as exc:
        click.echo(f"FAIL config: {exc}; {env_file}")
        return EXIT_ERROR
    click.echo(f"ok config: SIGNOFF_* and SLACK_* settings are valid; {env_file}")
    for name, likely in unknown_variables(os.environ).items():
        click.echo(f"warn config: {name} is not a setting, so it is ignored"
                   + (f"; did you mean {likely}?" if likely else ""))
    if gateway_config is not None:
        from signoff.bot.cli.checks import check_policy
        from signoff.bot.cli.gateway_check import gateway_lines
        from signoff.bot.wiring import load_approval_policy

        lines = check_policy(settings, os.environ)[:1]
        if not lines[0].startswith("FAIL"):
            lines += gateway_lines(gateway_config, load_approval_policy(settings), os.environ)
    else:
        lines = check_lines(settings, os.environ)
    results = [state.naming_flags(line) for line in lines]
    for line in results:
        click.echo(line)
    return EXIT_ERROR if any(line.startswith("FAIL") for line in results) else EXIT_OK


@click.command()
def manifest() -> int:
    """Print the Slack app manifest (paste it at api.slack.com/apps -> Create New App -> From a manifest)."""
    from signoff.bot.wiring import PACKAGE_DIR

    source = PACKAGE_DIR / "slack-manifest.yaml"
    if not source.is_file():
        raise click.ClickException("the Slack app manifest is not part of this installation")
    click.echo(source.read_text(encoding="utf-8"), nl=False)
    return EXIT_OK


@click.command()
@POLICY
def serve(policy: str | None) -> int:
    """Run the Slack bot (Socket Mode when SLACK_APP_TOKEN is set, HTTP on SIGNOFF_PORT otherwise)."""
    settings = load_settings({"policy": policy})
    # Imported here: only this command needs the Slack app, and `signoff --help` must not load Bolt.
    from signoff.bot.slack.serve import serve as serve_slack

    serve_slack(settings, environ=os.environ)
    return EXIT_OK
