"""`signoff check`'s outbox line: can the demo tools write their emails and refunds where they are told?

A run whose every approved call failed still ends `done` (the model is told each failure and
answers anyway), so an outbox nobody can write to is worth a line before the first run.
"""

from __future__ import annotations

import os
from pathlib import Path

from signoff.bot.settings import Settings


def check_outbox(settings: Settings) -> str:
    """`ok outbox: ...`, `FAIL outbox: ...`, or `skip outbox: ...` when the demo tools are not loaded."""
    if "demo" not in (entry.strip() for entry in settings.tools.split(",")):
        return "skip outbox: the demo tools are not loaded (SIGNOFF_TOOLS), and only they write to it"
    outbox = Path(settings.outbox)
    if outbox.exists():
        if not outbox.is_dir():
            return f"FAIL outbox: {outbox} is not a directory; send_email and issue_refund would fail"
        if not _writable(outbox):
            return f"FAIL outbox: {outbox} is not writable; send_email and issue_refund would fail"
        return f"ok outbox: {outbox} is writable"
    parent = _nearest_existing(outbox)
    if not parent.is_dir() or not _writable(parent):
        return (f"FAIL outbox: {outbox} does not exist and cannot be created ({parent.absolute()} is not a "
                "writable directory); send_email and issue_refund would fail")
    return f"ok outbox: {outbox} does not exist yet; the first email or refund creates it"


def _writable(directory: Path) -> bool:
    return os.access(directory, os.W_OK | os.X_OK)


def _nearest_existing(path: Path) -> Path:
    for candidate in path.absolute().parents:
        if candidate.exists():
            return candidate
    return Path(path.absolute().anchor)
