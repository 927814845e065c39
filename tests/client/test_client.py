"""`signoff.client` against the real approval API: a `signoff serve` (one per module) with a policy,
keys made with `signoff keys create`, and an approver deciding in (fake) Slack, over real HTTP.

The failure modes the real server never shows (an answer outside the contract, no answer, a long
poll cut short) are asked of the servers in tests/client/faulty_servers.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from scenarios.drive import APPROVER
from signoff.client import (
    AsyncSignoff,
    Conflict,
    Forbidden,
    NotApproved,
    Signoff,
    SignoffError,
    Unauthorized,
    Unreachable,
)
from tests.approval_server import SECOND_APPROVER, ApprovalServer, Person, deciding
from tests.client.faulty_servers import Garbage, Stalling

pytestmark = pytest.mark.slow

POLICY = """
rules:
  - name: small refunds run
    tool: refund
    when: args.amount < 10
    decision: allow
  - name: large refunds go to finance
    tool: refund
    when: args.amount > 1000
    decision: deny
    reason: refunds over 1000 need finance
"""


@pytest.fixture(scope="module")
def server() -> Iterator[ApprovalServer]:
    server = ApprovalServer(POLICY)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def key(server: ApprovalServer) -> str:
    return server.new_key("billing", "--tools", "refund")


@pytest.fixture
def sent() -> list[httpx.Request]:
    """The requests a client made with `recording(sent)` sent, in order."""
    return []


def recording(sent: list[httpx.Request]) -> httpx.Client:
    return httpx.Client(timeout=10, event_hooks={"request": [sent.append]})


@pytest.fixture
def signoff(server: ApprovalServer, key: str, sent: list[httpx.Request]) -> Iterator[Signoff]:
    with recording(sent) as http, Signoff(server.url, key, http=http) as client:
        yield client


def person_for(server: ApprovalServer, approval_id: str) -> Person:
    return Person(server, lambda approval: approval.run_id == approval_id)


def waits_asked(sent: list[httpx.Request]) -> list[int]:
    return [int(parse_qs(urlsplit(str(r.url)).query).get("wait", ["0"])[0]) for r in sent if r.method == "GET"]


# Asking -----------------------------------------------------------------------------------------------


def test_a_request_is_created_once_per_key_and_the_same_content_returns_the_same_approval(
        server: ApprovalServer, key: str, signoff: Signoff, sent: list[httpx.Request]) -> None:
    first = signoff.request("refund", {"order": "A-17", "amount": 20}, key="create-1", reason="customer asked")
    again = signoff.request("refund", {"order": "A-17", "amount": 20}, key="create-1", reason="customer asked")

    assert first.status == again.status == "pending"
    assert first.id == again.id and first.digest == again.digest and first.expires_at
    assert first.args == {"order": "A-17", "amount": 20}
    assert server.run(first.id).goal == "customer asked"
    assert sent[0].headers["authorization"] == f"Bearer {key}"
    # What was not given is not sent.
    assert sent[0].read() == b'{"tool":"refund","args":{"order":"A-17","amount":20},"key":"create-1",' \
                             b'"reason":"customer asked"}'


def test_the_same_key_for_other_content_is_a_conflict_with_the_api_code(signoff: Signoff) -> None:
    signoff.request("refund", {"order": "A-17", "amount": 20}, key="conflict-1")

    with pytest.raises(Conflict) as refused:
        signoff.request("refund", {"order": "B-2", "amount": 20}, key="conflict-1")

    assert (refused.value.code, refused.value.status) == ("idempotency_conflict", 409)


def test_the_policy_answers_at_once_when_it_allows_or_denies(signoff: Signoff) -> None:
    allowed = signoff.request("refund", {"amount": 5}, key="policy-small", side_effect=True)
    denied = signoff.request("refund", {"amount": 5000}, key="policy-large")

    assert (allowed.status, allowed.decided_by) == ("approved", "policy:small refunds run")
    assert denied.status == "denied"
    assert "refunds over 1000 need finance" in (denied.reason or "")


def test_refusals_are_exceptions_with_the_api_code_and_the_http_status(server: ApprovalServer, key: str) -> None:
    revoked = server.new_key("revoked")
    server.keys("revoke", "revoked")
    for api_key, kind, status, code in [("sk_signoff_wrong", Unauthorized, 401, "unauthorized"),
                                        (revoked, Unauthorized, 401, "unauthorized"),
                                        (key, Forbidden, 403, "forbidden")]:
        with Signoff(server.url, api_key) as client, pytest.raises(kind) as refused:
            client.request("delete_customer", {"id": 1}, key="refused-1")

        assert (refused.value.code, refused.value.status) == (code, status)
        assert refused.value.message


def test_a_request_without_an_idempotency_key_is_refused_before_sending(signoff: Signoff,
                                                                       sent: list[httpx.Request]) -> None:
    with pytest.raises(ValueError, match="key"):
        signoff.request("refund", {}, key="")
    assert sent == []


def test_a_code_at_the_top_level_of_the_answer_is_read_too() -> None:
    with Garbage(status=403, body=b'{"code": "scope", "message": "not yours"}',
                 content_type="application/json") as garbage, Signoff(garbage.url, "sk") as client, \
            pytest.raises(Forbidden) as refused:
        client.request("refund", {}, key="k")

    assert (refused.value.code, refused.value.message, refused.value.status) == ("scope", "not yours", 403)


@pytest.mark.parametrize(("status", "body", "code"), [
    (500, b"<html>Internal Server Error</html>", "http_500"),
    (201, b"{not json", "bad_response"),
    (201, b'{"id": "apr_1", "status": "maybe"}', "bad_response"),
    (201, b'["a list"]', "bad_response"),
])
def test_an_answer_outside_the_contract_is_an_error_not_an_approval(status: int, body: bytes, code: str) -> None:
    with Garbage(status=status, body=body) as garbage, Signoff(garbage.url, "sk") as client, \
            pytest.raises(SignoffError) as refused:
        client.request("refund", {}, key="k")

    assert (refused.value.code, refused.value.status) == (code, status)


def test_no_answer_at_all_is_unreachable() -> None:
    with Garbage() as garbage:
        closed = garbage.url  # nothing listens there once the block ends
    with Signoff(closed, "sk") as client, pytest.raises(Unreachable) as refused:
        client.request("refund", {}, key="k")

    assert (refused.value.code, refused.value.status) == ("unreachable", None)


# Waiting ----------------------------------------------------------------------------------------------


def test_a_person_s_approval_in_slack_ends_the_wait(server: ApprovalServer, signoff: Signoff,
                                                    sent: list[httpx.Request]) -> None:
    approval = signoff.request("refund", {"order": "W-1", "amount": 20}, key="wait-1")

    with deciding(person_for(server, approval.id).approve):
        approval.wait(timeout=120)

    assert (approval.status, approval.decided_by) == ("approved", APPROVER)
    assert waits_asked(sent) and set(waits_asked(sent)) == {60}


def test_a_long_poll_cut_short_is_asked_again_never_for_more_than_60_s(sent: list[httpx.Request]) -> None:
    with Stalling(pending_answers=2) as stalling, recording(sent) as http, \
            Signoff(stalling.url, "sk", http=http) as client:
        approval = client.request("refund", {"amount": 20}, key="k")
        approval.wait(timeout=300)

    assert approval.status == "approved"
    assert stalling.answered == ["pending", "pending", "approved"]
    assert waits_asked(sent) == [60, 60, 60]


def test_a_wait_that_runs_out_returns_the_approval_still_pending(signoff: Signoff, sent: list[httpx.Request]) -> None:
    approval = signoff.request("refund", {"order": "W-2", "amount": 20}, key="wait-2")

    assert approval.wait(timeout=1).status == "pending"
    assert not approval.decided
    assert waits_asked(sent) and all(1 <= wait <= 60 for wait in waits_asked(sent))


def test_an_edited_approval_carries_the_edited_args(server: ApprovalServer, signoff: Signoff) -> None:
    approval = signoff.request("refund", {"order": "W-3", "amount": 200}, key="wait-3")

    with deciding(lambda: person_for(server, approval.id).edit_and_approve({"order": "W-3", "amount": 50})):
        approval.wait(timeout=120)

    assert (approval.status, approval.decided_by) == ("approved", SECOND_APPROVER)
    assert approval.args == {"order": "W-3", "amount": 50}


# Starting and reporting -------------------------------------------------------------------------------


def test_an_approval_starts_exactly_once_and_a_second_start_is_a_conflict(server: ApprovalServer,
                                                                         signoff: Signoff) -> None:
    approval = signoff.request("refund", {"order": "S-1", "amount": 5}, key="start-1")

    assert approval.start() == {"order": "S-1", "amount": 5}
    assert approval.status == "started"
    again = signoff.get(approval.id)
    with pytest.raises(Conflict) as refused:
        again.start()

    assert (refused.value.code, refused.value.status, refused.value.approval_status) == \
        ("not_startable", 409, "started")
    assert [row["status"] for row in server.executions(approval.id)] == ["started"]


def test_a_pending_approval_cannot_be_started(signoff: Signoff) -> None:
    approval = signoff.request("refund", {"order": "S-2", "amount": 50}, key="start-2")

    with pytest.raises(Conflict) as refused:
        approval.start()

    assert refused.value.approval_status == "pending"


def test_the_outcome_is_reported_once(server: ApprovalServer, signoff: Signoff) -> None:
    approval = signoff.request("refund", {"order": "S-3", "amount": 5}, key="start-3")
    approval.start()

    assert approval.succeeded({"refund_id": "r_1"}).status == "succeeded"
    with pytest.raises(Conflict):
        approval.failed("too late")

    [row] = server.executions(approval.id)
    assert (row["status"], row["result"]) == ("succeeded", {"refund_id": "r_1"})


def test_a_failure_is_reported_with_its_words(server: ApprovalServer, signoff: Signoff) -> None:
    approval = signoff.request("refund", {"order": "S-4", "amount": 5}, key="start-4")
    approval.start()

    assert approval.failed(RuntimeError("card declined")).status == "failed"
    [row] = server.executions(approval.id)
    assert row["status"] == "failed" and "RuntimeError: card declined" in row["error"]


# The decorator ----------------------------------------------------------------------------------------


def test_gated_runs_the_function_once_with_the_approved_edited_args_and_reports_its_result(
        server: ApprovalServer, signoff: Signoff) -> None:
    calls: list[tuple[str, int, str]] = []

    @signoff.gated(tool="refund", key=lambda args: f"gated-{args['order']}", reason="the customer asked",
                   timeout=120)
    def refund(order: str, /, amount: int, *, currency: str = "EUR") -> str:
        calls.append((order, amount, currency))
        return f"refunded {amount} {currency} on {order}"

    edited = {"order": "G-1", "amount": 50, "currency": "EUR"}
    person = Person(server, lambda approval: approval.args.get("order") == "G-1")
    with deciding(lambda: person.edit_and_approve(edited)):
        result = refund("G-1", 200)

    assert calls == [("G-1", 50, "EUR")]
    assert result == "refunded 50 EUR on G-1"
    approval_id = _approval_id(server, "gated-G-1")
    run = server.run(approval_id)
    assert (run.origin["caller"]["args"], run.goal) == ({"order": "G-1", "amount": 200, "currency": "EUR"},
                                                        "the customer asked")
    [row] = server.executions(approval_id)
    assert (row["status"], row["result"]) == ("succeeded", "refunded 50 EUR on G-1")
    assert refund.__name__ == "refund"


def _approval_id(server: ApprovalServer, idempotency_key: str) -> str:
    """The approval a key's request made (its run), found as an operator would, by the key."""
    runs = server.world.db.store.list_runs(limit=1000)
    return next(run.run_id for run in runs if (run.origin.get("api") or {}).get("id_key") == idempotency_key)


