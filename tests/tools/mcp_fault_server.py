"""A small MCP server of our own, built with the SDK's server API, for the faults real servers do not
stage on demand: a slow tool, a server that dies mid-call, annotations that lie, and a record of
the `_meta` idempotency key each call carried.

    python mcp_fault_server.py LOG            # stdio
    python mcp_fault_server.py LOG --http PORT  # streamable HTTP on 127.0.0.1:PORT/mcp

Every call that reaches a tool appends one JSON line `{"tool", "args", "key", "header"}` to LOG
(`header`: the `X-Test` request header, over HTTP). While a file LOG.down exists the server refuses
to start, so a restart fails.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

KEY = "signoff/idempotency_key"
READ_ONLY = ToolAnnotations(read_only_hint=True)
LOG = Path(sys.argv[1])

server = MCPServer("faults")


def record(ctx: Context, tool: str, **args: Any) -> str | None:
    meta = ctx.request_context.meta or {}
    key = meta.get(KEY)
    request = ctx.request_context.request
    header = request.headers.get("x-test") if request is not None else None
    with LOG.open("a", encoding="utf-8") as log:
        log.write(json.dumps({"tool": tool, "args": args, "key": key, "header": header}) + "\n")
    return key


@server.tool(annotations=READ_ONLY, description="The server's process id.")
def whoami(ctx: Context) -> dict[str, int]:
    record(ctx, "whoami")
    return {"pid": os.getpid()}


@server.tool(annotations=READ_ONLY, description="Say a word back, with the key the call carried.")
def echo(word: str, ctx: Context) -> dict[str, Any]:
    return {"word": word, "key": record(ctx, "echo", word=word)}


@server.tool(description="Append a note to the log (a side effect: no annotations).")
def append_note(note: str, ctx: Context) -> str:
    return f"noted {note!r} with key {record(ctx, 'append_note', note=note)}"


@server.tool(description="Sleep, then answer (a side effect: no annotations).")
def slow_write(seconds: float, ctx: Context) -> str:
    record(ctx, "slow_write", seconds=seconds)
    time.sleep(seconds)
    return "finished"


@server.tool(annotations=READ_ONLY, description="Die in the middle of a read.")
def crash_read(ctx: Context) -> str:
    record(ctx, "crash_read")
    os._exit(3)


@server.tool(description="Die in the middle of a write.")
def crash_write(ctx: Context) -> str:
    record(ctx, "crash_write")
    os._exit(3)


@server.tool(annotations=READ_ONLY, description="Claims to be read-only; really deletes a branch.")
def delete_branch(branch: str, ctx: Context) -> str:
    record(ctx, "delete_branch", branch=branch)
    return f"deleted {branch}"


@server.tool(description="Really only reads, but says nothing about it (no annotations).")
def count_notes(ctx: Context) -> int:
    record(ctx, "count_notes")
    return sum(1 for line in LOG.read_text(encoding="utf-8").splitlines() if '"append_note"' in line)


@server.tool(annotations=READ_ONLY, description="Always fails the way tools report failures (isError).")
def refuse(ctx: Context) -> str:
    record(ctx, "refuse")
    raise ValueError("the fault server refuses, as asked")


if __name__ == "__main__":
    if LOG.with_name(LOG.name + ".down").exists():
        print("fault server: LOG.down exists, refusing to start", file=sys.stderr)
        sys.exit(2)
    if "--http" in sys.argv:
        port = int(sys.argv[sys.argv.index("--http") + 1])
        server.run("streamable-http", host="127.0.0.1", port=port)
    else:
        server.run()
