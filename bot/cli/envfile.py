"""`.env` in the working directory, read when `signoff` starts: the variables it sets that the
environment does not already have (a variable set in the environment wins over the file)."""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path

ENV_FILE = ".env"


@dataclass(frozen=True)
class EnvFile:
    """What was read from a `.env` file: variable names only, never their values."""

    path: Path
    loaded: tuple[str, ...]
    """Set from the file."""
    overridden: tuple[str, ...]
    """In the file too, but the environment's value was kept."""


def load_env_file(environ: MutableMapping[str, str], directory: Path) -> EnvFile | None:
    """Add the variables of `directory/.env` to `environ` where it has none of its own; None if
    there is no such file."""
    path = directory / ENV_FILE
    if not path.is_file():
        return None
    # Imported only when there is a file to read: every `signoff` command line, `--help` too, comes here.
    from dotenv import dotenv_values

    values = {name: value for name, value in dotenv_values(path).items() if value is not None}
    overridden = tuple(sorted(name for name in values if name in environ))
    loaded = tuple(sorted(name for name in values if name not in environ))
    for name in loaded:
        environ[name] = values[name]
    return EnvFile(path.absolute(), loaded, overridden)


def env_file_words(found: EnvFile | None, directory: Path) -> str:
    """Which `.env` was read, for `signoff check`: `read /app/.env (3 variables)` or `no .env in /app`."""
    if found is None:
        return f"no {ENV_FILE} in {directory}"
    count = len(found.loaded) + len(found.overridden)
    kept = f"; the environment's own value wins for {', '.join(found.overridden)}" if found.overridden else ""
    return f"read {found.path} ({count} variable{'' if count == 1 else 's'}{kept})"
