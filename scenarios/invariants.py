"""The eight invariants, checked after every scenario over the real database, FakeSlack's messages and
the tools' own effects log. Each check returns human-readable violations; none means it held.

I1 effect_approved   no side effect ran without an approval by an allowed person, given before it expired
                     and used within the dispatch window, unless the world's approval policy allows the
                     call by the very rule its execution names, or a grant covered it ("Approve + allow
                     similar" by an allowed person, in force when it started); none ran that the policy
                     denies
I2 effect_once       no non-idempotent side effect ran twice (an idempotent one took effect at most once)
I3 approval_settled  every approval ended in exactly one state; consumed ones have exactly one ledger row
I4 run_settled       every run is terminal, waiting for a human, or needs_reconciliation; none stuck
I5 audit_complete    the audit log accounts for every step, decision and execution
I6 slack_matches_db  no live Approve/Deny buttons on a decided, expired or cancelled approval; pending
                     approvals and runs waiting for a person show their buttons
I7 replay_identical  every run, re-driven through the loop with its recorded replies, results and
                     decisions (`runtime.replay`), does what it was recorded doing
I8 quorum_met        no call ran with fewer distinct allowed approvers than its rule requires, nor on an
                     approval someone denied

What a call required is the world's own reading of its policy (`world.Policy`), not what the serve
processes stored with the approval.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, assert_never

from sqlalchemy import select

from scenarios.serve import buttons
from scenarios.toolset import TOOLS
from scenarios.world import Policy
from signoff.bot.slack.blocks import APPROVE_ACTION, DENY_ACTION, RUN_ACTIONS
from signoff.bot.slack.payloads import run_value
from signoff.runtime.adapters.tables import (
    approval_votes,
    approvals,
    events,
    grants,
    run_history,
    runs,
    tool_executions,
)
from signoff.runtime.approval_policy import Allow, Ask, Deny, Requirement, Verdict
from signoff.runtime.caller_runs import tools_of
from signoff.runtime.errors import IncompatibleState
from signoff.runtime.judging import Caller
from signoff.runtime.replay import replay
from signoff.runtime.runner_config import RunnerConfig
from signoff.runtime.state import STOPPED, TERMINAL, call_digest
from signoff.tools.base import CheckedArgs, Tool

INVARIANTS = {
    "I1": "effect_approved",
    "I2": "effect_once",
    "I3": "approval_settled",
    "I4": "run_settled",
    "I5": "audit_complete",
    "I6": "slack_matches_db",
    "I7": "replay_identical",
    "I8": "quorum_met",
}
WAITING = STOPPED
_TOOLS = {tool.name: tool for tool in TOOLS}
"""The scenario toolset: what evidence built by hand is read against."""


@dataclass
class Evidence:
    """Everything the invariants look at, read once after the scenario settled."""

    runs: dict[str, dict[str, Any]]
    approvals: dict[str, dict[str, Any]]
    ledger: dict[str, dict[str, Any]]
    events: dict[str, list[dict[str, Any]]]
    steps: dict[str, set[int]]
    """Run id -> the steps at which the model decided something (from the history)."""
    effects: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    histories: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Run id -> its history entries, in order."""
    votes: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Approval id -> its `approval_votes` rows, in the order people decided."""
    grants: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Grant id -> its `grants` row."""
    tools: dict[str, Tool] = field(default_factory=lambda: dict(_TOOLS))
    """The tools the world's serve processes ran, by name (their contracts: gates, arguments)."""
    now: datetime = field(default_factory=lambda: datetime.now(UTC))
    grace: timedelta = timedelta(seconds=5)
    """How long a pending approval may sit past its expiry before the sweep must have taken it."""


