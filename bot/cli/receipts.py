"""`signoff keys signing create PATH` and `signoff receipts public-key`: the key decisions are signed
with, and the public keys anyone checks their receipts with.

The private key stays in its file (a mounted secret, named by `SIGNOFF_SIGNING_KEY`); Signoff never
writes it to the database. Trusting several public keys at once (`SIGNOFF_TRUSTED_KEYS`) is how a key
is rotated: receipts signed with the old one still check.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from signoff.bot.cli.options import load_settings
from signoff.bot.cli.outcomes import EXIT_ERROR, EXIT_OK


@click.command("create")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
def signing_create(path: Path) -> int:
    """Make a new Ed25519 signing key at PATH (PEM, readable by its owner only; an existing file is
    never overwritten), and print its public key and key id. Point SIGNOFF_SIGNING_KEY at it."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from signoff.receipts import key_id, private_key_pem, public_key_pem

    key = Ed25519PrivateKey.generate()
    try:
        # O_EXCL: refuse a file that exists, even one made between a check and the write.
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        click.echo(f"error: {path} exists; a signing key is never overwritten (move it away first)", err=True)
        return EXIT_ERROR
    except OSError as exc:
        click.echo(f"error: cannot create {path}: {exc.strerror}", err=True)
        return EXIT_ERROR
    with os.fdopen(descriptor, "wb") as file:
        file.write(private_key_pem(key))
    click.echo(f"signing key {key_id(key.public_key())} written to {path}; set SIGNOFF_SIGNING_KEY={path}")
    click.echo(public_key_pem(key.public_key()).decode("ascii"), nl=False)
    return EXIT_OK


@click.group(commands=[signing_create])
def signing() -> None:
    """The key each decision's receipt is signed with."""


@click.command("public-key")
def receipts_public_key() -> int:
    """Print the public keys receipts are checked with, as PEM: Signoff's own (SIGNOFF_SIGNING_KEY's),
    then each of SIGNOFF_TRUSTED_KEYS. Give them to `signoff audit verify --public-key` or to
    `signoff.client.verify_receipt`."""
    from signoff.bot.wiring import trusted_keys
    from signoff.receipts import key_id, public_key_pem

    settings = load_settings({})
    keys = trusted_keys(settings)
    if not keys:
        click.echo("error: no signing key: set SIGNOFF_SIGNING_KEY (`signoff keys signing create PATH` "
                   "makes one); without it, decisions get no receipts", err=True)
        return EXIT_ERROR
    for key in keys:
        click.echo(f"# key id {key_id(key)}")
        click.echo(public_key_pem(key).decode("ascii"), nl=False)
    return EXIT_OK


@click.group(commands=[receipts_public_key])
def receipts() -> None:
    """Signed receipts of decisions: the public keys they are checked with."""
