"""The approval policy across two replicas on one database: a note to a customer needs two distinct
people of on-call and the lead, a small credit runs unasked and a large one never.

Every run credits 5 (allowed), tries to credit 900 (denied) and asks to send a note. Its approval is
raced as people race one: two approvers at once on the two replicas, one person clicking twice (on
both replicas, and one signed request replayed), the requester (on call, so named by the rule) and
a stranger clicking beside one real approval, and an approval racing a deny. The note runs once
after two distinct people, never after one, and never once someone allowed said no.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select

from scenarios.drive import APPROVER, REQUESTER, has_ended, posted_approval, started_run
from scenarios.outcome import Outcome, observed
from scenarios.replicas import at_once
from scenarios.serve import Serve, click_body
from scenarios.world import Policy, World, wait_until
from signoff.bot.slack.blocks import APPROVE_ACTION
from signoff.runtime.adapters.tables import approval_votes
from signoff.runtime.state import call_digest

POLICY = """\
rules:
  - name: customer-notes
    tool: send_note
    when: args.to.endsWith("@example.com")
    approvers: [S0ONCALL, U0LEAD]
    quorum: 2
  - name: small-credits
    tool: apply_credit
    when: args.amount <= 10
    decision: allow
  - name: large-credits
    tool: apply_credit
    when: args.amount > 500
    decision: deny
    reason: credits above 500 go through finance
