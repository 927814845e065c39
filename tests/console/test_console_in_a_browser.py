"""The web console in a real browser (Chromium, driven by Playwright) against a real OpenID Connect
provider and a real `signoff serve`: signing in, the inbox, an Approve from the page that runs the
call once, a Slack click and a web click racing, step-up, CSRF, a forged cookie, and what a person
who is no approver sees. `CONSOLE_SCREENSHOTS=<folder>` keeps the inbox and a run's page as PNG."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scenarios.drive import message_with
from scenarios.serve import Reply
from scenarios.world import wait_until
from signoff.bot.console.pages import RUNS_SHOWN
from signoff.bot.slack.blocks import APPROVE_ACTION, OPEN_PAGE_ACTION
from signoff.bot.words import receipt_words
from tests.console.harness import STEP_UP_S, Rig, rig

pytestmark = pytest.mark.slow
SHOTS = os.environ.get("CONSOLE_SCREENSHOTS")


@pytest.fixture(scope="module")
def console() -> Iterator[Rig]:
    with rig() as made:
        yield made


@pytest.fixture(scope="module")
def lead(console: Rig) -> Iterator[Any]:
    """U0LEAD's browser, signed in with the Slack-style claim."""
    browser = console.browser()
    page = browser.new_page()
    console.sign_in(page, "lead")
    yield page
    browser.close()


def test_signing_in_maps_the_person_to_their_slack_user(console: Rig, lead: Any) -> None:
    assert "U0LEAD" in lead.locator("header").inner_text()
    browser = console.browser()
    try:
        page = browser.new_page()
        console.sign_in(page, "oncall")  # no Slack claim: found by email through users.lookupByEmail
        assert "U0ONCALL1" in page.locator("header").inner_text()
        assert [call.get("email") for call in console.world.slack.calls_to("users.lookupByEmail")] == [
            "otto@example.com"]
    finally:
        browser.close()


def test_an_approve_from_the_inbox_runs_the_call_once(console: Rig, lead: Any) -> None:
    run_id = console.start_run("U0ASKER")
    approval = console.pending(run_id)
    lead.goto(console.base + "/ui/approvals")
    card = lead.get_by_role("article").filter(has_text=approval.key)
    assert "to: \"ada@example.com\"" in card.inner_text()  # the arguments as the card shows them
    if SHOTS:
        lead.set_viewport_size({"width": 1000, "height": 760})
        lead.screenshot(path=str(Path(SHOTS) / "console-inbox.png"), full_page=True)
    card.get_by_role("link", name="Decide").click()
    lead.get_by_role("button", name="Approve").click()
    assert "Approved: send_note runs now, once." in lead.get_by_role("status").inner_text()
    wait_until(lambda: console.world.db.store.get_run(run_id, history=False).status == "done", 30, what="run done")
    assert len(console.effects(approval.key)) == 1
    lead.goto(f"{console.base}/ui/runs/{run_id}")
    page = lead.locator("main").inner_text()
    assert "Verified: every event matches its hash" in page and "U0LEAD" in page and "succeeded" in page
    receipt = console.world.db.store.receipt_of(approval_id=approval.approval_id)
    assert receipt is not None and receipt_words(receipt) in page  # the signed receipt, as the card shows it
    if SHOTS:
        # The test's model is a script in a temporary folder: its path is nobody's business in a picture.
        lead.screenshot(path=str(Path(SHOTS) / "console-run.png"), full_page=True,
                        mask=[lead.locator("dd code").filter(has_text="scripted:")], mask_color="#ffffff")


def test_a_slack_click_and_a_web_click_racing_decide_once(console: Rig, lead: Any) -> None:
    run_id = console.start_run("U0ASKER")
    approval = console.pending(run_id)
    card = wait_until(lambda: message_with(console.world, APPROVE_ACTION, approval.approval_id), 30, what="card")
    lead.goto(f"{console.base}/ui/approvals/{approval.approval_id}")
    clicked: list[Reply] = []
    slack = threading.Thread(target=lambda: clicked.append(console.serve.click(card, APPROVE_ACTION, "U0ONCALL1")))
    slack.start()
    lead.get_by_role("button", name="Approve").click()
    slack.join(30)
    said = lead.get_by_role("status").inner_text()
    wait_until(lambda: console.world.db.store.get_run(run_id, history=False).status == "done", 30, what="run done")
    decided = console.world.db.store.get_approval(approval.approval_id)
    assert decided.decided_by in ("U0LEAD", "U0ONCALL1") and len(decided.votes) == 1
    assert ("Approved" in said) == (decided.decided_by == "U0LEAD")
    assert ("Someone decided first" in said) == (decided.decided_by == "U0ONCALL1")
    assert len(console.effects(approval.key)) == 1


