"""Operating Signoff: `signoff db upgrade`, `check`, `manifest` and `serve`."""

from __future__ import annotations

import os

import click
from sqlalchemy.exc import OperationalError

from signoff.bot.cli.checks import check_lines
from signoff.bot.cli.options import DATABASE_URL, POLICY, load_settings
from signoff.bot.cli.outcomes import EXIT_ERROR, EXIT_OK
from signoff.bot.wiring import PACKAGE_DIR
from signoff.runtime.adapters.db import make_engine, masked, upgrade
from signoff.runtime.errors import ConfigError


@click.command("upgrade")
@DATABASE_URL
def db_upgrade(database_url: str | None) -> int:
    """Create or upgrade the schema to the newest revision; prints `before -> after`."""
    settings = load_settings({"database_url": database_url})
    engine = make_engine(settings.database_url)
    try:
        before, after = upgrade(engine)
    except OperationalError as exc:
        raise ConfigError(f"cannot reach the database at {masked(settings.database_url)}: "
                          f"{_first_line(exc)}") from None
    finally:
        engine.dispose()
    click.echo(f"{masked(settings.database_url)}: {before or '(empty)'} -> {after}"
               + (" (already current)" if before == after else ""))
    return EXIT_OK


def _first_line(exc: OperationalError) -> str:
    text = str(exc.orig if exc.orig is not None else exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


@click.group(commands=[db_upgrade])
def db() -> None:
    """Database schema commands."""


@click.command()
@POLICY
def check(policy: str | None) -> int:
    """Check the configuration, the tools (each MCP server is started and lists its tools, with how
    each is gated), the approval policy, the database, Slack (auth.test) and the model.

    Prints one line per check, "ok ..." or "FAIL ... reason" ("skip ..." when not configured);
    exits 1 if any check failed.
    """
    try:
        settings = load_settings({"policy": policy})
    except ConfigError as exc:
        click.echo(f"FAIL config: {exc}")
        return EXIT_ERROR
    click.echo("ok config: SIGNOFF_* and SLACK_* settings are valid")
    results = check_lines(settings, os.environ)
    for line in results:
        click.echo(line)
    return EXIT_ERROR if any(line.startswith("FAIL") for line in results) else EXIT_OK


@click.command()
def manifest() -> int:
    """Print the Slack app manifest (paste it at api.slack.com/apps -> Create New App -> From a manifest)."""
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
