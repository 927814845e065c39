"""Hostile input against a running `signoff serve` over HTTP: forged, expired and replayed requests,
clicks that do not fit (unknown, another run's, changed, not allowed, self-approval), oversized and
malformed bodies, mrkdwn and mention injection, and secrets in arguments.

Each input is refused or neutralised with a clear reason, and nothing is executed or lost.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from scenarios.drive import APPROVER, REQUESTER, Driver, approval_message, started_run
from scenarios.outcome import Outcome, observed
from scenarios.serve import Reply, Serve, command_body, home_opened_body
from scenarios.world import ROOT, Policy, World, wait_until
from signoff.bot.slack.blocks import APPROVE_ACTION, DENY_ACTION

SECRETS = ("hunter2-Pa55w0rd-7Q", "tok-9f8e7d6c5b4a-SECRET", "PIN-204863")
MARKERS = ("<!channel", "<!here", "<!everyone", "<@U0EVIL", "<https://evil")
"""Raw mrkdwn that would notify a channel, mention someone or make a link, if it reached Slack unescaped."""
GOAL = "Reset Grace's password <!channel> <@U0EVIL> see <https://evil.example|click here> <!here>"
SCRIPT = [
    {"tool": "lookup", "args": {"query": "hostile"}},
    {"tool": "reset_password", "args": {"user": "grace", "password": SECRETS[0], "api_token": SECRETS[1],
                                        "pin": SECRETS[2]}},
    {"tool": "send_note", "args": {"to": "<!channel> <@U0EVIL>", "text": "<https://evil.example|click> <!here>"}},
    {"final": "<!here> all done, <@U0EVIL>: <https://evil.example|details>"},
]
STRANGER = "U0STRANGER"
OTHER_APPROVER = "U0ONCALL1"


class Probe:
    """Sends one hostile input at a time and records what it should and did come to."""

    def __init__(self, world: World, serve: Serve, outcome: Outcome) -> None:
        self.world, self.serve, self.outcome = world, serve, outcome
        self.replies: list[Reply] = []

    def send(self, label: str, send: Callable[[], Reply], expect: Callable[[Reply], bool], why: str) -> Reply:
        self.outcome.hostile += 1
        effects, runs = len(self.world.effect_lines()), len(self.world.db.store.list_runs(limit=1000))
        reply = send()
        self.replies.append(reply)
        time.sleep(0.3)  # clicks are decided after the ack; give the listener its moment
        self.outcome.expect(expect(reply), f"{label}: {why} (got {reply.status} {reply.body[:160]!r})")
        self.outcome.expect(len(self.world.effect_lines()) == effects, f"{label}: something was executed")
        if not label.startswith("replayed"):
            self.outcome.expect(len(self.world.db.store.list_runs(limit=1000)) == runs, f"{label}: a run was started")
        return reply

    def told(self, label: str, user: str, phrase: str) -> None:
        """The person was told privately why nothing happened."""
        def said() -> bool:
            return any(phrase.lower() in (c.get("text") or "").lower() for c in self.world.slack.calls_to(
                "chat.postEphemeral") if c.get("user") == user)
        try:
            wait_until(said, 5, what="the ephemeral reason")
        except TimeoutError:
            self.outcome.expectations.append(f"{label}: {user} was not told {phrase!r}")


def run_hostile(kind: str = "sqlite") -> Outcome:
    outcome = Outcome(f"hostile/slack-edge/{kind}", "hostile", runs=2)
    policy = Policy(approvers=frozenset({APPROVER, "S0ONCALL"}))
    with observed(outcome, lambda: World(kind, SCRIPT, policy=policy)) as world:
        serve = world.start()
        probe = Probe(world, serve, outcome)
        _signatures(probe)
        run_a, run_b = _start_runs(probe)
        a1 = wait_until(lambda: _posted(world, run_a), 20, what="run A's approval")
        b1 = wait_until(lambda: _posted(world, run_b), 20, what="run B's approval")
        _clicks(probe, a1, b1)
        _bodies(probe, a1)
        serve.post(home_opened_body(APPROVER), "application/json")
        wait_until(lambda: world.slack.views.get(APPROVER), 10, what="App Home")
        outcome.expect(world.db.store.get_approval(a1.approval_id).status == "pending",
                       "run A's approval changed under hostile clicks")
        _replayed_click(probe, a1)
        driver = Driver(world, pick=lambda: serve)
        outcome.expect(driver.settle([run_a, run_b], 40), "the runs did not finish")
        _escaped(probe)
        _secrets_kept(probe, [run_a, run_b])
    return outcome


def _posted(world: World, run_id: str) -> Any:
    found = world.db.store.list_approvals(run_id=run_id, status="pending", limit=1)
    return found[0] if found and approval_message(world, found[0].approval_id) else None


def _signatures(probe: Probe) -> None:
    body = command_body("forged run", REQUESTER)
    unauthorised = lambda r: r.status == 401  # noqa: E731
    probe.send("forged signature", lambda: probe.serve.post(body, signature="v0=" + "0" * 64), unauthorised,
               "a forged signature must be refused with 401")
    probe.send("wrong signing secret", lambda: probe.serve.post(body, secret="not-the-secret-0123456789"),
               unauthorised, "a request signed with another secret must be refused with 401")
    probe.send("expired timestamp", lambda: probe.serve.post(body, timestamp=int(time.time()) - 6 * 60),
               unauthorised, "a request older than 5 minutes must be refused with 401")
    probe.send("future timestamp", lambda: probe.serve.post(body, timestamp=int(time.time()) + 6 * 60),
               unauthorised, "a request from 6 minutes in the future must be refused with 401")
    probe.send("no signature", lambda: probe.serve.post(body, signature=""), unauthorised,
               "an unsigned request must be refused with 401")
    garbage = urlencode({"payload": "{not json"})
    probe.send("forged request whose body is not JSON", lambda: probe.serve.post(garbage, signature="v0=" + "0" * 64),
               lambda r: 400 <= r.status < 500, "an unsigned malformed body must be refused, not crash the request")


def _start_runs(probe: Probe) -> tuple[str, str]:
    body, stamp = command_body(GOAL, REQUESTER), int(time.time())
    first = probe.serve.post(body, timestamp=stamp)
    run_a = started_run(first.text)
    probe.send("replayed slash command", lambda: probe.serve.post(body, timestamp=stamp),
               lambda r: r.status == 200 and "already" in r.text.lower() and run_a in r.text,
               "an identical replay must not start a second run, and must say so")
    probe.outcome.expect(len(probe.world.db.store.list_runs(limit=10)) == 1, "the replay started a second run")
    probe.send("oversized goal", lambda: probe.serve.command("x" * 5000, REQUESTER),
               lambda r: r.status == 200 and "limit" in r.text, "a 5000-character goal must be refused with a reason")
    run_b = started_run(probe.serve.command("Reset Alan's password", REQUESTER).text)
    return run_a, run_b


def _clicks(probe: Probe, a1: Any, b1: Any) -> None:
    world, serve = probe.world, probe.serve
    message = approval_message(world, a1.approval_id)
    flipped = a1.digest[:-1] + ("0" if a1.digest[-1] != "0" else "1")
    cases = [
        ("self-approval", REQUESTER, None, "someone else"),
        ("approver not allowed", STRANGER, None, "not done"),
        ("changed digest", APPROVER, f"{a1.approval_id}:{flipped}", "no longer matches"),
        ("another run's approval", APPROVER, f"{a1.approval_id}:{b1.digest}", "no longer matches"),
        ("unknown approval", APPROVER, f"apr_doesnotexist0000:{a1.digest}", "no longer exists"),
    ]
    for label, user, value, phrase in cases:
        probe.send(label, lambda u=user, v=value: serve.click(message, APPROVE_ACTION, u, value=v),
                   lambda r: r.status == 200, "a click that does not fit is acknowledged and refused")
        probe.told(label, user, phrase)
    modals = world.slack.attempts("views.open")
    probe.send("deny form for someone not allowed", lambda: serve.click(message, DENY_ACTION, STRANGER),
               lambda r: r.status == 200 and world.slack.attempts("views.open") == modals,
               "no Deny form opens for someone who may not decide")
    probe.told("deny form for someone not allowed", STRANGER, "not")
    probe.send("deny submitted by someone not allowed",
               lambda: serve.deny(a1.approval_id, a1.digest, STRANGER, "nope"), lambda r: r.status == 200,
               "a forged deny submission is acknowledged and refused")
    probe.send("deny submitted with another run's digest",
               lambda: serve.deny(a1.approval_id, b1.digest, APPROVER, "nope"), lambda r: r.status == 200,
               "a deny submission that does not match is refused")
    for approval in (a1, b1):
        probe.outcome.expect(world.db.store.get_approval(approval.approval_id).status == "pending",
                             f"{approval.approval_id} changed under refused clicks")


def _bodies(probe: Probe, a1: Any) -> None:
    serve = probe.serve
    not_5xx = lambda r: r.status < 500  # noqa: E731
    huge = urlencode({"payload": json.dumps({"type": "block_actions", "pad": "x" * 1_100_000})})
    probe.send("oversized body", lambda: serve.post(huge), lambda r: r.status == 413,
               "a body over 1 MB must be refused with 413")
    value = f"{a1.approval_id}:{a1.digest}"
    click = {"type": "block_actions", "user": {"id": APPROVER}, "actions": [
        {"action_id": APPROVE_ACTION, "value": value}], "trigger_id": "1.2.3"}
    malformed = {
        "payload that is not JSON": urlencode({"payload": "{not json"}),
        "payload that is a list": urlencode({"payload": "[1, 2]"}),
        "click without actions": urlencode({"payload": json.dumps({**click, "actions": []})}),
        "click with actions of the wrong type": urlencode({"payload": json.dumps({**click, "actions": "approve"})}),
        "click with a numeric value": urlencode({"payload": json.dumps(
            {**click, "actions": [{"action_id": APPROVE_ACTION, "value": 12345}]})}),
        "click without a user": urlencode({"payload": json.dumps({k: v for k, v in click.items() if k != "user"})}),
        "click with a user that is not a string": urlencode({"payload": json.dumps({**click, "user": {"id": 7}})}),
        "slash command without a user": urlencode({"command": "/signoff", "text": "do it", "channel_id": "C0RUNS"}),
        "form body with no fields": "",
        "event with garbage": json.dumps({"type": "event_callback", "event": {"type": "app_home_opened",
                                                                               "user": ["U0LEAD"]}}),
    }
    for label, body in malformed.items():
        content_type = "application/json" if label.startswith("event") else "application/x-www-form-urlencoded"
        probe.send(label, lambda b=body, c=content_type: serve.post(b, c), not_5xx,
                   "a malformed body is answered without a server error")
    probe.outcome.expect(probe.world.db.store.get_approval(a1.approval_id).status == "pending",
                         "a malformed body decided an approval")


def _replayed_click(probe: Probe, a1: Any) -> None:
    """A valid approval, then the very same signed request again: one decision, one execution."""
    from scenarios.serve import click_body

    message = approval_message(probe.world, a1.approval_id)
    body, stamp = click_body(message, APPROVE_ACTION, OTHER_APPROVER), int(time.time())
    probe.serve.post(body, timestamp=stamp)
    wait_until(lambda: any(line["key"] == a1.key for line in probe.world.effect_lines()), 20,
               what="the approved reset running")
    probe.send("replayed approval click", lambda: probe.serve.post(body, timestamp=stamp), lambda r: r.status == 200,
               "a replayed click is acknowledged and changes nothing")
    probe.told("replayed approval click", OTHER_APPROVER, "already approved")


def _escaped(probe: Probe) -> None:
    """No planted mention, broadcast or link reached Slack unescaped, in any call or reply."""
    with probe.world.slack._lock:
        sent = [(c.method, json.dumps(c.body, ensure_ascii=False)) for c in probe.world.slack.calls]
    sent += [("reply", json.dumps(r.json() if r.body.startswith("{") else r.body, ensure_ascii=False))
             for r in probe.replies]
    for method, text in sent:
        for marker in MARKERS:
            if marker in text:
                probe.outcome.expectations.append(f"{method} carried unescaped {marker!r}")
    probe.outcome.hostile += 3  # goal, arguments and tool output each carried the markers


def _secrets_kept(probe: Probe, run_ids: list[str]) -> None:
    """The password, token and PIN never appear in Slack, in the serve logs, or in `signoff runs export`."""
    probe.outcome.hostile += 1
    with probe.world.slack._lock:
        slack_text = json.dumps([c.body for c in probe.world.slack.calls], ensure_ascii=False)
    places = {"Slack": slack_text, "the serve logs": probe.world.logs()}
    for run_id in run_ids:
        places[f"`signoff runs export {run_id}`"] = _export(probe.world, run_id)
    for place, text in places.items():
        leaked = [s for s in SECRETS if s in text]
        if leaked:
            probe.outcome.expectations.append(f"{place} shows the secret(s) {leaked}")
    exported = places[f"`signoff runs export {run_ids[0]}`"]
    probe.outcome.expect('"record": "approval"' in exported or '"record":"approval"' in exported,
                         "the export is missing its approvals, so the secret check proves little")


def _export(world: World, run_id: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SIGNOFF_", "SLACK_"))}
    env.update(SIGNOFF_DATABASE_URL=world.db.url("export"), PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "signoff.bot.cli", "runs", "export", run_id], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    return done.stdout + done.stderr
