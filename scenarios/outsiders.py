"""People and programs outside a run, against a running `signoff serve` (gunicorn): senders that
trickle a body, a body Python cannot read, a click from another workspace, and a member of the
workspace who is not in the private channel a run was started in.

A real `/signoff help` is answered throughout, and nothing is executed or shown that should not be.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any
from urllib.parse import parse_qs, urlencode

from scenarios.drive import APPROVER, REQUESTER, approval_message, has_ended, pending_approval, started_run
from scenarios.hostile import Probe
from scenarios.outcome import Outcome, observed
from scenarios.serve import click_body, home_opened_body
from scenarios.world import World, wait_until
from signoff.bot.slack.blocks import APPROVE_ACTION

NOTE = {"tool": "send_note", "args": {"to": "hr@example.com", "text": "Salary review for Grace: +12%"}}
SECRET_GOAL = "Tell HR about Grace's salary review"
PRIVATE = "C0PRIVATE"
OUTSIDER = "U0ONCALL1"
"""In #runs with everyone else, not in #private: may see and decide nothing of a run started there."""
SLOW_SENDERS = 40
"""More than gunicorn's 32 threads: before body deadlines, these alone silenced the bot."""


def run_outsiders(kind: str = "sqlite") -> Outcome:
    outcome = Outcome(f"hostile/outsiders/{kind}", "hostile", runs=1)
    with observed(outcome, lambda: World(kind, [NOTE, {"final": "HR was told."}])) as world:
        serve = world.start()
        probe = Probe(world, serve, outcome)
        run_id = started_run(serve.command(SECRET_GOAL, REQUESTER, channel=PRIVATE).text)
        approval = wait_until(lambda: pending_approval(world, run_id), 20, what="the note's approval")
        card = wait_until(lambda: approval_message(world, approval.approval_id), 10, what="the approval card")
        _slow_senders(probe)
        _unreadable_bodies(probe)
        _foreign_click(probe, card)
        _outsider(probe, run_id, card)
        outcome.expect(world.db.store.get_approval(approval.approval_id).status == "pending",
                       "the approval changed under outsiders' requests")
        serve.click(card, APPROVE_ACTION, APPROVER)  # a member of #private
        wait_until(lambda: len(world.effect_lines()) == 1, 20, what="the note sent once a member approved")
        wait_until(lambda: has_ended(world, run_id, frozenset({"done"})), 20, what="the run to end once its note was sent")
    return outcome


def _slow_senders(probe: Probe) -> None:
    """Many connections declare a body and send one byte; a signed `/signoff help` is still answered."""
    outcome, serve = probe.outcome, probe.serve
    outcome.hostile += 1
    socks = [_slow_sender(serve.port) for _ in range(SLOW_SENDERS)]
    time.sleep(0.2)
    started = time.monotonic()
    reply = serve.command("help", REQUESTER)
    elapsed = time.monotonic() - started
    outcome.expect(reply.status == 200 and "Signoff commands" in reply.text and elapsed < 2,
                   f"/signoff help under {SLOW_SENDERS} slow senders: {reply.status} after {elapsed:.1f}s")
    statuses = _answers(socks)
    outcome.expect(set(statuses) <= {408, 503}, f"slow senders must be answered 408 or 503: {sorted(statuses)}")
    outcome.notes.append(f"{SLOW_SENDERS} slow senders: {statuses.count(408)} answered 408 at the deadline, "
                         f"{statuses.count(503)} 503 at once; /signoff help took {elapsed:.2f}s")


def _unreadable_bodies(probe: Probe) -> None:
    serve, huge = probe.serve, "7" * 5000  # over Python's 4300-digit limit for int()
    bad_request = lambda r: r.status == 400  # noqa: E731
    probe.send("5000-digit integer in a JSON body",
               lambda: serve.post('{"type": "event_callback", "event_id": ' + huge + "}", "application/json"),
               bad_request, "a body Python cannot read as JSON is a 400, not a server error")
    payload = '{"type": "block_actions", "actions": [{"action_id": "signoff.approve", "value": ' + huge + "}]}"
    probe.send("5000-digit integer in a click payload", lambda: serve.post(urlencode({"payload": payload})),
               bad_request, "a payload Python cannot read as JSON is a 400, not a server error")


def _foreign_click(probe: Probe, card: dict[str, Any]) -> None:
    payload = json.loads(_form_payload(click_body(card, APPROVE_ACTION, APPROVER)))
    payload["team"], payload["user"]["team_id"] = {"id": "T0EVIL", "domain": "elsewhere"}, "T0EVIL"
    probe.send("click from another workspace", lambda: probe.serve.post(urlencode({"payload": json.dumps(payload)})),
               lambda r: r.status == 200, "a request from another team is acknowledged and dropped")


def _outsider(probe: Probe, run_id: str, card: dict[str, Any]) -> None:
    """Someone outside #private asks after the run, opens App Home and clicks Approve."""
    world, serve = probe.world, probe.serve
    hidden = f"There is no run `{run_id}` you can see."
    probe.send("status of a private run", lambda: serve.command(f"status {run_id}", OUTSIDER),
               lambda r: hidden in r.text and SECRET_GOAL not in r.text, "a stranger is told no such run")
    probe.send("list with a private run", lambda: serve.command("list", OUTSIDER),
               lambda r: run_id not in r.text and "send_note" not in r.text, "a stranger's list leaves it out")
    serve.post(home_opened_body(OUTSIDER), "application/json")
    home = wait_until(lambda: world.slack.views.get(OUTSIDER), 10, what="the outsider's App Home")
    probe.outcome.hostile += 1
    probe.outcome.expect(run_id not in json.dumps(home) and "Grace" not in json.dumps(home),
                         "a stranger's App Home shows the private run")
    probe.send("approve by a stranger to the channel", lambda: serve.click(card, APPROVE_ACTION, OUTSIDER),
               lambda r: r.status == 200, "a click by someone outside the run's channel is refused")
    probe.told("approve by a stranger to the channel", OUTSIDER, "not a member of the channel")


def _slow_sender(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=15)
    sock.sendall(b"POST /slack/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                 b"Content-Length: 500000\r\n\r\nx")
    return sock


def _answers(socks: list[socket.socket]) -> list[int]:
    statuses = [0] * len(socks)

    def read(i: int) -> None:
        try:
            head = socks[i].recv(64)
            statuses[i] = int(head.split()[1]) if head.startswith(b"HTTP/") else 0
        except OSError:
            statuses[i] = 0
        finally:
            socks[i].close()

    threads = [threading.Thread(target=read, args=(i,)) for i in range(len(socks))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    return statuses


def _form_payload(body: str) -> str:
    return parse_qs(body)["payload"][0]