def gather(world: Any) -> Evidence:
    """Read the database, FakeSlack and the effects log of a world."""
    with world.db.engine.connect() as conn:
        run_rows = {r.run_id: dict(r._mapping) for r in conn.execute(select(runs))}
        approval_rows = {r.approval_id: dict(r._mapping) for r in conn.execute(select(approvals))}
        ledger = {r.key: dict(r._mapping) for r in conn.execute(select(tool_executions))}
        timeline: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in conn.execute(select(events).order_by(events.c.run_id, events.c.seq)):
            timeline[r.run_id].append({"seq": r.seq, "type": r.type, **json.loads(r.payload), "at": r.at})
        steps: dict[str, set[int]] = defaultdict(set)
        histories: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in conn.execute(select(run_history.c.run_id, run_history.c.entry)
                              .order_by(run_history.c.run_id, run_history.c.seq)):
            entry = json.loads(r.entry)
            histories[r.run_id].append(entry)
            if entry.get("role") == "assistant":
                steps[r.run_id].add(int(entry.get("step", -1)))
        grant_rows = {r.grant_id: dict(r._mapping) for r in conn.execute(select(grants))}
        votes: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in conn.execute(select(approval_votes).order_by(approval_votes.c.approval_id, approval_votes.c.seq)):
            votes[r.approval_id].append(dict(r._mapping))
    with world.slack._lock:
        messages = [json.loads(json.dumps(m)) for m in world.slack.messages.values()]
    return Evidence(run_rows, approval_rows, ledger, dict(timeline), dict(steps), world.effect_lines(), messages,
                    histories=dict(histories), votes=dict(votes), grants=grant_rows,
                    tools={tool.name: tool for tool in world.tools})


def _origin_channel(run: dict[str, Any]) -> str:
    """The channel the run was started in ("" if none), as the policy's rules see it."""
    try:
        origin = json.loads(run.get("origin") or "{}")
    except json.JSONDecodeError:
        origin = {}
    return str(origin.get("channel") or "") if isinstance(origin, dict) else ""


def _channel(run: dict[str, Any]) -> str:
    """Where the run's approvals are posted, whose members `*` admits."""
    return _origin_channel(run) or "C0RUNS"


def check(evidence: Evidence, policy: Policy) -> dict[str, list[str]]:
    """Every invariant's violations (empty lists when all hold)."""
    return {
        "I1": effect_approved(evidence, policy),
        "I2": effect_once(evidence),
        "I3": approval_settled(evidence),
        "I4": run_settled(evidence),
        "I5": audit_complete(evidence),
        "I6": slack_matches_db(evidence),
        "I7": replay_identical(evidence, policy),
        "I8": quorum_met(evidence, policy),
    }


DISPATCH_WINDOW = RunnerConfig().dispatch_window
"""How long after an approval its call may start; the serve processes keep the default."""


def _by_key(evidence: Evidence) -> dict[str, dict[str, Any]]:
    """Each key's approval in force: its latest (an expired call requested again is asked anew
    under the same key), a superseded one only when none replaced it."""
    ranked = sorted(evidence.approvals.values(),
                    key=lambda a: (a["status"] != "superseded", str(a.get("requested_at") or "")))
    return {a["key"]: a for a in ranked}


def effect_approved(evidence: Evidence, policy: Policy) -> list[str]:
    found = []
    by_key, unasked, granted = _by_key(evidence), _allowed_by(evidence), _granted(evidence)
    for line in evidence.effects:
        key, tool = str(line.get("key")), line.get("tool")
        approval = by_key.get(key)
        if key in granted:
            problem = _not_granted(evidence, policy, line, *granted[key])
            if problem:
                found.append(f"{tool} ({key}): {problem}")
            continue
        if key in unasked or approval is None:
            problem = _not_allowed_unasked(evidence, policy, line, unasked.get(key))
            if problem:
                found.append(f"{tool} ({key}): {problem}")
            continue
        run = evidence.runs.get(approval["run_id"], {})
        problems = []
        if approval["digest"] != line.get("digest"):
            problems.append("it ran with other arguments than were approved")
        if approval["status"] != "consumed":
            problems.append(f"its approval is {approval['status']}, not consumed")
        verdict = _verdict(policy, approval["tool"], _approved_args(approval), run)
        if isinstance(verdict, Deny):
            problems.append(f"the policy {_says(verdict)}")
        requirement = policy.requirement(verdict)
        refusal = policy.refusal(approval["decided_by"], run.get("requester", ""), _channel(run), requirement)
        if _broke_glass(approval, requirement) and approval["decided_by"] == run.get("requester"):
            refusal = None  # break-glass lets the requester approve their own call, alone
        if refusal:
            problems.append(f"not approved by an allowed person ({refusal})")
        decided, expires = approval["decided_at"], approval["expires_at"]
        if decided is None or decided >= expires:
            problems.append(f"decided at {decided} but the approval expired at {expires}")
        # A yes given in time holds after the request's expiry, within the dispatch window of it.
        consumed = approval["consumed_at"]
        if consumed is None or decided is None or consumed - decided > DISPATCH_WINDOW:
            problems.append(f"executed (consumed {consumed}) more than {DISPATCH_WINDOW} after it was approved "
                            f"({decided})")
        if problems:
            found.append(f"{tool} ({key}): " + "; ".join(problems))
    return found


