"""The built-in `demo` toolset: two read-only tools over built-in data, two side effects into an outbox."""

from __future__ import annotations

from pathlib import Path

from signoff.tools.base import Tool
from signoff.tools.demo.issue_refund import issue_refund_tool
from signoff.tools.demo.lookup_orders import lookup_orders_tool
from signoff.tools.demo.search_handbook import search_handbook_tool
from signoff.tools.demo.send_email import send_email_tool


def demo_tools(outbox: str | Path) -> list[Tool]:
    """`search_handbook`, `lookup_orders`, `send_email` and `issue_refund`, writing into `outbox`.

    The outbox directory is created on the first write, so listing the tools touches no files.
    """
    outbox = Path(outbox)
    return [
        search_handbook_tool(),
        lookup_orders_tool(outbox),
        send_email_tool(outbox),
        issue_refund_tool(outbox),
    ]