def test_a_step_up_rule_refuses_slack_and_a_stale_sign_in_and_takes_a_fresh_one(console: Rig, lead: Any) -> None:
    run_id = console.start_run("U0ONCALL2")
    approval = console.pending(run_id)
    card = wait_until(lambda: message_with(console.world, OPEN_PAGE_ACTION, approval.approval_id), 30, what="card")
    link = next(e for b in card["blocks"] if b["type"] == "actions" for e in b["elements"]
                if e["action_id"] == OPEN_PAGE_ACTION)
    assert link["url"] == f"{console.base}/ui/approvals/{approval.approval_id}"
    assert not any(e.get("action_id") == APPROVE_ACTION for b in card["blocks"] if b["type"] == "actions"
                   for e in b["elements"])
    # A forged (or old) Approve click on it is refused by the runner, and the person told where to go.
    console.serve.click(card, APPROVE_ACTION, "U0LEAD", value=f"{approval.approval_id}:{approval.digest}")
    told = wait_until(lambda: [c for c in console.world.slack.calls_to("chat.postEphemeral")
                               if approval.approval_id in str(c)], 30, what="the refusal")
    assert "needs a sign-in no older than 20 s" in str(told[-1])
    assert console.world.db.store.get_approval(approval.approval_id).status == "pending"
    # The lead's sign-in grows older than the rule allows: the page asks for a fresh one, and the
    # form sent anyway is refused by the same runner check.
    time.sleep(max(0.0, console.signed_in_at["lead"] + STEP_UP_S + 2 - time.time()))
    lead.goto(f"{console.base}/ui/approvals/{approval.approval_id}")
    assert lead.get_by_role("button", name="Approve").count() == 0
    csrf = lead.locator("input[name=csrf]").first.get_attribute("value")
    stale = lead.request.post(f"{console.base}/ui/approvals/{approval.approval_id}/decide", form={
        "csrf": csrf, "digest": approval.digest, "decision": "approve"})
    assert "needs a sign-in no older than 20 s" in stale.text()
    assert console.world.db.store.get_approval(approval.approval_id).status == "pending"
    # Signing in again (prompt=login, max_age) takes it.
    lead.get_by_role("link", name="Sign in again to approve").click()
    console.log_in_at_provider(lead, "lead")
    lead.get_by_role("button", name="Approve").click()
    assert "Approved" in lead.get_by_role("status").inner_text()
    wait_until(lambda: len(console.effects(approval.key)) == 1, 30, what="the call run")
    recorded = [e for e in console.world.db.store.timeline(run_id) if e["type"] == "approval_recorded"]
    assert recorded[-1]["step_up"]["max_age_seconds"] == STEP_UP_S
    assert recorded[-1]["step_up"]["signed_in_at"]
    receipt = console.world.db.store.receipt_of(approval_id=approval.approval_id)
    assert receipt is not None and receipt["receipt"]["step_up"] == {
        "stepped_up": True, "signed_in_at": recorded[-1]["step_up"]["signed_in_at"],
        "issuer": recorded[-1]["step_up"]["issuer"]}


def test_a_form_without_its_csrf_token_or_with_a_forged_cookie_is_refused(console: Rig, lead: Any) -> None:
    run_id = console.start_run("U0ASKER")
    approval = console.pending(run_id)
    url = f"{console.base}/ui/approvals/{approval.approval_id}/decide"
    for form in ({"digest": approval.digest, "decision": "approve"},
                 {"csrf": "not-the-token", "digest": approval.digest, "decision": "approve"}):
        answer = lead.request.post(url, form=form)
        assert answer.status == 403
    browser = console.browser()
    try:
        page = browser.new_page()
        forged = next(c["value"] for c in lead.context.cookies() if c["name"] == "signoff_session")
        body, mac = forged.split(".")
        page.context.add_cookies([{"name": "signoff_session", "value": f"{body}x.{mac}", "url": console.base + "/ui/"}])
        assert page.request.post(url, form={"digest": approval.digest, "decision": "approve"}).status == 401
        page.goto(f"{console.base}/ui/approvals")
        assert page.get_by_role("link", name="Sign in").count() == 1
    finally:
        browser.close()
    assert console.world.db.store.get_approval(approval.approval_id).status == "pending"


def test_someone_who_is_no_approver_sees_nothing_of_other_peoples_runs(console: Rig) -> None:
    run_id = console.start_run("U0ASKER")
    approval = console.pending(run_id)
    browser = console.browser()
    try:
        page = browser.new_page()
        console.sign_in(page, "stranger")
        assert "No run you may see matches." in page.locator("main").inner_text()
        page.goto(console.base + "/ui/approvals")
        assert "Nothing is waiting for your decision." in page.locator("main").inner_text()
        for path in (f"/ui/runs/{run_id}", f"/ui/approvals/{approval.approval_id}"):
            assert page.goto(console.base + path).status == 404
    finally:
        browser.close()


def test_the_runs_list_pages_through_every_run_a_filter_matches(console: Rig, lead: Any) -> None:
    """More runs than a page shows, filtered in the database: each is listed once across the pages."""
    made = {console.start_run("U0PAGED") for _ in range(RUNS_SHOWN + 3)}
    for run_id in made:
        console.pending(run_id)

    def listed() -> list[str]:
        return [link.inner_text() for link in lead.locator("tbody a").all()]

    lead.goto(console.base + "/ui/?requester=U0PAGED&tool=send_note")
    first = listed()
    lead.get_by_role("link", name="Older runs").click()
    lead.wait_for_url("**older_than=*")  # the click only starts the navigation: read the page it reaches
    lead.wait_for_load_state()
    second = listed()
    assert len(first) == RUNS_SHOWN and sorted(first + second) == sorted(made)
    assert lead.get_by_role("link", name="Older runs").count() == 0
    lead.goto(console.base + "/ui/?requester=U0PAGED&tool=send_email")
    assert "No run you may see matches." in lead.locator("main").inner_text()


def test_without_oidc_settings_the_console_answers_404(console: Rig) -> None:
    plain = console.world.start(SIGNOFF_POLICY="")  # no SIGNOFF_OIDC_*, and no step_up rule to need them
    import httpx

    for path in ("/ui/", "/ui/approvals", "/ui/login"):
        assert httpx.get(f"http://127.0.0.1:{plain.port}{path}").status_code == 404