def _allowed_by(evidence: Evidence) -> dict[str, str]:
    """Key -> the policy rule its first `execution_started` says let it run without an approval."""
    found: dict[str, str] = {}
    for timeline in evidence.events.values():
        for e in timeline:
            if e["type"] == "execution_started" and e.get("allowed_by") and e.get("key") not in found:
                found[e["key"]] = str(e["allowed_by"])
    return found


def _granted(evidence: Evidence) -> dict[str, tuple[str, datetime]]:
    """Key -> the grant its first `execution_started` ran it under, and when it started."""
    found: dict[str, tuple[str, datetime]] = {}
    for timeline in evidence.events.values():
        for e in timeline:
            if e["type"] == "execution_started" and e.get("granted_by") and e.get("key") not in found:
                found[e["key"]] = (str(e["granted_by"]), e["at"])
    return found


def _not_granted(evidence: Evidence, policy: Policy, line: dict[str, Any], grant_id: str,
                 started: datetime) -> str | None:
    """Why an effect run under grant `grant_id` should not have run, or None: the grant exists, was
    made by an allowed person approving a call of its rule, was in force when the call started, and
    covers this exact call (tool, rule, the arguments it holds fixed, its run or requester)."""
    key, tool = str(line.get("key")), str(line.get("tool"))
    grant = evidence.grants.get(grant_id)
    if grant is None:
        return f"it ran under grant {grant_id}, which does not exist"
    run_id, _, step = key.rpartition(":")
    run, args = evidence.runs.get(run_id), _proposed_args(evidence, run_id, step, tool)
    if run is None or args is None:
        return f"it ran under grant {grant_id}, but its run does not record the call"
    problems = []
    if call_digest(tool, args, key) != line.get("digest"):
        problems.append("it ran with other arguments than its run proposed")
    if grant["revoked_at"] is not None and grant["revoked_at"] <= started:
        problems.append(f"the grant was revoked at {grant['revoked_at']}, before the call started ({started})")
    if grant["expires_at"] <= started:
        problems.append(f"the grant expired at {grant['expires_at']}, before the call started ({started})")
    same = json.loads(grant["same"])
    if grant["tool"] != tool or any(args.get(name) != value for name, value in same.items()):
        problems.append(f"the grant is for {grant['tool']} with {same}, not this call")
    owner = run_id if grant["scope"] == "run" else run.get("requester")
    if (grant["run_id"] if grant["scope"] == "run" else grant["requester"]) != owner:
        problems.append(f"the grant's scope ({grant['scope']}) does not reach this run")
    verdict = _verdict(policy, tool, args, run)
    if not (isinstance(verdict, Ask) and verdict.rule == grant["rule"] and verdict.requirement.grant is not None):
        problems.append(f"the policy offers no grant for it: it {_says(verdict)}")
    else:
        refusal = policy.refusal(grant["created_by"], run.get("requester", ""), _channel(run),
                                 policy.requirement(verdict))
        if refusal:
            problems.append(f"the grant was made by someone not allowed to approve it ({refusal})")
    made_on = evidence.approvals.get(grant["approval_id"])
    if made_on is None or made_on["status"] not in ("approved", "consumed"):
        problems.append(f"the approval the grant was made on is {made_on and made_on['status']}")
    return "; ".join(problems) or None


def _not_allowed_unasked(evidence: Evidence, policy: Policy, line: dict[str, Any], rule: str | None) -> str | None:
    """Why an effect that used no approval should not have run, or None: its execution says `rule`
    allowed it, and the policy allows the call its run proposed by that very rule."""
    key, tool = str(line.get("key")), str(line.get("tool"))
    if rule is None:
        return "it ran but no approval exists for that key, and no policy rule let it run without one"
    run_id, _, step = key.rpartition(":")
    run, proposed = evidence.runs.get(run_id), _proposed(evidence, run_id, step, tool)
    if run is None or proposed is None:
        return f"it ran without an approval, allowed by rule {rule!r}, but its run does not record the call"
    if call_digest(tool, proposed.args, key) != line.get("digest"):
        return f"it ran without an approval, allowed by rule {rule!r}, with other arguments than its run proposed"
    verdict = _verdict(policy, tool, proposed.sent, run)  # as the rules saw it
    if isinstance(verdict, Allow) and verdict.rule == rule:
        return None
    return f"it ran without an approval, allowed by rule {rule!r}, but the policy {_says(verdict)}"


