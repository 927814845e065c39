"""What a step does to approvals, as typed values the store applies with the step. Pure.

A transition that pauses on a call, or changes a call someone was asked about, says so here, next
to the audit event that tells people: the store opens, closes or reopens approvals from these
values, never from an event's name.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AskAbout:
    """Open an approval for the call under `key` the run now waits on."""

    key: str


@dataclass(frozen=True)
class AskMoreOf:
    """The policy now asks more approvals of the approved, unused call under `key`: reopen it."""

    key: str


@dataclass(frozen=True)
class CallChanged:
    """What people were asked about under `key` changed (its tool, its preview): close its open
    approval as superseded; a fresh one asks again."""

    key: str


@dataclass(frozen=True)
class Overruled:
    """The policy now refuses the approved call under `key`: close its open approval as cancelled."""

    key: str


Effect = AskAbout | AskMoreOf | CallChanged | Overruled
