"""The approval API through real processes: keys made with the real `signoff keys` command, a real
`signoff serve` (gunicorn, HTTP), the Python client, the card in (fake) Slack and an Approve click
signed as Slack signs it. A caller asks, a person approves in Slack, the caller starts the call
once and reports it; refusals get their documented codes and change nothing."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

from scenarios.drive import APPROVER, messages_with
from scenarios.world import World, wait_until
from signoff.bot.slack.blocks import APPROVE_ACTION, EDIT_ACTION
from signoff.bot.slack.edit_form import EDIT_INPUT
from signoff.client import Conflict, Forbidden, Signoff, Unauthorized
from tests.approval_server import ApprovalServer
from tests.fakes.receiver import WebhookReceiver, documented_recipe, wait_for

POLICY = """
rules:
  - name: small refunds run
    tool: refund
    when: args.amount < 10
    decision: allow
  - name: no deletes
    tool: delete_account
    decision: deny
    reason: accounts are closed by support, not by agents
"""


@pytest.fixture(scope="module")
def server() -> Iterator[ApprovalServer]:
    server = ApprovalServer(POLICY)
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
def keys(server: ApprovalServer) -> Callable[..., str]:
    """`signoff keys ...` on the server's database, as an operator runs it: its output."""
    return server.keys


@pytest.fixture(scope="module")
def made(keys: Callable[..., str]) -> list[str]:
    """`signoff keys create`'s output: the callback secret on its second line, the key's on its last."""
    return keys("create", "ci-bot", "--channel", "C0RUNS", "--tools", "refund,delete_account").splitlines()


@pytest.fixture(scope="module")
def secret(made: list[str]) -> str:
    return made[-1]


def click_approve(world: World, approval_id: str) -> None:
    prefix = f"{approval_id}:"
    message = wait_until(lambda: next(iter(messages_with(world, APPROVE_ACTION, prefix)), None), 30,
                         what="the approval card in Slack")
    assert world.serves[0].click(message, APPROVE_ACTION, APPROVER).status == 200


def approval_of(world: World, run_id: str) -> Any:
    return wait_until(lambda: next(iter(world.db.store.list_approvals(run_id=run_id, limit=1)), None), 30,
                      what="the approval")


def test_a_caller_asks_a_person_approves_in_slack_and_the_call_starts_once(world: World, url: str,
                                                                          secret: str) -> None:
    with Signoff(url, secret) as signoff:
        approval = signoff.request("refund", {"order": "A-1", "amount": 40}, key="refund-A-1",
                                   reason="refund A-1: the parcel never came")
        assert approval.status == "pending"
        waited: list[Any] = []
        waiter = threading.Thread(target=lambda: waited.append(signoff.get(approval.id, wait=30)))
        waiter.start()  # a caller waiting on a long poll while the person decides
        click_approve(world, approval_of(world, approval.id).approval_id)
        waiter.join(40)
        assert waited and waited[0].status == "approved" and waited[0].decided_by == APPROVER

        assert approval.start() == {"order": "A-1", "amount": 40}
        assert (approval.status, approval.key) == ("started", f"{approval.id}:1")
        with pytest.raises(Conflict) as again:
            approval.start()
        assert again.value.approval_status == "started"
        assert approval.succeeded({"refund_id": "R-9"}).status == "succeeded"
        with pytest.raises(Conflict):
            approval.succeeded({"refund_id": "R-10"})

    [row] = world.db.store.executions(approval.id)
    assert (row["status"], row["result"]) == ("succeeded", {"refund_id": "R-9"})
    said = [e["type"] for e in world.db.store.timeline(approval.id)]
    assert said.index("approval_recorded") < said.index("call_handed_to_caller") < said.index("execution_started") \
        < said.index("tool_executed") < said.index("finished")
    assert world.db.store.get_run(approval.id, history=False).status == "done"


def test_the_policy_decides_an_api_call_as_it_decides_a_run_s(url: str, secret: str) -> None:
    with Signoff(url, secret) as signoff:
        allowed = signoff.request("refund", {"order": "A-2", "amount": 5}, key="refund-A-2")
        assert (allowed.status, allowed.decided_by) == ("approved", "policy:small refunds run")
        denied = signoff.request("delete_account", {"account": "A-2"}, key="delete-A-2")
        assert denied.status == "denied"
        assert "closed by support" in (denied.reason or "")
        with pytest.raises(Conflict) as refused:
            denied.start()
        assert refused.value.approval_status == "denied"