def _proposed(evidence: Evidence, run_id: str, step: str, tool: str) -> CheckedArgs | None:
    """The arguments the run's model proposed at `step`, as the tool validated them: what runs, and
    what the policy's rules see (`CheckedArgs.sent`, without the defaults the tool filled in)."""
    known = evidence.tools.get(tool)
    for entry in evidence.histories.get(run_id, []):
        if entry.get("role") == "assistant" and str(entry.get("step")) == step and entry.get("tool") == tool:
            try:
                return known.checked(entry.get("args")) if known is not None else None
            except ValueError:
                return None
    return None


def _proposed_args(evidence: Evidence, run_id: str, step: str, tool: str) -> dict[str, Any] | None:
    """The arguments the run's model proposed at `step`, as the tool validated them to run."""
    proposed = _proposed(evidence, run_id, step, tool)
    return proposed.args if proposed is not None else None


def _approved_args(approval: dict[str, Any]) -> dict[str, Any]:
    args = approval["args"]
    return dict(json.loads(args) if isinstance(args, str) else args)


def _verdict(policy: Policy, tool: str, args: dict[str, Any], run: dict[str, Any]) -> Verdict:
    """What the world's policy says of a call of `run`'s, with the requester and channel the loop sees."""
    return policy.verdict(tool, args, str(run.get("requester", "")), _origin_channel(run))


def _says(verdict: Verdict) -> str:
    match verdict:
        case Allow(rule=rule):
            return f"allows it by rule {rule!r}" if rule else "allows it by no rule"
        case Deny(rule=rule, reason=reason):
            return f"denies it (rule {rule!r}: {reason})"
        case Ask(rule=rule, requirement=requirement):
            whose = f"rule {rule!r}" if rule else "the defaults"
            return f"asks {requirement.quorum} of {', '.join(requirement.approvers) or 'the approvers'} ({whose})"
        case _:
            assert_never(verdict)


def effect_once(evidence: Evidence) -> list[str]:
    once = {tool.name for tool in evidence.tools.values() if tool.side_effect and not tool.idempotent}
    calls = Counter(line["key"] for line in evidence.effects if line.get("tool") in once)
    applied = Counter(line["key"] for line in evidence.effects if line.get("effect"))
    found = [f"non-idempotent call {key} ran {n} times" for key, n in sorted(calls.items()) if n > 1]
    found += [f"call {key} took effect {n} times" for key, n in sorted(applied.items())
              if n > 1 and key not in calls]
    return found


def approval_settled(evidence: Evidence) -> list[str]:
    found = []
    recorded = Counter(e["approval_id"] for timeline in evidence.events.values() for e in timeline
                       if e["type"] == "approval_recorded")
    for approval_id, n in recorded.items():
        if n > 1:
            found.append(f"{approval_id} was decided {n} times")
    approved = {e["approval_id"] for timeline in evidence.events.values() for e in timeline
                if e["type"] == "approval_recorded" and e.get("approved")}
    in_force = _by_key(evidence)
    for a in evidence.approvals.values():
        label, status = f"{a['approval_id']} ({a['key']})", a["status"]
        run = evidence.runs.get(a["run_id"], {})
        if a["approval_id"] in approved and status == "cancelled" and run.get("status") != "cancelled":
            found.append(f"{label} was approved, never executed, and dropped while its run went on to "
                         f"{run.get('status')}: a lost decision")
        # Only the key's approval in force answers for its ledger row: an earlier one that expired
        # and was requested again never let the call run.
        in_ledger = a["key"] in evidence.ledger and in_force.get(a["key"]) is a
        if status == "consumed" and not in_ledger:
            found.append(f"{label} is consumed but the ledger has no row for its key")
        elif status in ("denied", "expired", "cancelled", "pending") and in_ledger:
            found.append(f"{label} is {status} but its call is in the ledger")
        elif status == "approved":
            found.append(f"{label} was approved but never executed, expired or cancelled (run {run.get('status')})")
        elif status == "pending":
            if run.get("status") != "awaiting_approval" and not (a["key"] in _batch_waiting(run)
                                                                 and run.get("status") in WAITING):
                found.append(f"{label} is still pending but its run is {run.get('status')}")
            elif run.get("pending_key") != a["key"] and a["key"] not in _batch_waiting(run):
                found.append(f"{label} is still pending but its run waits on {run.get('pending_key')}")
            elif a["expires_at"] + evidence.grace < evidence.now:
                found.append(f"{label} is pending {evidence.now - a['expires_at']} past its expiry")
        elif status not in ("consumed", "denied", "expired", "cancelled", "superseded"):  # superseded: edited
            found.append(f"{label} has unknown status {status!r}")
    return found


