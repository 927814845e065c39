"""Files in the demo outbox: safe names from idempotency keys, atomic writes, cross-process locks.

POSIX only (`fcntl`): the locks are `flock` locks, held per open file, so they exclude other
processes and other threads of this one alike.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def file_stem(key: str) -> str:
    """A file-system-safe name for `key`, unique per key: `run-abc:3` -> `run-abc_3-1f0c…`.

    Sanitising alone would map `a:b` and `a/b` to the same name, so a digest of the exact key
    is appended.
    """
    assert key, "an idempotency key is never empty"
    readable = _UNSAFE.sub("_", key)[:80].strip("._-")
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return f"{readable}-{digest}" if readable else digest


def args_digest(args: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of `args`: tells a repeat from a reused key."""
    canonical = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def write_atomically(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that readers see either no file or the whole file."""
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


@contextmanager
def locked(path: Path, *, shared: bool = False) -> Iterator[IO[str]]:
    """Hold a `flock` on `path` until the block ends: exclusive (file created if missing) or shared.

    The exclusive form yields the file open for reading and appending (`a+`); the shared form
    yields it open for reading and needs the file to exist.
    """
    if not shared:
        path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "r" if shared else "a+", encoding="utf-8") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        try:
            yield handle
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