"""
SMALL_CREDIT = {"account": "A-2002", "amount": 5}
LARGE_CREDIT = {"account": "A-2002", "amount": 900}
SCRIPT: list[dict[str, Any]] = [
    {"tool": "apply_credit", "args": SMALL_CREDIT},
    {"tool": "apply_credit", "args": LARGE_CREDIT},
    {"tool": "send_note", "args": {"to": "grace@example.com", "text": "Your credit of 5 is on its way."}},
    {"final": "Grace was credited and told."},
]
ONCALL = ("U0ONCALL1", "U0ONCALL2")
STRANGER = "U0STRANGER"
RACES = ("two_at_once", "same_person_twice", "replayed_request", "requester_and_stranger", "approve_vs_deny")
COUNTED = "your approval is counted"
ALREADY_COUNTED = "you already decided this one"
SELF_REFUSED = "you started this run"
NOT_NAMED = "not one of the approvers this call's policy rule names"


@dataclass
class Pair:
    """The two replicas, and what the runs driven through them came to."""

    world: World
    serves: list[Serve]
    outcome: Outcome
    rng: random.Random
    results: Counter[str] = field(default_factory=Counter)

    def answers(self, user: str) -> list[str]:
        """What `user` was told privately so far (every click but a deciding one is answered so), lower case."""
        return [str(c.get("text") or "").lower() for c in self.world.slack.calls_to("chat.postEphemeral")
                if c.get("user") == user]

    def votes(self, approval_id: str) -> list[tuple[str, bool]]:
        """Who decided the approval and how, in order; read from the votes table itself."""
        with self.world.db.engine.connect() as conn:
            return [(r.user_id, bool(r.approved)) for r in conn.execute(
                select(approval_votes.c.user_id, approval_votes.c.approved)
                .where(approval_votes.c.approval_id == approval_id).order_by(approval_votes.c.seq))]

    def approvers(self, approval_id: str) -> list[str]:
        """The people whose approval is recorded, in order."""
        return [user for user, approved in self.votes(approval_id) if approved]

    def notes_sent(self, run_id: str) -> int:
        return sum(1 for line in self.world.effect_lines()
                   if line.get("tool") == "send_note" and str(line.get("key", "")).startswith(f"{run_id}:"))


def run_quorum(kind: str = "sqlite", runs: int = 20, seed: int = 5) -> Outcome:
    outcome = Outcome(f"policy/quorum-races/2x/{kind}", "policy", runs=runs)
    policy = Policy(approvers=frozenset({APPROVER}), file=POLICY)
    with observed(outcome, lambda: World(kind, SCRIPT, policy=policy)) as world:
        first, second = at_once(world.start, world.start)
        pair = Pair(world, [first, second], outcome, random.Random(seed))
        # One run at a time: each person's private answers then belong to the run being raced.
        for index in range(runs):
            race = RACES[index % len(RACES)]
            try:
                drive(pair, index, race)
            except TimeoutError as exc:
                outcome.expectations.append(f"run {index} ({race}): {exc}")
            outcome.races += 1
        outcome.notes += [f"{k}: {v}" for k, v in sorted(pair.results.items())]
    return outcome


def drive(pair: Pair, index: int, race: str) -> None:
    """One run through `race`, then its note, its credits and its ending checked against the policy."""
    world, outcome = pair.world, pair.outcome
    a, b = pair.rng.sample(pair.serves, 2)  # which replica starts the run and which one each clicker uses
    # On-call asking themselves: a person the rule names, whose own click must still not count.
    requester = ONCALL[1] if race == "requester_and_stranger" else REQUESTER
    run_id = started_run(a.command(f"run {index}: credit Grace 5 and tell her", requester).text)
    approval = wait_until(lambda: posted_approval(world, run_id), 20, interval=0.05, what=f"{run_id}'s approval")
    card = world.slack.message(approval.message["channel"], approval.message["ts"])

    def approve(user: str) -> str:
        return click_body(card, APPROVE_ACTION, user)

    label = f"{run_id} ({race})"
    approvers: tuple[str, ...] = ()
    match race:
        case "two_at_once":
            approvers = (APPROVER, ONCALL[0])
            at_once(lambda: a.post(approve(APPROVER)), lambda: b.post(approve(ONCALL[0])),
                    delays=(pair.rng.uniform(0, 0.05),))
        case "same_person_twice":  # two clicks of one person, one on each replica
            approvers = (APPROVER, ONCALL[1])
            told = len(pair.answers(APPROVER))
            at_once(lambda: a.post(approve(APPROVER)), lambda: b.post(approve(APPROVER)))
            _counted_once(pair, label, APPROVER, told, clicks=2)
            _waits_for_more(pair, label, run_id, approval.approval_id, [APPROVER])
            b.post(approve(ONCALL[1]))
        case "replayed_request":  # the very same signed request, on both replicas and again
            approvers = (ONCALL[0], APPROVER)
            body, stamp, told = approve(ONCALL[0]), int(time.time()), len(pair.answers(ONCALL[0]))
            copies = [a, b, pair.rng.choice((a, b))]
            at_once(*[lambda s=s: s.post(body, timestamp=stamp) for s in copies])
            outcome.hostile += len(copies) - 1
            _counted_once(pair, label, ONCALL[0], told, clicks=len(copies))
            _waits_for_more(pair, label, run_id, approval.approval_id, [ONCALL[0]])
            a.post(approve(APPROVER))
        case "requester_and_stranger":  # one real approval, then two that must not make it two
            approvers = (APPROVER, ONCALL[0])
            told = len(pair.answers(APPROVER))
            a.post(approve(APPROVER))
            _counted_once(pair, label, APPROVER, told, clicks=1)
            before = {user: len(pair.answers(user)) for user in (requester, STRANGER)}
            at_once(lambda: a.post(approve(requester)), lambda: b.post(approve(STRANGER)),
                    delays=(0.0, pair.rng.uniform(0, 0.05)))
            outcome.hostile += 2
            for user, phrase in ((requester, SELF_REFUSED), (STRANGER, NOT_NAMED)):
                said = wait_until(lambda u=user: pair.answers(u)[before[u]:], 10, what=f"{user}'s refusal")
                outcome.expect(any(phrase in text for text in said), f"{label}: {user} was told {said!r}, not "
                                                                     f"{phrase!r}")
            _waits_for_more(pair, label, run_id, approval.approval_id, [APPROVER])
            b.post(approve(ONCALL[0]))
        case "approve_vs_deny":  # either order: the approval counts one of two, the deny closes it
            at_once(lambda: a.post(approve(APPROVER)),
                    lambda: b.deny(approval.approval_id, approval.digest, ONCALL[0], "not to customers"),
                    delays=(pair.rng.uniform(0, 0.05), pair.rng.uniform(0, 0.05)))  # either may come first
    wait_until(lambda: has_ended(world, run_id), 30, interval=0.05, what=f"{run_id} to end")
    _settled(pair, race, run_id, approval.approval_id, approvers)


def _counted_once(pair: Pair, label: str, user: str, told: int, clicks: int) -> None:
    """Each of `user`'s `clicks` was answered: one counted, every other one told it already was."""
    said = wait_until(lambda: len(pair.answers(user)) >= told + clicks and pair.answers(user)[told:], 10,
                      what=f"an answer to each of {user}'s {clicks} clicks")
    counted = sum(COUNTED in text for text in said)
    again = sum(ALREADY_COUNTED in text for text in said)
    pair.outcome.expect(counted == 1 and again == clicks - 1,
                        f"{label}: {user}'s {clicks} clicks were answered {said!r}: one should be counted, "
                        f"{clicks - 1} told it already was")


