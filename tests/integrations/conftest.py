"""A real Signoff for the framework adapters: a `signoff serve` (fake Slack) per test module, an API key
made with the real `signoff keys` command, a fake model speaking OpenAI's Chat Completions wire
format, and the people's side: find a call's card, click Approve, or deny it with a reason, signed as
Slack signs them.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

from scenarios.drive import APPROVER, messages_with
from scenarios.world import World, wait_until
from signoff.bot.slack.blocks import APPROVE_ACTION
from signoff.runtime.records import ApprovalRecord
from tests.approval_server import ApprovalServer
from tests.fakes.openai_server import FakeOpenAI

GATED_TOOLS = "refund"
"""What the tests' API key may ask about."""


def required(module: str, extra: str) -> ModuleType:
    """`module`, imported; without it the test skips, but with `CI` set it fails: CI installs every extra."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"{module} (the extra {extra!r}) is required in CI: {exc}")
        pytest.skip(f"{module} is not installed (the extra {extra!r}): {exc}")


@pytest.fixture(scope="module")
def server() -> Iterator[ApprovalServer]:
    server = ApprovalServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def world(server: ApprovalServer) -> World:
    return server.world


@pytest.fixture(scope="module")
def url(server: ApprovalServer) -> str:
    return server.url


@pytest.fixture(scope="module")
def api_key(server: ApprovalServer) -> str:
    """A key made as an operator makes one: `signoff keys create`, its secret on the last line."""
    return server.new_key("agents", "--tools", GATED_TOOLS)


@pytest.fixture
def model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


def approval_id(world: World, key: str) -> str:
    """The id the API gave the approval asked for with the idempotency key `key`, once it exists."""
    def found() -> str | None:
        return next((run.run_id for run in world.db.store.list_runs(limit=1000)
                     if (run.origin.get("api") or {}).get("id_key") == key), None)
    return str(wait_until(found, 30, what=f"the approval asked with the key {key!r}"))


def card_of(world: World, api_id: str) -> tuple[ApprovalRecord, dict[str, Any]]:
    """The call's approval and its card in Slack, once posted."""
    record: ApprovalRecord = wait_until(
        lambda: next(iter(world.db.store.list_approvals(run_id=api_id, limit=1)), None), 30, what="the approval")
    message = wait_until(lambda: next(iter(messages_with(world, APPROVE_ACTION, f"{record.approval_id}:")), None),
                         30, what="the approval card in Slack")
    return record, message


def approve(world: World, key: str) -> str:
    """Click Approve on the card of the call asked with `key`; its API id."""
    api_id = approval_id(world, key)
    _, message = card_of(world, api_id)
    assert world.serves[0].click(message, APPROVE_ACTION, APPROVER).status == 200
    return api_id


def deny(world: World, key: str, reason: str) -> str:
    """Deny the call asked with `key`, with a reason typed in the Deny form; its API id."""
    api_id = approval_id(world, key)
    record, _ = card_of(world, api_id)
    assert world.serves[0].deny(record.approval_id, record.digest, APPROVER, reason).status == 200
    return api_id


def times_asked(world: World, key: str) -> tuple[int, int]:
    """How many approvals were made for the idempotency key `key`, and how many cards were posted for them."""
    runs = [run.run_id for run in world.db.store.list_runs(limit=1000)
            if (run.origin.get("api") or {}).get("id_key") == key]
    ids = [a.approval_id for run_id in runs for a in world.db.store.list_approvals(run_id=run_id, limit=10)]
    posts = [json.dumps(body) for body in world.slack.calls_to("chat.postMessage")]
    return len(ids), sum(1 for post in posts for i in ids if f"{i}:" in post and APPROVE_ACTION in post)