def test_a_call_the_policy_decides_alone_posts_nothing_and_one_asked_of_a_person_is_told_in_full(
        world: World, url: str, secret: str) -> None:
    """A program's reads must not fill the channel: nothing of a request the policy allows or refuses
    is posted (the audit log keeps it); a request that asks someone gets its run message, its card and
    its thread, as a run does."""
    with Signoff(url, secret) as signoff:
        allowed = signoff.request("refund", {"order": "A-3", "amount": 5}, key="quiet-refund-3")
        assert allowed.start() == {"order": "A-3", "amount": 5}
        allowed.succeeded({"refund_id": "R-3"})
        denied = signoff.request("delete_account", {"account": "A-3"}, key="quiet-delete-3")
        asked = signoff.request("refund", {"order": "A-4", "amount": 40}, key="quiet-refund-4")
        click_approve(world, approval_of(world, asked.id).approval_id)
        assert signoff.get(asked.id, wait=30).status == "approved"
        asked.start()
        asked.succeeded({"refund_id": "R-4"})
    for run_id in (allowed.id, denied.id, asked.id):
        wait_until(lambda r=run_id: world.db.store.get_run(r, history=False).status in ("done", "failed")
                   and not world.db.store.run_notices(r), 30, what=f"{run_id} settled and told")
    said = [json.dumps(c.body) for c in world.slack.calls if c.method in ("chat.postMessage", "chat.update")]
    assert not [c for c in said if allowed.id in c or denied.id in c]
    assert [e["type"] for e in world.db.store.timeline(allowed.id)][-1] == "finished"  # kept all the same
    thread = world.db.store.get_run(asked.id, history=False).origin.get("ts")
    assert thread and any(asked.id in c for c in said)
    assert any(c.method == "chat.postMessage" and c.body.get("thread_ts") == thread and "R-4" in json.dumps(c.body)
               for c in world.slack.calls), "the asked call's result was not told in its run's thread"


def test_a_call_the_policy_approves_at_once_starts_in_the_same_request_and_only_once(url: str, secret: str) -> None:
    with Signoff(url, secret) as signoff:
        allowed = signoff.request("refund", {"order": "A-5", "amount": 5}, key="start-refund-5", start=True)
        assert (allowed.status, allowed.key) == ("started", f"{allowed.id}:1")
        assert allowed.start() == {"order": "A-5", "amount": 5}  # started for us: nothing more to ask
        with pytest.raises(Conflict):
            allowed.start()
        again = signoff.request("refund", {"order": "A-5", "amount": 5}, key="start-refund-5", start=True)
        assert again.id == allowed.id and again.status == "started"
        with pytest.raises(Conflict):  # a retried request finds it started and starts nothing
            again.start()
        assert allowed.succeeded({"refund_id": "R-5"}).status == "succeeded"
        asked = signoff.request("refund", {"order": "A-6", "amount": 60}, key="start-refund-6", start=True)
        assert asked.status == "pending"  # a person decides first: nothing starts
    with httpx.Client() as http:
        answer = http.post(f"{url}/v1/approvals", headers={"Authorization": f"Bearer {secret}"},
                           json={"tool": "refund", "args": {"order": "A-7", "amount": 5}, "key": "start-refund-7",
                                 "start": True})
    assert answer.status_code == 201 and answer.json()["status"] == "started"
    assert answer.json()["deadline_seconds"] > 0 and answer.json()["key"].endswith(":1")


def test_the_same_key_is_the_same_approval_and_other_content_under_it_is_refused(url: str, secret: str) -> None:
    headers = {"Authorization": f"Bearer {secret}"}
    body = {"tool": "refund", "args": {"order": "A-3", "amount": 70}, "key": "refund-A-3"}
    first = httpx.post(f"{url}/v1/approvals", json=body, headers=headers, timeout=30)
    again = httpx.post(f"{url}/v1/approvals", json=body, headers=headers, timeout=30)
    other = httpx.post(f"{url}/v1/approvals", json={**body, "args": {"order": "A-3", "amount": 700}},
                       headers=headers, timeout=30)
    assert (first.status_code, again.status_code, other.status_code) == (201, 200, 409)
    assert first.json()["id"] == again.json()["id"]
    assert other.json()["error"]["code"] == "idempotency_conflict"


