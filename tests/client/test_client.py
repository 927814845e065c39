"""`signoff.client` against a stand-in of the approval API (tests/client/standin.py), over real HTTP.

The stand-in speaks the contract of issue #30 because the real server is not built yet: these tests
are to run against the real `signoff serve` once it exists.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

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
from tests.client.standin import ApprovalStandIn, Garbage, Stored, person

KEY = "sk-test"


@pytest.fixture
def api() -> Iterator[ApprovalStandIn]:
    with ApprovalStandIn(keys={KEY: None, "sk-refunds-only": {"refund"}, "sk-revoked": None},
                         revoked={"sk-revoked"}) as server:
        yield server


@pytest.fixture
def signoff(api: ApprovalStandIn) -> Iterator[Signoff]:
    with Signoff(api.url, KEY) as client:
        yield client


def waits_asked(api: ApprovalStandIn) -> list[int]:
    return [int(parse_qs(urlsplit(s.path).query).get("wait", ["0"])[0]) for s in api.requests_to("GET")]


# Asking -----------------------------------------------------------------------------------------------


def test_a_request_is_created_once_per_key_and_the_same_content_returns_the_same_approval(
        api: ApprovalStandIn, signoff: Signoff) -> None:
    first = signoff.request("refund", {"order": "A-17", "amount": 20}, key="k1", reason="customer asked")
    again = signoff.request("refund", {"order": "A-17", "amount": 20}, key="k1", reason="customer asked")

    assert first.status == again.status == "pending"
    assert first.id == again.id and first.digest == again.digest and first.expires_at
    assert first.args == {"order": "A-17", "amount": 20}
    assert len(api.approvals) == 1
    sent = api.requests_to("POST")[0]
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    # What was not given is not sent.
    assert sent.body == {"tool": "refund", "args": {"order": "A-17", "amount": 20}, "key": "k1",
                         "reason": "customer asked"}


def test_the_same_key_for_other_content_is_a_conflict_with_the_api_code(signoff: Signoff) -> None:
    signoff.request("refund", {"order": "A-17"}, key="k1")

    with pytest.raises(Conflict) as refused:
        signoff.request("refund", {"order": "B-2"}, key="k1")

    assert (refused.value.code, refused.value.status) == ("idempotency_conflict", 409)


def test_the_policy_answers_at_once_when_it_allows_or_denies(api: ApprovalStandIn, signoff: Signoff) -> None:
    api.policy = lambda tool, args: ("deny", "refunds over 100 need finance") if args["amount"] > 100 \
        else ("allow", None)

    allowed = signoff.request("refund", {"amount": 5}, key="small", side_effect=True)
    denied = signoff.request("refund", {"amount": 500}, key="large")

    assert (allowed.status, allowed.decided_by) == ("approved", "policy")
    assert (denied.status, denied.reason) == ("denied", "refunds over 100 need finance")
    assert api.requests_to("POST")[0].body["side_effect"] is True


@pytest.mark.parametrize(("api_key", "kind", "status", "code"), [
    ("sk-wrong", Unauthorized, 401, "unauthorized"),
    ("sk-revoked", Unauthorized, 401, "unauthorized"),
    ("sk-refunds-only", Forbidden, 403, "forbidden"),
])
def test_refusals_are_exceptions_with_the_api_code_and_the_http_status(
        api: ApprovalStandIn, api_key: str, kind: type[SignoffError], status: int, code: str) -> None:
    with Signoff(api.url, api_key) as client, pytest.raises(kind) as refused:
        client.request("delete_customer", {"id": 1}, key="k")

    assert (refused.value.code, refused.value.status) == (code, status)
    assert refused.value.message


def test_a_code_at_the_top_level_of_the_answer_is_read_too() -> None:
    with Garbage(status=403, body=b'{"code": "scope", "message": "not yours"}',
                 content_type="application/json") as server, Signoff(server.url, KEY) as client, \
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
    with Garbage(status=status, body=body) as server, Signoff(server.url, KEY) as client, \
            pytest.raises(SignoffError) as refused:
        client.request("refund", {}, key="k")

    assert (refused.value.code, refused.value.status) == (code, status)


def test_no_answer_at_all_is_unreachable(api: ApprovalStandIn) -> None:
    with Garbage() as server:
        closed = server.url  # nothing listens there once the block ends
    with Signoff(closed, KEY) as client, pytest.raises(Unreachable) as refused:
        client.request("refund", {}, key="k")

    assert (refused.value.code, refused.value.status) == ("unreachable", None)


def test_a_request_without_an_idempotency_key_is_refused_before_sending(api: ApprovalStandIn,
                                                                       signoff: Signoff) -> None:
    with pytest.raises(ValueError, match="key"):
        signoff.request("refund", {}, key="")
    assert api.seen == []


# Waiting ----------------------------------------------------------------------------------------------


def test_a_long_wait_polls_again_and_again_never_asking_more_than_60_s(api: ApprovalStandIn,
                                                                     signoff: Signoff) -> None:
    api.hold = 0.6  # the stand-in answers "pending" sooner than asked, so the client must ask again
    approval = signoff.request("refund", {"amount": 20}, key="k")

    def after_three_polls(pending: Stored) -> None:
        with api.changed:
            while len(api.requests_to("GET")) < 3:
                api.changed.wait(30)
        api.decide(pending.id, "approved", by="U_ALICE", reason="fine")

    with person(api, after_three_polls):
        approval.wait(timeout=300)

    assert (approval.status, approval.decided_by, approval.reason) == ("approved", "U_ALICE", "fine")
    assert len(waits_asked(api)) >= 3
    assert set(waits_asked(api)) == {60}


def test_a_wait_that_runs_out_returns_the_approval_still_pending(api: ApprovalStandIn, signoff: Signoff) -> None:
    approval = signoff.request("refund", {"amount": 20}, key="k")

    assert approval.wait(timeout=1).status == "pending"
    assert not approval.decided
    assert waits_asked(api) and all(1 <= wait <= 60 for wait in waits_asked(api))


def test_an_edited_approval_carries_the_edited_args(api: ApprovalStandIn, signoff: Signoff) -> None:
    approval = signoff.request("refund", {"order": "A-17", "amount": 200}, key="k")

    with person(api, lambda pending: api.decide(pending.id, "approved", args={"order": "A-17", "amount": 50})):
        approval.wait(timeout=60)

    assert approval.args == {"order": "A-17", "amount": 50}


# Starting and reporting -------------------------------------------------------------------------------


def test_an_approval_starts_exactly_once_and_a_second_start_is_a_conflict(api: ApprovalStandIn,
                                                                         signoff: Signoff) -> None:
    api.policy = lambda tool, args: ("allow", None)
    approval = signoff.request("refund", {"amount": 5}, key="k")

    assert approval.start() == {"amount": 5}
    assert approval.status == "started"
    again = signoff.get(approval.id)
    with pytest.raises(Conflict) as refused:
        again.start()

    assert (refused.value.code, refused.value.status, refused.value.approval_status) == \
        ("not_startable", 409, "started")
    assert api.approvals[approval.id].starts == 2


def test_a_pending_approval_cannot_be_started(signoff: Signoff) -> None:
    approval = signoff.request("refund", {"amount": 5}, key="k")

    with pytest.raises(Conflict) as refused:
        approval.start()

    assert refused.value.approval_status == "pending"


def test_the_outcome_is_reported_once(api: ApprovalStandIn, signoff: Signoff) -> None:
    api.policy = lambda tool, args: ("allow", None)
    approval = signoff.request("refund", {"amount": 5}, key="k")
    approval.start()

    assert approval.succeeded({"refund_id": "r_1"}).status == "succeeded"
    with pytest.raises(Conflict):
        approval.failed("too late")

    assert api.approvals[approval.id].outcome == {"ok": True, "result": {"refund_id": "r_1"}}


def test_a_failure_is_reported_with_its_words(api: ApprovalStandIn, signoff: Signoff) -> None:
    api.policy = lambda tool, args: ("allow", None)
    approval = signoff.request("refund", {"amount": 5}, key="k")
    approval.start()

    assert approval.failed(RuntimeError("card declined")).status == "failed"
    assert api.approvals[approval.id].outcome == {"ok": False, "error": "RuntimeError: card declined"}


# The decorator ----------------------------------------------------------------------------------------


def test_gated_runs_the_function_once_with_the_approved_edited_args_and_reports_its_result(
        api: ApprovalStandIn, signoff: Signoff) -> None:
    calls: list[tuple[str, int, str]] = []

    @signoff.gated(tool="refund", reason="the customer asked", timeout=60)
    def refund(order: str, /, amount: int, *, currency: str = "EUR") -> str:
        calls.append((order, amount, currency))
        return f"refunded {amount} {currency} on {order}"

    edited = {"order": "A-17", "amount": 50, "currency": "EUR"}
    with person(api, lambda pending: api.decide(pending.id, "approved", args=edited)):
        result = refund("A-17", 200)

    assert calls == [("A-17", 50, "EUR")]
    assert result == "refunded 50 EUR on A-17"
    (stored,) = api.approvals.values()
    assert stored.request["args"] == {"order": "A-17", "amount": 200, "currency": "EUR"}
    assert stored.request["reason"] == "the customer asked"
    assert (stored.status, stored.starts) == ("succeeded", 1)
    assert stored.outcome == {"ok": True, "result": "refunded 50 EUR on A-17"}
    assert refund.__name__ == "refund"


def test_gated_reports_the_functions_exception_and_raises_it(api: ApprovalStandIn, signoff: Signoff) -> None:
    api.policy = lambda tool, args: ("allow", None)
    calls: list[int] = []

    @signoff.gated(tool="refund")
    def refund(amount: int) -> None:
        calls.append(amount)
        raise RuntimeError("card declined")

    with pytest.raises(RuntimeError, match="card declined"):
        refund(5)

    (stored,) = api.approvals.values()
    assert calls == [5]
    assert (stored.status, stored.outcome) == ("failed", {"ok": False, "error": "RuntimeError: card declined"})


def test_gated_does_not_run_a_denied_call(api: ApprovalStandIn, signoff: Signoff) -> None:
    calls: list[int] = []

    @signoff.gated(tool="refund", timeout=60)
    def refund(amount: int) -> None:
        calls.append(amount)

    with person(api, lambda pending: api.decide(pending.id, "denied", by="U_BOB", reason="too much")), \
            pytest.raises(NotApproved) as refused:
        refund(500)

    assert calls == []
    assert refused.value.code == "denied"
    assert "U_BOB" in refused.value.message and "too much" in refused.value.message
    assert api.requests_to("POST", "/start") == []


def test_gated_gives_up_when_nobody_decides_in_time(api: ApprovalStandIn, signoff: Signoff) -> None:
    calls: list[int] = []

    @signoff.gated(tool="refund", timeout=1)
    def refund(amount: int) -> None:
        calls.append(amount)

    with pytest.raises(NotApproved) as refused:
        refund(5)

    assert (refused.value.code, calls) == ("timeout", [])


def test_gated_uses_the_key_it_is_given(api: ApprovalStandIn, signoff: Signoff) -> None:
    api.policy = lambda tool, args: ("allow", None)

    @signoff.gated(tool="refund", key=lambda args: f"refund-{args['order']}", requester="billing-bot")
    def refund(order: str) -> str:
        return order

    assert refund("A-17") == "A-17"
    (stored,) = api.approvals.values()
    assert (stored.key, stored.request["requester"]) == ("refund-A-17", "billing-bot")


def test_gated_refuses_what_it_cannot_gate(signoff: Signoff) -> None:
    async def coroutine(amount: int) -> None: ...

    def positional(*amounts: int) -> None: ...

    with pytest.raises(TypeError, match="AsyncSignoff"):
        signoff.gated(tool="refund")(coroutine)
    with pytest.raises(TypeError, match=r"\*args"):
        signoff.gated(tool="refund")(positional)


# Async ------------------------------------------------------------------------------------------------


def test_the_async_client_asks_waits_starts_once_and_reports(api: ApprovalStandIn) -> None:
    api.hold = 0.2

    async def main() -> tuple[Any, ...]:
        async with AsyncSignoff(api.url, KEY) as client:
            approval = await client.request("refund", {"amount": 200}, key="k")
            with person(api, lambda pending: api.decide(pending.id, "approved", args={"amount": 50})):
                await approval.wait(timeout=60)
            args = await approval.start()
            second = await client.get(approval.id)
            with pytest.raises(Conflict) as refused:
                await second.start()
            await approval.succeeded("ok")
            return args, refused.value.approval_status, approval.status

    assert asyncio.run(main()) == ({"amount": 50}, "started", "succeeded")
    assert api.approvals["apr_0001"].outcome == {"ok": True, "result": "ok"}


def test_the_async_decorator_runs_the_coroutine_once_with_the_edited_args(api: ApprovalStandIn) -> None:
    calls: list[int] = []

    async def main() -> str:
        async with AsyncSignoff(api.url, KEY) as client:

            @client.gated(tool="refund", timeout=60)
            async def refund(amount: int) -> str:
                calls.append(amount)
                return f"refunded {amount}"

            with person(api, lambda pending: api.decide(pending.id, "approved", args={"amount": 50})):
                return await refund(200)

    assert asyncio.run(main()) == "refunded 50"
    assert calls == [50]
    assert api.approvals["apr_0001"].outcome == {"ok": True, "result": "refunded 50"}


def test_the_async_client_raises_the_same_errors(api: ApprovalStandIn) -> None:
    async def main() -> None:
        async with AsyncSignoff(api.url, "sk-wrong") as client:
            await client.request("refund", {}, key="k")

    with pytest.raises(Unauthorized) as refused:
        asyncio.run(main())
    assert (refused.value.code, refused.value.status) == ("unauthorized", 401)


def test_the_async_decorator_does_not_run_a_denied_call(api: ApprovalStandIn) -> None:
    api.policy = lambda tool, args: ("deny", "never on Sundays")
    calls: list[int] = []

    async def main() -> None:
        async with AsyncSignoff(api.url, KEY) as client:

            @client.gated(tool="refund")
            async def refund(amount: int) -> None:
                calls.append(amount)

            await refund(5)

    with pytest.raises(NotApproved) as refused:
        asyncio.run(main())
    assert (refused.value.code, calls) == ("denied", [])
    assert "never on Sundays" in refused.value.message
