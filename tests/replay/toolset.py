"""The tools the replay corpus was recorded with (besides the demo's): small, deterministic, and
kept apart from the fault suite's tools so that changing those never changes a recording."""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel

from signoff.tools.base import Tool, ToolFailed


class LookupArgs(BaseModel):
    query: str


class NoteArgs(BaseModel):
    to: str
    text: str


class CreditArgs(BaseModel):
    account: str
    amount: int


def lookup(args: dict[str, Any], key: str) -> dict[str, Any]:
    if args["query"] == "broken":
        raise ToolFailed("the records service answered 503")
    return {"query": args["query"], "found": f"record for {args['query']}"}


def send_note(args: dict[str, Any], key: str) -> dict[str, Any]:
    return {"sent": True, "to": args["to"], "key": key}


def apply_credit(args: dict[str, Any], key: str) -> dict[str, Any]:
    return {"credited": args["amount"], "account": args["account"], "key": key}


def slow_lookup(args: dict[str, Any], key: str) -> dict[str, Any]:
    time.sleep(1.0)
    return {"query": args["query"]}


TOOLS = [
    Tool("lookup", lookup, args_model=LookupArgs, description="Look a record up (read-only)."),
    Tool("slow_lookup", slow_lookup, args_model=LookupArgs, timeout_s=0.05,
         description="Look a record up in a slow archive (read-only)."),
    Tool("send_note", send_note, side_effect=True, args_model=NoteArgs, description="Send a note to someone."),
    Tool("apply_credit", apply_credit, side_effect=True, idempotent=True, args_model=CreditArgs,
         description="Credit an account (idempotent: dedupes on the key)."),
]
TOOLSET = "tests.replay.toolset:TOOLS"
