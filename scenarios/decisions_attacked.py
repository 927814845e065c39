"""The approval's own decisions attacked through a running `signoff serve`, over signed HTTP: secrets
pressed through Edit, an edit that would repeat a call that ran, a grant outliving the rule that made
it, a signed Approve all naming a call its card offered no Approve for, and one number written two ways.

Each attack is refused or neutralised, no side effect runs unasked or twice, and no secret is shown.
"""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import urlencode

from sqlalchemy import select

from scenarios import toolset
from scenarios.drive import APPROVER, Driver, approval_message, has_ended
from scenarios.leaks import forms, shown
from scenarios.outcome import Outcome, observed
from scenarios.serve import Reply, Serve, buttons, next_trigger
from scenarios.world import Policy, World, wait_until
from signoff.bot.slack.blocks import APPROVE_ACTION, APPROVE_ALL_ACTION, APPROVE_SIMILAR_ACTION, EDIT_ACTION
from signoff.bot.slack.edit_form import EDIT_INPUT
from signoff.runtime.adapters.tables import events
from signoff.runtime.state import TERMINAL, call_digest
from signoff.tools.base import Tool

OTHER_APPROVER = "U0ONCALL1"
"""A member of #runs beside U0LEAD: approves what U0LEAD edited, as anyone else would."""
TOOLSETS = "scenarios.toolset:TOOLS,scenarios.decisions_attacked:TOOLS"


def deploy(args: dict[str, Any], key: str) -> dict[str, Any]:
    toolset.record("deploy", args, key)
    return {"deployed": True}


TOOLS = [Tool("deploy", deploy, side_effect=True, description="Deploy anything (free-form arguments; not idempotent).")]
"""A tool without declared arguments: its Edit form is one JSON box."""


def _world(kind: str, script: list[dict[str, Any]], policy: Policy | None = None) -> World:
    return World(kind, script, policy=policy or Policy(), env={"SIGNOFF_TOOLS": TOOLSETS},
                 tools=[*toolset.TOOLS, *TOOLS])


# -- what people do ----------------------------------------------------------------------------------


def _pending_card(world: World, run_id: str, *, besides: frozenset[str] = frozenset()) -> tuple[Any, dict[str, Any]]:
    """A pending approval of the run not in `besides`, and the card showing its Approve."""
    def found() -> tuple[Any, dict[str, Any]] | None:
        for approval in world.db.store.list_approvals(run_id=run_id, status="pending", limit=10):
            card = approval_message(world, approval.approval_id)
            if approval.approval_id not in besides and card is not None:
                return approval, card
        return None
    card: tuple[Any, dict[str, Any]] = wait_until(found, 20, what=f"{run_id}'s approval card")
    return card


def _value(card: dict[str, Any], action_id: str, approval: Any) -> str:
    return next(v for a, v in buttons(card) if a == action_id and v.startswith(approval.approval_id + ":"))


def _open_edit(world: World, serve: Serve, card: dict[str, Any], approval: Any) -> dict[str, Any]:
    """Press Edit for `approval` as U0LEAD; the form Slack was asked to open."""
    opened = len(world.slack.modals)
    serve.click(card, EDIT_ACTION, APPROVER, value=_value(card, EDIT_ACTION, approval))
    wait_until(lambda: len(world.slack.modals) > opened, 10, what="the Edit form")
    return world.slack.modal()


