"""`signoff grants ...`: the grants "Approve + allow similar" made, listed and revoked from the terminal.

A revoke is written to the database at once: every replica refuses the grant's next use, and the
grant's run records who revoked it.
"""

from __future__ import annotations

import json

import click

from signoff.bot.cli.options import DATABASE_URL, USER, load_settings, options
from signoff.bot.cli.outcomes import EXIT_ERROR, EXIT_OK

LISTED = 500


@click.command("list")
@click.option("--all", "every", is_flag=True, help="Also the revoked and expired ones.")
@options(DATABASE_URL)
def grants_list(every: bool, database_url: str | None) -> int:
    """The grants in force (newest first): what each covers, who made it, when it ends, its uses."""
    from signoff.bot.cli.rendering import one_line
    from signoff.bot.wiring import open_store

    settings = load_settings({"database_url": database_url})
    store = open_store(settings.database_url, auto_upgrade=True)
    try:
        found, now = store.list_grants(live=not every, limit=LISTED), store.now()
    finally:
        store.close()
    if not found:
        click.echo("no grants in force" if not every else "no grants yet")
        return EXIT_OK
    click.echo(f"{'ID':<20} {'TOOL':<20} {'MADE BY':<14} {'ENDS':<16} {'USES':>4}  {'STATE':<24} COVERS")
    for grant in found:
        covers = f"run {grant.run_id}" if grant.scope == "run" else f"runs of {grant.requester}"
        if grant.same:
            covers += " " + json.dumps(grant.same, ensure_ascii=False, sort_keys=True)
        state = (f"revoked by {one_line(grant.revoked_by, 40)}" if grant.revoked_at
                 else "expired" if grant.expires_at <= now else "live")
        click.echo(f"{grant.grant_id:<20} {one_line(grant.tool, 64):<20} {one_line(grant.created_by, 64):<14} "
                   f"{grant.expires_at:%Y-%m-%d %H:%M} {grant.uses:>4}  {state:<24} {one_line(covers, 2000)}")
    return EXIT_OK


@click.command("revoke")
@click.argument("grant_id")
@options(USER, DATABASE_URL)
def grants_revoke(grant_id: str, user: str, database_url: str | None) -> int:
    """Revoke a grant: the calls it covered are asked about again, on every replica, from now on."""
    from signoff.bot.cli.rendering import one_line
    from signoff.bot.wiring import open_store

    settings = load_settings({"database_url": database_url})
    store = open_store(settings.database_url, auto_upgrade=True)
    try:
        grant = store.revoke_grant(grant_id, user)
    finally:
        store.close()
    if grant is None:
        click.echo(f"error: no grant {one_line(grant_id, 80)}", err=True)
        return EXIT_ERROR
    if grant.revoked_by != user:
        click.echo(f"grant {grant_id} was already revoked by {one_line(grant.revoked_by, 40)}; nothing changed")
        return EXIT_OK
    click.echo(f"grant {grant_id} is revoked: its calls are asked about again")
    return EXIT_OK


@click.group(commands=[grants_list, grants_revoke])
def grants() -> None:
    """Grants made by "Approve + allow similar": list, revoke."""