def _batch_waiting(run: dict[str, Any]) -> set[str]:
    """The keys of the calls of a turn of several that the run still waits on a person for."""
    try:
        state = json.loads(run.get("state") or "{}")
    except (TypeError, ValueError):
        return set()
    batch = state.get("batch") or {}
    return {c["key"] for c in batch.get("calls", []) if c.get("outcome") is None and not c.get("runs")
            and c.get("pending")}


def run_settled(evidence: Evidence) -> list[str]:
    found = []
    pending = {a["key"] for a in evidence.approvals.values() if a["status"] == "pending"}
    for run in evidence.runs.values():
        status, label = run["status"], run["run_id"]
        if status in TERMINAL or status in WAITING:
            pass
        elif status == "awaiting_approval":
            if run["pending_key"] not in pending:
                found.append(f"{label} is awaiting approval of {run['pending_key']} but no approval is pending")
        else:
            live = run["lease_expires_at"] is not None and run["lease_expires_at"] > evidence.now
            found.append(f"{label} is stuck {status} ({'leased' if live else 'no live lease'})")
        if run["command"] is not None:
            found.append(f"{label} ({status}) still holds an unapplied command {run['command']}")
    return found


def audit_complete(evidence: Evidence) -> list[str]:
    found = []
    for run_id, run in evidence.runs.items():
        timeline = evidence.events.get(run_id, [])
        kinds = Counter(e["type"] for e in timeline)
        decided = {e.get("step") for e in timeline if e["type"] == "decision"}
        for step in sorted(evidence.steps.get(run_id, set()) - decided):
            found.append(f"{run_id}: step {step} has no decision event")
        started = [e for e in timeline if e["type"] == "execution_started"]
        for event in started:
            later = [e for e in timeline if e["seq"] > event["seq"] and e.get("key") == event["key"]
                     and e["type"] in ("tool_executed", "tool_failed", "needs_reconciliation")]
            if not later:
                found.append(f"{run_id}: execution {event['key']} started but no outcome or reconciliation "
                             f"was recorded (run {run['status']})")
        if run["status"] in TERMINAL and not kinds[run["status"] if run["status"] != "done" else "finished"]:
            found.append(f"{run_id} ended {run['status']} without an event saying so")
    started_keys = {e["key"] for timeline in evidence.events.values() for e in timeline
                    if e["type"] == "execution_started"}
    for line in evidence.effects:
        if line.get("key") not in started_keys:
            found.append(f"{line.get('tool')} ran with key {line.get('key')} but the audit log never says it started")
    for a in evidence.approvals.values():
        timeline = evidence.events.get(a["run_id"], [])
        mine = [e for e in timeline if e.get("approval_id") == a["approval_id"]]
        recorded = [e for e in mine if e["type"] == "approval_recorded"]
        if a["decided_by"] and a["status"] in ("approved", "denied", "consumed") and len(recorded) != 1:
            found.append(f"{a['approval_id']} was decided by {a['decided_by']} but has {len(recorded)} "
                         "approval_recorded events")
        if a["status"] == "expired" and not any(e["type"] == "approval_expired" for e in mine) \
                and not any(e["type"] in ("expired", "failed") for e in timeline):
            found.append(f"{a['approval_id']} expired without an approval_expired event or a run stop")
        if a["status"] == "cancelled" and not any(e["type"] in ("command_recorded", "cancelled", "finished",
                                                                "expired") for e in timeline):
            found.append(f"{a['approval_id']} was cancelled but nothing in its run's log says why")
    return found


def slack_matches_db(evidence: Evidence) -> list[str]:
    found = []
    shown: set[str] = set()
    for message in evidence.messages:
        for action_id, value in buttons(message):
            if action_id not in (APPROVE_ACTION, DENY_ACTION):
                continue
            approval_id = value.rpartition(":")[0]
            shown.add(approval_id)
            approval = evidence.approvals.get(approval_id)
            if approval is None:
                found.append(f"message {message['ts']} has live buttons for an approval that does not exist")
            elif approval["status"] != "pending":
                found.append(f"message {message['ts']} still shows {action_id} for {approval_id}, which is "
                             f"{approval['status']}")
            break
    for a in evidence.approvals.values():
        if a["status"] == "pending" and a["approval_id"] not in shown:
            found.append(f"{a['approval_id']} is pending but no Slack message shows its buttons")
    offered = {value for message in evidence.messages for action_id, value in buttons(message)
               if action_id in RUN_ACTIONS}
    for run in evidence.runs.values():
        # Buttons for an older state of the run would be refused as out of date: they do not count.
        if run["status"] in WAITING and run_value(run["run_id"], run["version"]) not in offered:
            found.append(f"{run['run_id']} is {run['status']} but no Slack message offers its buttons "
                         f"for version {run['version']}")
    return found