def test_gated_reports_the_functions_exception_and_raises_it(server: ApprovalServer, signoff: Signoff) -> None:
    calls: list[int] = []

    @signoff.gated(tool="refund", key="gated-fails")
    def refund(amount: int) -> None:
        calls.append(amount)
        raise RuntimeError("card declined")

    with pytest.raises(RuntimeError, match="card declined"):
        refund(5)

    assert calls == [5]
    [row] = server.executions(_approval_id(server, "gated-fails"))
    assert row["status"] == "failed" and "RuntimeError: card declined" in row["error"]


def test_gated_does_not_run_a_denied_call(server: ApprovalServer, signoff: Signoff) -> None:
    calls: list[int] = []

    @signoff.gated(tool="refund", key="gated-denied", timeout=120)
    def refund(amount: int) -> None:
        calls.append(amount)

    person = Person(server, lambda approval: approval.args == {"amount": 500})
    with deciding(lambda: person.deny("too much")), pytest.raises(NotApproved) as refused:
        refund(500)

    assert calls == []
    assert refused.value.code == "denied"
    assert APPROVER in refused.value.message and "too much" in refused.value.message
    assert server.executions(_approval_id(server, "gated-denied")) == []


def test_gated_gives_up_when_nobody_decides_in_time(signoff: Signoff) -> None:
    calls: list[int] = []

    @signoff.gated(tool="refund", timeout=1)
    def refund(amount: int) -> None:
        calls.append(amount)

    with pytest.raises(NotApproved) as refused:
        refund(50)

    assert (refused.value.code, calls) == ("timeout", [])


