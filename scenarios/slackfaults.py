"""Slack's Web API failing while approvals are posted and updated: 500s, 429 with Retry-After, and a
post that times out on our side while Slack delivers it anyway. The approval must still exist,
be reachable (`/signoff list`, App Home, re-posted by recovery), and nothing may run unapproved.
"""

from __future__ import annotations

import time

from scenarios.drive import APPROVER, Driver, approval_message, pending_approval
from scenarios.outcome import Outcome, observed
from scenarios.serve import buttons, home_click_body, home_opened_body
from scenarios.world import World, wait_until
from signoff.bot.slack.blocks import APPROVE_ACTION
from tests.fakes.slack import FakeSlack

SCRIPT = [
    {"tool": "send_note", "args": {"to": "linus@example.com", "text": "Your ticket is closed."}},
    {"tool": "apply_credit", "args": {"account": "A-4004", "amount": 5}},
    {"final": "Linus was told and credited."},
]
OUTAGE = 1_000_000
"""Failures queued for "Slack is down": more than any scenario makes; `slack_is_back` clears them."""


def slack_is_back(slack: FakeSlack, method: str) -> None:
    with slack._lock:
        slack._faults.pop(method, None)


def failed_calls(slack: FakeSlack) -> int:
    with slack._lock:
        return sum(1 for c in slack.calls if c.status != 200)


def _updates_of(slack: FakeSlack, ts: str) -> int:
    with slack._lock:
        return sum(1 for c in slack.calls if c.method == "chat.update" and c.body.get("ts") == ts)




def run_post_outage(kind: str = "sqlite") -> Outcome:
    outcome = Outcome(f"slack/post-outage/{kind}", "slack", runs=3)
    with observed(outcome, lambda: World(kind, SCRIPT)) as world:
        serve = world.start()
        driver = Driver(world, pick=lambda: serve)
        world.slack.fail("chat.postMessage", OUTAGE, status=500)
        runs = [driver.start(f"outage run {i}: tell Linus and credit him") for i in range(2)]
        approvals = [wait_until(lambda r=r: pending_approval(world, r), 20, what="an approval while Slack is down")
                     for r in runs]
        slack_is_back(world.slack, "chat.postMessage")
        world.slack.fail("chat.postMessage", OUTAGE, status=429, retry_after=1)
        runs.append(driver.start("outage run 2: tell Linus and credit him"))
        approvals.append(wait_until(lambda: pending_approval(world, runs[2]), 20, what="an approval while rate limited"))
        outcome.expect(all(a.message is None for a in approvals), "an approval claims a Slack message during the outage")
        outcome.expect(not world.effect_lines(), "a side effect ran while its approval could not be posted")

        listed = serve.command("list", APPROVER)
        outcome.expect(all(r in listed.text for r in runs), "`/signoff list` does not show every waiting approval")
        serve.post(home_opened_body(APPROVER), "application/json")
        view = wait_until(lambda: world.slack.views.get(APPROVER), 10, what="App Home published")
        shown = {v.rpartition(":")[0] for a, v in buttons(view) if a == APPROVE_ACTION}
        outcome.expect(shown >= {a.approval_id for a in approvals}, "App Home does not offer every waiting approval")
        # Approve the first from App Home while Slack still cannot post: the decision must stand.
        home_value = next(v for a, v in buttons(view) if a == APPROVE_ACTION and v.startswith(approvals[0].approval_id))
        serve.post(home_click_body(view, APPROVE_ACTION, home_value, APPROVER))
        wait_until(lambda: world.effect_lines(), 20, what="the App Home approval executing")

        slack_is_back(world.slack, "chat.postMessage")
        reposted = wait_until(lambda: all(approval_message(world, a.approval_id) for a in approvals[1:]), 40,
                              what="recovery re-posting the approvals")
        outcome.expect(reposted, "recovery did not re-post the approvals")
        # The decision's message update fails twice, then is rate limited, then goes through.
        world.slack.fail("chat.update", 2, status=500)
        world.slack.fail("chat.update", 1, status=429, retry_after=1)
        settled = driver.settle(runs, 60)
        outcome.expect(settled, "the runs did not finish once Slack was back")
        outcome.faults = failed_calls(world.slack)
        done = [r for r in runs if (run := world.db.store.get_run(r, history=False)) and run.status == "done"]
        outcome.expect(len(done) == len(runs), f"only {len(done)} of {len(runs)} runs finished")
    return outcome


def run_update_outage(kind: str = "sqlite") -> Outcome:
    """Slack refuses `chat.update` for longer than the notifier retries, just as an approval is decided."""
    outcome = Outcome(f"slack/update-outage/{kind}", "slack", runs=1)
    with observed(outcome, lambda: World(kind, SCRIPT[1:])) as world:
        serve = world.start()
        driver = Driver(world, pick=lambda: serve)
        run_id = driver.start("credit Linus")
        approval = wait_until(lambda: pending_approval(world, run_id), 20, what="the approval")
        message = wait_until(lambda: approval_message(world, approval.approval_id), 20, what="the approval message")
        world.slack.fail("chat.update", OUTAGE, status=500)
        serve.click(message, APPROVE_ACTION, APPROVER)
        outcome.expect(driver.settle([run_id], 30), "the run did not finish")
        wait_until(lambda: _updates_of(world.slack, message["ts"]) >= 4, 20,
                   what="the notifier giving up on updating the approval message")
        slack_is_back(world.slack, "chat.update")
        time.sleep(4)  # a few sweeps: time for anything that re-syncs Slack to do so
        outcome.faults = failed_calls(world.slack)
    return outcome


def run_post_timeout(kind: str = "sqlite") -> Outcome:
    """Our client gives up on a `chat.postMessage` after 30 s, but Slack posts the approval anyway."""
    outcome = Outcome(f"slack/post-timeout/{kind}", "slack", runs=1)
    with observed(outcome, lambda: World(kind, SCRIPT[1:])) as world:
        serve = world.start()
        driver = Driver(world, pick=lambda: serve)
        world.slack.slow("chat.postMessage", 0.0)  # the run message goes through at once
        world.slack.slow("chat.postMessage", 31.0)  # the approval: delivered after the client timed out
        started = time.monotonic()
        run_id = driver.start("credit Linus, slowly")
        approval = wait_until(lambda: pending_approval(world, run_id), 20, what="the approval")
        outcome.expect(not world.effect_lines(), "a side effect ran before its approval was even posted")
        time.sleep(max(0.0, started + 33 - time.monotonic()))  # until the slow post has landed too
        outcome.expect(driver.settle([run_id], 30), "the run did not finish")
        outcome.faults = 1
        outcome.notes.append(f"approval messages for {approval.approval_id}: "
                             f"{sum(1 for m in world.slack.messages.values() if approval.approval_id in str(m))}")
    return outcome
