"""`signoff keys ...`: the keys programs ask for approvals with over the approval API.

`create` prints the new secret alone on the last line of its output, once: only its hash is kept,
so it cannot be shown again (revoke the key and make another). Before it, the secret its callbacks
are signed with. A key's name is never reused.
"""

from __future__ import annotations

import re

import click

from signoff.bot.cli.options import DATABASE_URL, load_settings, options
from signoff.bot.cli.outcomes import EXIT_ERROR, EXIT_OK
from signoff.bot.cli.receipts import signing

CHANNEL = re.compile(r"^[CG][A-Z0-9]{2,}$")
SLACK_USER = re.compile(r"^[UW][A-Z0-9]{2,}$")


def _name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    from signoff.runtime.api_keys import KEY_NAME

    if not KEY_NAME.match(value):
        raise click.BadParameter("use lower-case letters, digits, '.', '_' or '-' (at most 64), e.g. ci-bot",
                                 ctx, param)
    return value


def _channels(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    for channel in value:
        if not CHANNEL.match(channel.strip()):
            raise click.BadParameter(f"{channel!r} is not a Slack channel id (C… or G…)", ctx, param)
    return tuple(channel.strip() for channel in value)


def _requester(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not SLACK_USER.match(value.strip()):
        raise click.BadParameter(f"{value!r} is not a Slack user id (U… or W…)", ctx, param)
    return value.strip() if value else None


def _tools(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, ...]:
    globs = tuple(glob.strip() for glob in value.split(",") if glob.strip())
    if not globs:
        raise click.BadParameter("name at least one tool, or * for any", ctx, param)
    return globs


@click.command("create")
@click.argument("name", callback=_name)
@click.option("--channel", "channels", required=True, multiple=True, callback=_channels, metavar="C…",
              help="Where its approval cards go; given again, other channels a request may name instead.")
@click.option("--tools", default="*", show_default=True, callback=_tools, metavar="GLOB,…",
              help="The tools it may ask about, as globs (e.g. refund,mcp__github__*).")
@click.option("--requester", callback=_requester, metavar="U…",
              help="The Slack user it asks for: its approvals are theirs (they may not approve them "
                   "unless self-approval is on). Without it, the key itself is the requester.")
@options(DATABASE_URL)
def keys_create(name: str, channels: tuple[str, ...], tools: tuple[str, ...], requester: str | None,
                database_url: str | None) -> int:
    """Make a key; its secret is printed once, on the last line."""
    from signoff.bot.wiring import api_keys, open_store
    from signoff.runtime.api_keys import ApiKey, KeyExists, new_callback_secret, new_secret, secret_hash

    settings = load_settings({"database_url": database_url})
    store = open_store(settings.database_url, auto_upgrade=True)
    try:
        secret, callback_secret = new_secret(), new_callback_secret()
        channel = channels[0]
        key = ApiKey(name=name, channel=channel, tools=tools, requester=requester, created_at=store.now(),
                     other_channels=tuple(c for c in dict.fromkeys(channels[1:]) if c != channel))
        try:
            api_keys(store).create_key(key, secret_hash(secret), callback_secret)
        except KeyExists as exc:
            click.echo(f"error: {exc}", err=True)
            return EXIT_ERROR
    finally:
        store.close()
    others = f" (or {', '.join(key.other_channels)}, as a request names)" if key.other_channels else ""
    click.echo(f"key {name}: cards to {channel}{others}, tools {','.join(tools)}"
               f"{f', for {requester}' if requester else ''}.")
    click.echo(f"Its callbacks (a request's callback_url) are signed with: {callback_secret}")
    click.echo("Its secret, shown only now:")
    click.echo(secret)
    return EXIT_OK


@click.command("list")
@options(DATABASE_URL)
def keys_list(database_url: str | None) -> int:
    """Every key (never its secret): its channel, tools, requester, last use, and whether revoked."""
    from signoff.bot.wiring import api_keys, open_store

    settings = load_settings({"database_url": database_url})
    store = open_store(settings.database_url, auto_upgrade=True)
    try:
        found = api_keys(store).keys()
    finally:
        store.close()
    if not found:
        click.echo("no keys yet: `signoff keys create NAME --channel C…` makes one")
        return EXIT_OK
    click.echo(f"{'NAME':<24} {'CHANNEL':<12} {'TOOLS':<24} {'REQUESTER':<12} {'LAST USED':<17} STATE")
    for key in found:
        used = key.last_used_at.strftime("%Y-%m-%d %H:%M") if key.last_used_at else "never"
        state = f"revoked {key.revoked_at:%Y-%m-%d}" if key.revoked_at else "live"
        channels = ",".join((key.channel, *key.other_channels))
        click.echo(f"{key.name:<24} {channels:<12} {','.join(key.tools):<24} {key.requester or '-':<12} "
                   f"{used:<17} {state}")
    return EXIT_OK


@click.command("revoke")
@click.argument("name")
@options(DATABASE_URL)
def keys_revoke(name: str, database_url: str | None) -> int:
    """Revoke a key: every request with it is refused (401) from now on."""
    from signoff.bot.wiring import api_keys, open_store

    settings = load_settings({"database_url": database_url})
    store = open_store(settings.database_url, auto_upgrade=True)
    try:
        key = api_keys(store).revoke_key(name)
    finally:
        store.close()
    if key is None:
        click.echo(f"error: no key named {name}", err=True)
        return EXIT_ERROR
    click.echo(f"key {name} is revoked")
    return EXIT_OK


@click.group(commands=[keys_create, keys_list, keys_revoke, signing])
def keys() -> None:
    """Keys programs ask for approvals with (the approval API): create, list, revoke; and the key
    receipts are signed with (`signing create`)."""