def test_gated_uses_the_key_and_the_requester_it_is_given(server: ApprovalServer, signoff: Signoff) -> None:
    @signoff.gated(tool="refund", key=lambda args: f"refund-{args['order']}", requester="billing-bot")
    def refund(order: str, amount: int = 5) -> str:
        return order

    assert refund("G-5") == "G-5"
    run = server.run(_approval_id(server, "refund-G-5"))
    assert run.origin["api"]["requester"] == "billing-bot"


def test_gated_refuses_what_it_cannot_gate(signoff: Signoff) -> None:
    async def coroutine(amount: int) -> None: ...

    def positional(*amounts: int) -> None: ...

    with pytest.raises(TypeError, match="AsyncSignoff"):
        signoff.gated(tool="refund")(coroutine)
    with pytest.raises(TypeError, match=r"\*args"):
        signoff.gated(tool="refund")(positional)


# Async ------------------------------------------------------------------------------------------------


def test_the_async_client_asks_waits_starts_once_and_reports(server: ApprovalServer, key: str) -> None:
    async def main() -> tuple[Any, ...]:
        async with AsyncSignoff(server.url, key) as client:
            approval = await client.request("refund", {"order": "X-1", "amount": 200}, key="async-1")
            person = person_for(server, approval.id)
            with deciding(lambda: person.edit_and_approve({"order": "X-1", "amount": 50})):
                await approval.wait(timeout=120)
            args = await approval.start()
            second = await client.get(approval.id)
            with pytest.raises(Conflict) as refused:
                await second.start()
            await approval.succeeded("ok")
            return approval.id, args, refused.value.approval_status, approval.status

    approval_id, *rest = asyncio.run(main())
    assert rest == [{"order": "X-1", "amount": 50}, "started", "succeeded"]
    [row] = server.executions(approval_id)
    assert (row["status"], row["result"]) == ("succeeded", "ok")