@pytest.mark.parametrize(("body", "status", "code"), [
    (b"{not json", 400, "invalid_json"),
    (b'{"tool": "refund", "args": {}}', 400, "invalid_request"),
    (b'{"tool": "refund", "args": [], "key": "k"}', 400, "invalid_request"),
    (b'{"tool": "refund", "args": {}, "key": "k", "ttl": 0}', 400, "invalid_request"),
    (b'{"tool": "refund", "args": {}, "key": "k", "ttl": true}', 400, "invalid_request"),
    (b'{"tool": "refund", "args": {}, "key": "k", "side_effect": "false"}', 400, "invalid_request"),
    (b'{"tool": "refund", "args": {}, "key": 7}', 400, "invalid_request"),
    (b'{"tool": "refund", "args": {}, "key": "k", "callback_url": "file:///etc/passwd"}', 400, "invalid_request"),
    (b'{"tool": "send_email", "args": {}, "key": "k"}', 403, "forbidden"),
    (b'{"tool": "refund", "args": {"blob": "' + b"x" * 300_000 + b'"}, "key": "k"}', 413, "invalid_body"),
])
def test_a_bad_request_gets_its_documented_error_and_changes_nothing(world: World, url: str, secret: str,
                                                                     body: bytes, status: int, code: str) -> None:
    before = len(world.db.store.list_runs(limit=1000))
    answer = httpx.post(f"{url}/v1/approvals", content=body, timeout=30,
                        headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"})
    assert (answer.status_code, answer.json()["error"]["code"]) == (status, code)
    assert len(world.db.store.list_runs(limit=1000)) == before


def test_keys_no_key_a_wrong_one_a_revoked_one_and_another_key_s_approval(
        world: World, url: str, keys: Callable[..., str], secret: str) -> None:
    body = {"tool": "refund", "args": {"order": "A-4", "amount": 50}, "key": "refund-A-4"}
    assert httpx.post(f"{url}/v1/approvals", json=body, timeout=30).status_code == 401
    with Signoff(url, "sk_signoff_wrong") as wrong, pytest.raises(Unauthorized):
        wrong.request("refund", body["args"], key="k")
    other = keys("create", "other-bot", "--channel", "C0RUNS", "--tools", "lookup").splitlines()[-1]
    with Signoff(url, secret) as mine, Signoff(url, other) as theirs:
        approval = mine.request("refund", body["args"], key="refund-A-4")
        with pytest.raises(Forbidden):
            theirs.request("refund", body["args"], key="k")
        answer = httpx.get(f"{url}/v1/approvals/{approval.id}", headers={"Authorization": f"Bearer {other}"},
                           timeout=30)
        assert (answer.status_code, answer.json()["error"]["code"]) == (404, "not_found")
    assert "other-bot" in keys("list") and other not in keys("list")
    keys("revoke", "other-bot")
    with Signoff(url, other) as revoked, pytest.raises(Unauthorized):
        revoked.request("lookup", {}, key="k")


def test_starting_before_a_decision_and_reporting_before_a_start_are_refused(url: str, secret: str) -> None:
    with Signoff(url, secret) as signoff:
        approval = signoff.request("refund", {"order": "A-5", "amount": 90}, key="refund-A-5")
        with pytest.raises(Conflict) as early:
            approval.start()
        assert early.value.approval_status == "pending"
        answer = httpx.post(f"{url}/v1/approvals/{approval.id}/outcome", json={"ok": True}, timeout=30,
                            headers={"Authorization": f"Bearer {secret}"})
        assert (answer.status_code, answer.json()["error"]["code"]) == (409, "not_started")


def test_the_api_describes_itself(url: str) -> None:
    document = httpx.get(f"{url}/v1/openapi.json", timeout=30).json()
    assert document["openapi"].startswith("3.1")
    assert {"/v1/approvals", "/v1/approvals/{id}", "/v1/approvals/{id}/start", "/v1/approvals/{id}/outcome"} \
        <= set(document["paths"])
    assert "key" in document["components"]["schemas"]["CreateApproval"]["required"]


def test_the_card_says_which_key_asked_and_marks_the_caller_s_own_words(world: World, url: str,
                                                                       secret: str) -> None:
    with Signoff(url, secret) as signoff:
        approval = signoff.request("refund", {"order": "A-6", "amount": 60}, key="refund-A-6",
                                   reason="refund A-6", requester="the release pipeline")
    prefix = f"{approval_of(world, approval.id).approval_id}:"
    card = wait_until(lambda: next(iter(messages_with(world, APPROVE_ACTION, prefix)), None), 30, what="the card")
    text = str(card["blocks"])
    assert "the API key `ci-bot`" in text
    assert "the release pipeline" in text and "not checked" in text


def test_a_key_that_asks_too_often_is_told_when_to_come_back(world: World, secret: str) -> None:
    strict = world.start(SIGNOFF_API_RATE="3")  # a second replica, whose limit is three a minute
    url = f"http://127.0.0.1:{strict.port}"
    headers = {"Authorization": f"Bearer {secret}"}
    answers = [httpx.get(f"{url}/v1/approvals/run-0000000000", headers=headers, timeout=30) for _ in range(4)]
    assert [a.status_code for a in answers] == [404, 404, 404, 429]
    assert answers[-1].json()["error"]["code"] == "rate_limited"
    assert 1 <= int(answers[-1].headers["Retry-After"]) <= 20


def test_a_caller_s_ttl_shortens_the_approval_s_time_limit(url: str, secret: str) -> None:
    with Signoff(url, secret) as signoff:
        approval = signoff.request("refund", {"order": "A-7", "amount": 80}, key="refund-A-7", ttl=120)
    assert approval.status == "pending" and approval.expires_at is not None
    left = datetime.fromisoformat(approval.expires_at) - datetime.now(UTC)
    assert timedelta(seconds=60) < left <= timedelta(seconds=120)


def test_an_approver_edits_the_call_in_slack_and_the_caller_runs_the_edited_arguments(world: World, url: str,
                                                                                       secret: str) -> None:
    with Signoff(url, secret) as signoff:
        approval = signoff.request("refund", {"order": "A-8", "amount": 90}, key="refund-A-8")
        first = approval_of(world, approval.id)
        card = wait_until(lambda: next(iter(messages_with(world, EDIT_ACTION, f"{first.approval_id}:")), None), 30,
                          what="the card")
        opened = len(world.slack.modals)
        world.serves[0].click(card, EDIT_ACTION, APPROVER)
        wait_until(lambda: len(world.slack.modals) > opened, 30, what="the Edit form")
        [box] = [b for b in world.slack.modal()["blocks"] if b["type"] == "input"]  # one JSON box: no schema
        values = {box["block_id"]: {EDIT_INPUT: {"type": box["element"]["type"],
                                                 "value": json.dumps({"order": "A-8", "amount": 45})}}}
        payload = {"type": "view_submission", "team": {"id": "T0TEST"}, "user": {"id": APPROVER},
                   "api_app_id": "A0SIGNOFF", "token": "legacy", "trigger_id": "9.4.trigger", "response_urls": [],
                   "view": {**world.slack.modal(), "state": {"values": values}}}
        world.serves[0].post(urlencode({"payload": json.dumps(payload)}))
        edited = wait_until(lambda: next((a for a in world.db.store.list_approvals(run_id=approval.id)
                                          if a.status == "pending" and a.approval_id != first.approval_id), None),
                            30, what="the edited call asked about afresh")
        click_approve(world, edited.approval_id)
        assert approval.wait(30).status == "approved"
        assert approval.start() == {"order": "A-8", "amount": 45}, "the caller runs what the approver edited"
        approval.succeeded({"refund_id": "R-8"})


def test_a_caller_finds_its_approval_by_the_key_it_asked_under(url: str, secret: str) -> None:
    with Signoff(url, secret) as signoff:
        asked = signoff.request("refund", {"order": "A-11", "amount": 30}, key="refund-A-11")
        found = signoff.find("refund-A-11")
        assert found is not None and (found.id, found.status) == (asked.id, "pending")
        assert signoff.find("never-asked") is None
    answer = httpx.get(f"{url}/v1/approvals", headers={"Authorization": f"Bearer {secret}"}, timeout=30)
    assert (answer.status_code, answer.json()["error"]["code"]) == (400, "invalid_request")


def test_a_callback_tells_the_caller_of_the_decision_signed_and_again_until_it_is_taken(
        world: World, url: str, secret: str, made: list[str]) -> None:
    callback_secret = made[1].rsplit(" ", 1)[-1]
    assert callback_secret.startswith("whsec_signoff_")
    recipe = documented_recipe()  # the audit webhook's receiver recipe checks a callback as well
    with WebhookReceiver() as receiver, Signoff(url, secret) as signoff:
        receiver.down = True
        approval = signoff.request("refund", {"order": "A-12", "amount": 60}, key="refund-A-12",
                                   callback_url=receiver.url)
        click_approve(world, approval_of(world, approval.id).approval_id)
        wait_for(lambda: receiver.refused() >= 1, what="a callback refused while the receiver is down")
        receiver.down = False
        wait_for(lambda: receiver.taken(), what="the callback taken once the receiver is up")
        [taken] = receiver.taken()
        assert recipe["verified"](callback_secret, taken.signature, taken.body)
        told = json.loads(taken.body)
        assert (told["type"], told["id"], told["status"], told["decided_by"]) == \
            ("approval.decided", approval.id, "approved", APPROVER)


def test_a_request_may_name_another_channel_its_key_allows_and_no_other(world: World, url: str,
                                                                         keys: Callable[..., str]) -> None:
    rooms = keys("create", "two-rooms", "--channel", "C0RUNS", "--channel", "C0PRIVATE",
                 "--tools", "refund").splitlines()[-1]
    with Signoff(url, rooms) as signoff:
        approval = signoff.request("refund", {"order": "A-13", "amount": 55}, key="refund-A-13", channel="C0PRIVATE")
        with pytest.raises(Forbidden):
            signoff.request("refund", {"order": "A-14", "amount": 55}, key="refund-A-14", channel="C0ELSEWHERE")
    prefix = f"{approval_of(world, approval.id).approval_id}:"
    card = wait_until(lambda: next(iter(messages_with(world, APPROVE_ACTION, prefix)), None), 30, what="the card")
    assert card["channel"] == "C0PRIVATE"
    assert "C0RUNS,C0PRIVATE" in keys("list")