def replay_identical(evidence: Evidence, policy: Policy) -> list[str]:
    """Each readable run replayed through today's loop, the scenario tools' contracts and the world's
    approval policy the run recorded (the current one or an earlier), as it applied to the run's
    requester and channel."""
    found = []
    for run_id, run in evidence.runs.items():
        if run.get("state") is None:
            continue  # evidence made by hand, without a stored state
        try:
            state = {**json.loads(run["state"]), "history": evidence.histories.get(run_id, [])}
            tools = tools_of(str(run.get("model") or ""), json.loads(run.get("origin") or "{}"), evidence.tools)
            recorded = evidence.events.get(run_id, [])
            digest = next((str(e["policy"]) for e in recorded if e.get("policy")), None)
            result = replay(state, recorded, tools, approval_policy=policy.recorded_as(digest),
                            caller=Caller(str(run.get("requester", "")), _origin_channel(run)))
        except (ValueError, IncompatibleState) as exc:  # a run the scenario damaged on purpose
            if "damaged" not in str(run.get("goal", "")):
                found.append(f"{run_id} could not be replayed: {exc}")
            continue
        if result.divergence is not None:
            where = result.divergence
            found.append(f"{run_id} diverged at step {where.step}: expected {where.expected}, got {where.got}")
    return found


def _broke_glass(approval: dict[str, Any], requirement: Requirement) -> bool:
    """The approval was approved alone by breaking the glass, as the world's policy offers for its
    call, with a reason as long as the rule asks."""
    offer = requirement.break_glass
    glass = json.loads(approval["glass"]) if approval.get("glass") else None
    return bool(offer is not None and glass is not None
                and len(str(glass.get("reason") or "").strip()) >= offer.reason_min_chars
                and glass.get("by") == approval.get("decided_by"))


def quorum_met(evidence: Evidence, policy: Policy) -> list[str]:
    """Each approval a call ran on: enough distinct allowed people approved it (the greater of what the
    policy requires and what the approval row says), each counted once; and none someone denied was used."""
    found = []
    for a in evidence.approvals.values():
        nays = [v["user_id"] for v in evidence.votes.get(a["approval_id"], []) if not v["approved"]]
        if a["status"] == "consumed" and nays:
            found.append(f"{a['approval_id']} ({a['key']}) was used though {', '.join(nays)} denied it")
    by_key, unasked = _by_key(evidence), _allowed_by(evidence)
    for key in sorted({str(line.get("key")) for line in evidence.effects} & set(by_key) - set(unasked)):
        approval = by_key[key]
        run = evidence.runs.get(approval["run_id"], {})
        requirement = policy.requirement(_verdict(policy, approval["tool"], _approved_args(approval), run))
        needed = 1 if _broke_glass(approval, requirement) else max(requirement.quorum, int(approval.get("quorum") or 1))
        yeas = Counter(v["user_id"] for v in evidence.votes.get(approval["approval_id"], []) if v["approved"])
        problems = [f"{user}'s approval is counted {n} times" for user, n in yeas.items() if n > 1]
        allowed = []
        for user in yeas:
            refusal = policy.refusal(user, run.get("requester", ""), _channel(run), requirement)
            if _broke_glass(approval, requirement) and user == run.get("requester"):
                refusal = None
            if refusal:
                problems.append(f"{user}'s approval counted though they may not give it ({refusal})")
            else:
                allowed.append(user)
        if len(allowed) < needed:
            problems.append(f"{len(allowed)} allowed {'person' if len(allowed) == 1 else 'people'} approved "
                            f"({', '.join(allowed) or 'nobody'}) where {needed} are required (the policy asks "
                            f"{requirement.quorum}, the approval {approval.get('quorum') or 1})")
        if problems:
            found.append(f"{approval['tool']} ({key}) ran: " + "; ".join(problems))
    return found
