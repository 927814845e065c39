"""Fixtures for the model adapters: fake OpenAI and Anthropic servers, tools, and a sleep recorder."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

# The fakes live in `tests/fakes`; the repository root on the path makes `tests.fakes` importable
# without putting `tests/` itself there, where its `runtime/` folder would shadow the real package.
ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from signoff.runtime import Tool  # noqa: E402
from tests.fakes.anthropic_server import FakeAnthropic  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI  # noqa: E402


class OrderArgs(BaseModel):
    order_id: str


class RefundArgs(BaseModel):
    order_id: str
    amount_usd: float


class Desk:
    """What the tools did, so tests can assert side effects ran (or did not)."""

    def __init__(self) -> None:
        self.refunds: list[tuple[dict[str, Any], str]] = []
        self.report_rows = 0

    def lookup_order(self, args: dict[str, Any], key: str) -> dict[str, Any]:
        return {"order_id": args["order_id"], "status": "delivered", "total_usd": 42.0}

    def refund(self, args: dict[str, Any], key: str) -> dict[str, Any]:
        self.refunds.append((args, key))
        return {"refunded": args["amount_usd"], "key": key}

    def big_report(self, args: dict[str, Any], key: str) -> dict[str, Any]:
        rows = [{"id": i, "note": "x" * 50} for i in range(self.report_rows)]
        return {"rows": rows, "summary": "y" * 20_000}


@pytest.fixture
def desk() -> Desk:
    return Desk()


@pytest.fixture
def tools(desk: Desk) -> list[Tool]:
    return [
        Tool("lookup_order", desk.lookup_order, args_model=OrderArgs, description="Look up an order by id."),
        Tool("refund", desk.refund, side_effect=True, args_model=RefundArgs, description="Refund an order."),
        Tool("big_report", desk.big_report, description="A very large report."),
    ]


@pytest.fixture
def openai_server():
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def anthropic_server():
    with FakeAnthropic() as server:
        yield server


@pytest.fixture
def sleeps() -> list[float]:
    """Pass `sleep=sleeps.append` to record retry waits instead of sleeping."""
    return []


@pytest.fixture
def openai_env(openai_server: FakeOpenAI) -> dict[str, str]:
    return {"OPENAI_BASE_URL": openai_server.url, "OPENAI_API_KEY": openai_server.api_key}


@pytest.fixture
def anthropic_env(anthropic_server: FakeAnthropic) -> dict[str, str]:
    return {"ANTHROPIC_BASE_URL": anthropic_server.url, "ANTHROPIC_API_KEY": anthropic_server.api_key}


BATCH_GOAL = "Refund order A-1 if it was delivered"


@pytest.fixture
def batch_history() -> list[dict[str, Any]]:
    """A run's history as the loop records a reply with three tool calls (step 1): one assistant
    entry per call, the text on the first, then one tool entry per call in the same order; then a
    reply that could not be used (step 2) with the runtime's feedback, and a reply with one call (step 3)."""
    return [
        {"role": "user", "content": BATCH_GOAL},
        {"role": "assistant", "step": 1, "tool": "lookup_order", "args": {"order_id": "A-1"}, "call_id": "c1",
         "text": "Checking the order while asking for the refund."},
        {"role": "assistant", "step": 1, "tool": "refund", "args": {"order_id": "A-1", "amount_usd": 5},
         "call_id": "c2"},
        {"role": "assistant", "step": 1, "tool": "lookup_order", "args": '{"order_id": "A-', "call_id": "c3"},
        {"role": "tool", "step": 1, "tool": "lookup_order", "call_id": "c1",
         "result": {"order_id": "A-1", "status": "delivered"}},
        {"role": "tool", "step": 1, "tool": "refund", "call_id": "c2", "error": "denied by human: check first",
         "error_kind": "denied"},
        {"role": "tool", "step": 1, "tool": "lookup_order", "call_id": "c3",
         "error": "invalid arguments: not a JSON object", "error_kind": "invalid_args"},
        {"role": "assistant", "step": 2, "malformed": "{}"},
        {"role": "runtime", "step": 2, "error": "malformed decision: the model returned neither a tool call nor text"},
        {"role": "assistant", "step": 3, "tool": "lookup_order", "args": {"order_id": "A-2"}, "call_id": "c4"},
        {"role": "tool", "step": 3, "tool": "lookup_order", "call_id": "c4",
         "result": {"order_id": "A-2", "status": "shipped"}},
    ]
