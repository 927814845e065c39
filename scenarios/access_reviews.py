"""Reviews of standing access across replicas whose clocks disagree, on one PostgreSQL.

Three `signoff serve` processes (one on time, one 90 s fast, one 90 s slow) review every minute.
Each period's review must be posted exactly once, and only for a period that has begun by the
database's clock (the fast replica must not post the next minute's early); a Revoke pressed on
the slow replica must refuse the key's very next request on the fast one.
"""

from __future__ import annotations

import http.client
import time
from typing import Any

from sqlalchemy import func, select

from scenarios.drive import APPROVER
from scenarios.outcome import Outcome, observed
from scenarios.serve import Serve, click_body
from scenarios.world import World, wait_until
from signoff.bot.slack.access_review_cards import REVIEW_KEEP_ACTION, REVIEW_REVOKE_ACTION
from signoff.bot.wiring import api_keys
from signoff.runtime.adapters.tables import access_reviews
from signoff.runtime.api_keys import ApiKey, new_callback_secret, new_secret, secret_hash

CHANNEL = "C0RUNS"
SCRIPT = [{"final": "Nothing to do."}]
PERIODS = 2


def run_reviews_once_across_skewed_replicas() -> Outcome:
    outcome = Outcome("access/review-once/3x-skewed/postgres", "access", faults=2, races=PERIODS, hostile=2)
    env = {"SIGNOFF_APPROVAL_CHANNEL": CHANNEL, "SIGNOFF_REVIEW_SCHEDULE": "* * * * *"}
    with observed(outcome, lambda: World("postgres", SCRIPT, env=env)) as world:
        secret = new_secret()
        api_keys(world.db.store).create_key(
            ApiKey(name="ci-bot", channel=CHANNEL, tools=("*",), requester=None, created_at=world.db.store.now()),
            secret_hash(secret), new_callback_secret())
        on_time = world.start()
        ahead, behind = world.start(clock_offset=90), world.start(clock_offset=-90)
        for replica in (on_time, ahead, behind):
            outcome.expect(api_status(replica, secret) == 404, "the key was refused before any revoke")

        first = wait_until(lambda: reviews(world)[:1] or None, 30, what="the first review")[0]
        wait_until(lambda: len(periods(world)) >= PERIODS, 75, interval=0.5, what=f"{PERIODS} review periods")
        time.sleep(3)  # every replica has ticked a few times more in the latest period
        posted, opened = reviews(world), periods(world)
        outcome.expect(len(posted) == len(opened), f"{len(posted)} reviews posted for {len(opened)} periods")
        outcome.expect(len({m["ts"] for m in posted}) == len(posted), "a review was posted twice")
        db_now = world.db.store.now()
        early = [p for p in opened if p > db_now]
        outcome.expect(not early, f"reviews opened for periods not yet begun by the database's clock: {early}")

        if db_now.second > 40:  # the click must land in the same period as the review it answers
            time.sleep(62 - db_now.second)
            wait_until(lambda: len(reviews(world)) > len(posted), 10, what="the next review")
        latest = reviews(world)[-1]
        behind.post(click_body(latest, REVIEW_REVOKE_ACTION, APPROVER))
        wait_until(lambda: told(world), 10, what="the answer to Revoke")  # the listener acts after its ack
        outcome.expect(api_status(ahead, secret) == 401, "the revoked key still worked on another replica")
        behind.post(click_body(latest, REVIEW_REVOKE_ACTION, APPROVER))  # a replay: nothing twice
        wait_until(lambda: len(told(world)) > 1, 10, what="the answer to the replayed Revoke")
        if first["ts"] != latest["ts"]:  # a superseded review's Keep
            behind.post(click_body(first, REVIEW_KEEP_ACTION, APPROVER))
            wait_until(lambda: len(told(world)) > 2, 10, what="the answer to a superseded review's Keep")
        told_now = told(world)
        outcome.expect(told_now[:1] == ["Revoked: every request with this key is refused from now on."],
                       f"the revoke was answered {told_now[:1]}")
        outcome.expect(told_now[1].startswith("Already revoked by <@U0LEAD>"),
                       f"the replayed revoke was answered {told_now[1:2]}")
        outcome.expect(first["ts"] == latest["ts"] or told_now[2].startswith("Not done: a newer review"),
                       f"a superseded review's Keep was answered {told_now[2:3]}")
        outcome.notes.append(f"{len(opened)} minute-long periods, 3 replicas (on time, 90 s fast, 90 s slow): "
                             f"{len(posted)} reviews posted")
    return outcome


def reviews(world: World) -> list[dict[str, Any]]:
    return [m for m in world.slack.messages_in(CHANNEL)
            if m["text"].startswith("Review of standing access") and not m.get("thread_ts")]


def told(world: World) -> list[str]:
    return [c["text"] for c in world.slack.calls_to("chat.postEphemeral")]


def periods(world: World) -> list[Any]:
    with world.db.engine.connect() as conn:
        found = list(conn.execute(select(access_reviews.c.period).order_by(access_reviews.c.period)).scalars())
        assert conn.execute(select(func.count()).select_from(access_reviews)).scalar_one() == len(set(found))
    return found


def api_status(replica: Serve, secret: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", replica.port, timeout=10)
    try:
        conn.request("GET", "/v1/approvals?key=none", headers={"Authorization": f"Bearer {secret}"})
        return conn.getresponse().status
    finally:
        conn.close()