def _inputs(view: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {block["label"]["text"]: block for block in view["blocks"] if block["type"] == "input"}


def _submit_edit(serve: Serve, view: dict[str, Any], **typed: str) -> Reply:
    """Submit the Edit form as Slack would: each input as it was filled in, but for `typed`."""
    values = {block["block_id"]: {EDIT_INPUT: {"type": block["element"]["type"],
                                               "value": typed.get(label, block["element"].get("initial_value"))}}
              for label, block in _inputs(view).items()}
    payload = {"type": "view_submission", "team": {"id": "T0TEST"}, "user": {"id": APPROVER},
               "api_app_id": "A0SIGNOFF", "token": "legacy", "trigger_id": f"{next_trigger()}.4.trigger",
               "response_urls": [], "view": {**view, "state": {"values": values}}}
    return serve.post(urlencode({"payload": json.dumps(payload)}))


def _refusal(reply: Reply) -> str:
    """What the Edit form shows beside its inputs ("" if the edit was taken)."""
    data = reply.json() if reply.body.startswith("{") else {}
    return json.dumps(data.get("errors") or {}) if data.get("response_action") == "errors" else ""


def _ran(world: World, tool: str) -> list[dict[str, Any]]:
    return [line for line in world.effect_lines() if line.get("tool") == tool]


def _ran_as(line: dict[str, Any], args: dict[str, Any]) -> bool:
    """The effect ran with exactly `args` (the log keeps only the call's digest)."""
    return bool(line.get("digest") == call_digest(str(line.get("tool")), args, str(line.get("key"))))


def _told(world: World, user: str, phrase: str) -> bool:
    try:
        wait_until(lambda: any(phrase in str(c.get("text") or "") for c in world.slack.calls_to("chat.postEphemeral")
                               if c.get("user") == user), 10, what=f"{user} told {phrase!r}")
        return True
    except TimeoutError:
        return False


def _done(world: World, run_id: str) -> bool:
    try:
        wait_until(lambda: has_ended(world, run_id, TERMINAL), 20, what=f"{run_id} to end")
    except TimeoutError:
        return False
    run = world.db.store.get_run(run_id, history=False)
    return run is not None and run.status == "done"


# -- 1. secrets pressed through Edit -----------------------------------------------------------------

OLD_KEY, NEW_KEY = "sk-live-Zq9secret7TOKENold", "sk-live-Wb4other2TOKENnew"
PASSWORD, TOKEN = "hunter2-Pa55w0rd-Edit", "tok-7c6b5a4f3e2d-EDIT"
OLD_PIN, NEW_PIN = "PIN-55102938-old", "PIN-77441266-new"
SECRETS = (OLD_KEY, NEW_KEY, PASSWORD, TOKEN, OLD_PIN, NEW_PIN)
SECRETS_SCRIPT: list[dict[str, Any]] = [
    {"tool": "deploy", "args": {"op": "deploy", "api_key": OLD_KEY}},
    {"tool": "reset_password", "args": {"user": "grace", "password": PASSWORD, "api_token": TOKEN, "pin": OLD_PIN}},
    {"final": "Deployed and reset."},
]


def run_edit_secrets(kind: str = "sqlite") -> Outcome:
    """A free-form call's `api_key` and a typed call's declared secret, each retyped through Edit
    beside another argument: each runs once as typed; no form of any secret is posted, audited or logged."""
    outcome = Outcome(f"hostile/edit-secrets/{kind}", "hostile", runs=1, hostile=2)
    with observed(outcome, lambda: _world(kind, SECRETS_SCRIPT)) as world:
        serve = world.start()
        run_id = Driver(world, pick=lambda: serve).start("deploy, then reset Grace's password")
        replies = [_edit_and_approve(world, serve, run_id, "Arguments (JSON)", lambda box: json.dumps(
            {**json.loads(box["element"]["initial_value"]), "op": "rollback", "api_key": NEW_KEY}))]
        wait_until(lambda: _ran(world, "deploy"), 20, what="the edited deploy")
        replies.append(_edit_and_approve(world, serve, run_id, "pin", lambda box: NEW_PIN, user="alan"))
        outcome.expect(_done(world, run_id), f"{run_id} did not end done")
        deploys, resets = _ran(world, "deploy"), _ran(world, "reset_password")
        outcome.expect(len(deploys) == 1 and _ran_as(deploys[0], {"op": "rollback", "api_key": NEW_KEY}),
                       f"the deploy ran {len(deploys)} times, not once with the retyped key")
        typed = {"user": "alan", "password": PASSWORD, "api_token": TOKEN, "pin": NEW_PIN}
        outcome.expect(len(resets) == 1 and _ran_as(resets[0], typed),
                       f"the reset ran {len(resets)} times, not once with the kept secrets and the retyped PIN")
        _expect_no_secret_shown(outcome, world, replies)
    return outcome


def _edit_and_approve(world: World, serve: Serve, run_id: str, secret_label: str, retyped: Any, **typed: str) -> Reply:
    """Open Edit on the run's pending call, retype its secret (and `typed`), then approve the edited call."""
    approval, card = _pending_card(world, run_id)
    view = _open_edit(world, serve, card, approval)
    reply = _submit_edit(serve, view, **typed, **{secret_label: retyped(_inputs(view)[secret_label])})
    fresh, fresh_card = _pending_card(world, run_id, besides=frozenset({approval.approval_id}))
    serve.click(fresh_card, APPROVE_ACTION, OTHER_APPROVER, value=_value(fresh_card, APPROVE_ACTION, fresh))
    return reply


def _expect_no_secret_shown(outcome: Outcome, world: World, replies: list[Reply]) -> None:
    """No form of any secret, old or new, in a Slack call (the Edit forms too), the form's answers,
    the events table or the serve log."""
    with world.slack._lock:
        posted = "\n".join(json.dumps(call.body, default=str) for call in world.slack.calls)
    with world.db.engine.connect() as conn:
        audited = "\n".join(json.dumps(list(row), default=str) for row in conn.execute(select(events)))
    places = {"Slack": posted + "\n".join(r.body for r in replies), "the events table": audited,
              "the serve log": world.logs()}
    outcome.expect(world.slack.attempts("views.open") >= 2, "no Edit form was opened, so the secret check proves little")
    for secret in SECRETS:
        for place, text in places.items():
            found = shown(text, forms(secret, secret))
            outcome.expect(not found, f"{place} shows the secret {secret[:6]}… as {found}")


# -- 2. an edit that would repeat a call that ran -------------------------------------------------------

ANA = {"to": "ana@example.com", "subject": "Refund", "body": "Your refund is on its way."}
BOB = {**ANA, "to": "bob@example.com"}
TWO_EMAILS: list[dict[str, Any]] = [
    {"calls": [{"tool": "send_email", "args": ANA, "call_id": "c-ana"},
               {"tool": "send_email", "args": BOB, "call_id": "c-bob"}]},
    {"final": "Both were told."},
]


def run_edit_repeats(kind: str = "sqlite") -> Outcome:
    """A turn of two emails: Bob's edited to Ana's while Ana's is pending, then once hers was sent;
    both edits are refused in the form, and each recipient gets exactly one email."""
    outcome = Outcome(f"hostile/edit-repeats/{kind}", "hostile", runs=1, hostile=2)
    with observed(outcome, lambda: _world(kind, TWO_EMAILS)) as world:
        serve = world.start()
        run_id = Driver(world, pick=lambda: serve).start("tell Ana and Bob")
        _card_posted(world, run_id)
        ana, bob = _pending_of(world, run_id)
        card = approval_message(world, ana.approval_id) or {}
        refused = _refusal(_submit_edit(serve, _open_edit(world, serve, card, bob), to=ANA["to"]))
        outcome.expect("already proposed in this turn" in refused,
                       f"editing Bob's email to Ana's, beside hers in the turn, was not refused: {refused!r}")
        serve.click(card, APPROVE_ACTION, APPROVER, value=_value(card, APPROVE_ACTION, ana))
        wait_until(lambda: _ran(world, "send_email"), 20, what="Ana's email")
        card = approval_message(world, bob.approval_id) or {}
        refused = _refusal(_submit_edit(serve, _open_edit(world, serve, card, bob), to=ANA["to"]))
        outcome.expect("would repeat" in refused and ana.key in refused,
                       f"editing Bob's email to the one Ana was sent was not refused by its key: {refused!r}")
        card = approval_message(world, bob.approval_id) or {}
        serve.click(card, APPROVE_ACTION, OTHER_APPROVER, value=_value(card, APPROVE_ACTION, bob))
        outcome.expect(_done(world, run_id), f"{run_id} did not end done")
        sent = _ran(world, "send_email")
        by_key = sorted(str(line["key"]) for line in sent)
        outcome.expect(by_key == sorted([ana.key, bob.key]), f"the emails ran under keys {by_key}, not once each")
        to_ana = [line for line in sent if _ran_as(line, ANA)]
        to_bob = [line for line in sent if _ran_as(line, BOB)]
        outcome.expect(len(to_ana) == 1 and len(to_bob) == 1,
                       f"Ana was sent {len(to_ana)} emails and Bob {len(to_bob)}, not one each")
    return outcome


def _pending_of(world: World, run_id: str) -> list[Any]:
    return sorted(world.db.store.list_approvals(run_id=run_id, status="pending", limit=10), key=lambda a: a.key)


def _card_posted(world: World, run_id: str) -> None:
    """Wait until the turn's two emails are asked about, on a card that was posted."""
    wait_until(lambda: len(_pending_of(world, run_id)) == 2 and all(a.message for a in _pending_of(world, run_id)),
               20, what="the two emails' card")


# -- 3. a grant outliving the rule that made it ------------------------------------------------------------

GRANT_BY_LEAD = """\
rules:
  - name: sends
    tool: send_email
    approvers: [U0LEAD]
    grant: {for: 30m, same: [to], scope: requester}
"""
CHANGED_RULES = {
    "U0LEAD may no longer approve this call": GRANT_BY_LEAD.replace("[U0LEAD]", "[U0OPS]"),
    "now holds body to the approved value": GRANT_BY_LEAD.replace("same: [to], scope: requester",
                                                                   "same: [to, body], scope: run"),
}
"""What `grant_not_applied` must say, by the rule `signoff serve` is restarted with."""
ONE_EMAIL: list[dict[str, Any]] = [{"tool": "send_email", "args": ANA}, {"final": "Ana was told."}]


def run_grant_outlives_rule(kind: str = "sqlite") -> Outcome:
    """U0LEAD presses Approve + allow similar, and the grant covers the requester's next run; serve
    restarts with the rule's approvers changed, then with the grant narrowed: each time the same
    call of the requester's is asked about, not run, and `grant_not_applied` says why.

    The invariants read every effect against the rule it ran under, the first one: nothing runs
    after the rule changed but what U0LEAD, its approver in both, approves by hand."""
    outcome = Outcome(f"policy/grant-outlives-rule/{kind}", "policy", runs=2 + len(CHANGED_RULES))
    policy = Policy(approvers=frozenset({APPROVER}), file=GRANT_BY_LEAD)
    with observed(outcome, lambda: _world(kind, ONE_EMAIL, policy)) as world:
        serve = world.start()
        driver = Driver(world, pick=lambda: serve)
        first = driver.start("tell Ana")
        approval, card = _pending_card(world, first)
        serve.click(card, APPROVE_SIMILAR_ACTION, APPROVER, value=_value(card, APPROVE_SIMILAR_ACTION, approval))
        covered = driver.start("tell Ana again")
        outcome.expect(_done(world, first) and _done(world, covered) and _sent_in(world, covered) == 1,
                       "the grant did not cover the requester's next run before the rule changed")
        for number, (why, rules) in enumerate(CHANGED_RULES.items()):
            serve.stop()
            path = world.dir / f"changed-{number}.yaml"
            path.write_text(rules, encoding="utf-8")
            serve = world.start(SIGNOFF_POLICY=str(path))
            later = Driver(world, pick=lambda s=serve: s).start("tell Ana once more")
            _pending_card(world, later)  # a card is posted: the call is asked about
            outcome.expect(_sent_in(world, later) == 0, f"{later} ran under the grant after the rule changed ({why})")
            said = [e for e in world.db.store.timeline(later) if e["type"] == "grant_not_applied"]
            outcome.expect(len(said) == 1 and why in str(said[0].get("reason")) and said[0].get("rule") == "sends",
                           f"{later}: grant_not_applied said {said}, not {why!r}")
        approval, card = _pending_card(world, later)
        serve.click(card, APPROVE_ACTION, APPROVER, value=_value(card, APPROVE_ACTION, approval))
        outcome.expect(_done(world, later) and _sent_in(world, later) == 1,
                       f"{later} did not run once after U0LEAD approved it by hand")
    return outcome


def _sent_in(world: World, run_id: str) -> int:
    return sum(1 for line in _ran(world, "send_email") if str(line.get("key")).startswith(f"{run_id}:"))


# -- 4. a signed Approve all naming a call its card offered no Approve for -------------------------------

LONG = {**BOB, "body": "word " * 2000}
"""Too long to show in full beside Approve on a card of two calls."""
SHORT_AND_LONG: list[dict[str, Any]] = [
    {"calls": [{"tool": "send_email", "args": ANA, "call_id": "c-short"},
               {"tool": "send_email", "args": LONG, "call_id": "c-long"}]},
    {"final": "Sent what was approved."},
]


def run_forged_approve_all(kind: str = "sqlite") -> Outcome:
    """A signed Approve all carrying both calls of a card that offered Approve for the short one
    only: the short one runs, the long one stays pending until denied, and the clicker is told why."""
    outcome = Outcome(f"hostile/forged-approve-all/{kind}", "hostile", runs=1, hostile=1)
    with observed(outcome, lambda: _world(kind, SHORT_AND_LONG)) as world:
        serve = world.start()
        run_id = Driver(world, pick=lambda: serve).start("tell Ana, and Bob at length")
        _card_posted(world, run_id)
        short, long = _pending_of(world, run_id)
        card = approval_message(world, short.approval_id) or {}
        outcome.expect(APPROVE_ALL_ACTION not in dict(buttons(card)), "the card offered Approve all")
        outcome.expect(approval_message(world, long.approval_id) is None, "the card offered Approve for the long call")
        forged = ",".join(f"{a.approval_id}:{a.digest}" for a in (short, long))
        serve.click(card, APPROVE_ALL_ACTION, APPROVER, value=forged)
        outcome.expect(_told(world, APPROVER, "too long to show in full"), "U0LEAD was not told why")
        wait_until(lambda: _ran(world, "send_email"), 20, what="the short email")
        time.sleep(0.5)  # room for a wrongly approved long email to start
        still = world.db.store.get_approval(long.approval_id)
        outcome.expect(still is not None and still.status == "pending",
                       f"the long email's approval is {still and still.status}, not pending")
        outcome.expect([line["key"] for line in _ran(world, "send_email")] == [short.key],
                       f"emails ran under {[line['key'] for line in _ran(world, 'send_email')]}, not {short.key} alone")
        serve.deny(long.approval_id, long.digest, APPROVER, "too long to read")
        outcome.expect(_done(world, run_id), f"{run_id} did not end done once the long email was denied")
        outcome.expect(len(_ran(world, "send_email")) == 1, "the denied long email ran")
    return outcome


# -- 5. one number written two ways ------------------------------------------------------------------------

ONE_TWO_WAYS: list[dict[str, Any]] = [
    {"calls": [{"tool": "deploy", "args": {"service": "api", "n": 1}, "call_id": "c-int"},
               {"tool": "deploy", "args": {"service": "api", "n": 1.0}, "call_id": "c-float"}]},
    {"final": "Deployed."},
]


def run_number_forms(kind: str = "sqlite") -> Outcome:
    """A turn proposing the same free-form call with `1` and `1.0`: asked once, run once."""
    outcome = Outcome(f"hostile/number-forms/{kind}", "hostile", runs=1, hostile=1)
    with observed(outcome, lambda: _world(kind, ONE_TWO_WAYS)) as world:
        serve = world.start()
        run_id = Driver(world, pick=lambda: serve).start("deploy api, once")
        approval, card = _pending_card(world, run_id)
        asked = world.db.store.list_approvals(run_id=run_id, limit=10)
        outcome.expect(len(asked) == 1, f"the turn asked {len(asked)} approvals, not one")
        serve.click(card, APPROVE_ACTION, APPROVER, value=_value(card, APPROVE_ACTION, approval))
        outcome.expect(_done(world, run_id), f"{run_id} did not end done")
        ran = _ran(world, "deploy")
        outcome.expect(len(ran) == 1, f"the deploy ran {len(ran)} times, not once")
    return outcome