def test_the_async_decorator_runs_the_coroutine_once_with_the_edited_args(server: ApprovalServer, key: str) -> None:
    calls: list[int] = []

    async def main() -> str:
        async with AsyncSignoff(server.url, key) as client:

            @client.gated(tool="refund", key="async-gated", timeout=120)
            async def refund(order: str, amount: int) -> str:
                calls.append(amount)
                return f"refunded {amount}"

            person = Person(server, lambda approval: approval.args.get("order") == "X-2")
            with deciding(lambda: person.edit_and_approve({"order": "X-2", "amount": 50})):
                return await refund("X-2", 200)

    assert asyncio.run(main()) == "refunded 50"
    assert calls == [50]
    [row] = server.executions(_approval_id(server, "async-gated"))
    assert (row["status"], row["result"]) == ("succeeded", "refunded 50")


def test_the_async_client_raises_the_same_errors(server: ApprovalServer) -> None:
    async def main() -> None:
        async with AsyncSignoff(server.url, "sk_signoff_wrong") as client:
            await client.request("refund", {}, key="k")

    with pytest.raises(Unauthorized) as refused:
        asyncio.run(main())
    assert (refused.value.code, refused.value.status) == ("unauthorized", 401)


def test_the_async_decorator_does_not_run_a_denied_call(key: str, server: ApprovalServer) -> None:
    calls: list[int] = []

    async def main() -> None:
        async with AsyncSignoff(server.url, key) as client:

            @client.gated(tool="refund")
            async def refund(amount: int) -> None:
                calls.append(amount)

            await refund(5000)

    with pytest.raises(NotApproved) as refused:
        asyncio.run(main())
    assert (refused.value.code, calls) == ("denied", [])
    assert "refunds over 1000 need finance" in refused.value.message