def _waits_for_more(pair: Pair, label: str, run_id: str, approval_id: str, approvers: list[str]) -> None:
    """With one person's approval the note has not run: the approval and its run wait for a second."""
    world = pair.world
    approval = world.db.store.get_approval(approval_id)
    run = world.db.store.get_run(run_id, history=False)
    pair.outcome.expect(approval is not None and approval.status == "pending",
                        f"{label}: after one person the approval is {approval.status if approval else None}")
    pair.outcome.expect(run is not None and run.status == "awaiting_approval",
                        f"{label}: after one person the run is {run.status if run else None}")
    pair.outcome.expect(pair.approvers(approval_id) == approvers,
                        f"{label}: after one person the votes are {pair.approvers(approval_id)}, not {approvers}")
    pair.outcome.expect(pair.notes_sent(run_id) == 0, f"{label}: the note ran after one person's approval")


def _settled(pair: Pair, race: str, run_id: str, approval_id: str, approvers: tuple[str, ...]) -> None:
    """The run is done; its note ran once after `approvers` (never, with none); its small credit ran
    with no approval and its large one not at all."""
    world, expect, label = pair.world, pair.outcome.expect, f"{run_id} ({race})"
    run = world.db.store.get_run(run_id, history=False)
    approval = world.db.store.get_approval(approval_id)
    status = approval.status if approval else None
    order = " then ".join("approve" if approved else "deny" for _, approved in pair.votes(approval_id))
    pair.results[f"{race}: {order}: approval {status}, run {run.status if run else None}"] += 1
    expect(run is not None and run.status == "done", f"{label}: the run ended {run.status if run else None}, not done")
    notes = pair.notes_sent(run_id)
    if approvers:
        expect(status == "consumed" and notes == 1, f"{label}: the note ran {notes} times, its approval {status}")
        voted = pair.approvers(approval_id)
        expect(sorted(voted) == sorted(approvers), f"{label}: approved by {voted}, not {list(approvers)}")
    else:
        expect(status == "denied" and notes == 0, f"{label}: the note ran {notes} times after a deny "
                                                  f"(approval {status})")
    credits = [line for line in world.effect_lines()
               if line.get("tool") == "apply_credit" and str(line.get("key", "")).startswith(f"{run_id}:")]
    expect([line["digest"] for line in credits] == [call_digest("apply_credit", SMALL_CREDIT, line["key"])
                                                    for line in credits] and len(credits) == 1,
           f"{label}: credits ran {[line['key'] for line in credits]}: the small one once, the large one never")
    asked = [a.tool for a in world.db.store.list_approvals(run_id=run_id, limit=10)]
    expect(asked == ["send_note"], f"{label}: approvals were asked for {asked}: only the note needs one")
    denied = _denied_by(world, run_id)
    expect(denied == ["large-credits"], f"{label}: the policy denied {denied}, not the large credit")


def _denied_by(world: World, run_id: str) -> list[Any]:
    """The rules that denied a call of the run, as its history tells the model."""
    run = world.db.store.get_run(run_id)
    history = run.state["history"] if run is not None else []
    return [entry.get("rule") for entry in history if entry.get("error_kind") == "denied_by_rule"]
