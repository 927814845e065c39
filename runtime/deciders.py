"""Who may decide an approval or ask something of a run: the runner's part that asks the aggregate.

The rule itself is `approval.decider_refusal`; this part knows what it needs and the aggregate
does not: the policy as it is now, and the edge's answer to "is this person one of these approvers"
(`may_approve`: Slack knows who is in a group or a channel).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta

from signoff.runtime.approval import (
    IsAmong,
    Unopenable,
    asked_of,
    decider_refusal,
    decision_refusal,
    has_voted,
    with_rule,
)
from signoff.runtime.approval_policy import Ask, Deny, Verdict
from signoff.runtime.caller_runs import run_tools
from signoff.runtime.judging import Caller, classify, defaulted_of
from signoff.runtime.people import SELF_APPROVAL, MayApprove, is_slack_user
from signoff.runtime.ports import Store
from signoff.runtime.records import ApprovalRecord, RunRecord
from signoff.runtime.runner_config import RunnerConfig
from signoff.runtime.step_up import step_up_of
from signoff.tools.base import Tool

SELF_REQUEST = "you started this run, so someone else has to decide this for it"
MaySee = Callable[[str, RunRecord], bool]
"""(user, run) -> whether the user may see the run (e.g. a member of its channel), beyond its
requester and the people who may decide it."""


@dataclass(frozen=True)
class PolicyNow:
    """What the policy as it is now says of an approval's call (`verdict` None: its tool is gone,
    and the worker refuses the call), read once and asked several things."""

    verdict: Verdict | None


class Deciders:
    """The runner's answers to "may this person decide this" (a part of `Runner`, which sets these)."""

    store: Store
    tools: dict[str, Tool]
    config: RunnerConfig
    may_approve: MayApprove
    may_see: MaySee

    def approval_refusal(self, user: str, run: RunRecord, approval: ApprovalRecord | None = None,
                         now: PolicyNow | None = None) -> str | None:
        """Why `user` may not decide `approval` (by the rule that asked for it, and by the rule as
        the policy words it now: `now`, when the caller has read it), or `run`'s requests (extend,
        retry, reconcile: by the policy's defaults), or None if they may."""
        # Asked once per set of approvers: the rule then and the rule now mostly name the same people.
        is_among: IsAmong = functools.cache(functools.partial(self.may_approve, user, run))
        if approval is None or approval.asked is None:  # asked before Signoff had policies: by the defaults
            defaults = self.config.policy.defaults
            approvers, allow_self_approval = defaults.approvers, defaults.allow_self_approval
        else:
            approvers, allow_self_approval = asked_of(approval)
        refusal = decider_refusal(user, run.requester, approvers, allow_self_approval, is_among,
                                  self_refusal=SELF_APPROVAL if approval is not None else SELF_REQUEST)
        if approval is None:
            return refusal
        refusal = with_rule(refusal, approval.rule)
        return refusal or self._policy_now_refuses(user, run, approval, is_among,
                                                   now or self.policy_now(run, approval))

    def _policy_now_refuses(self, user: str, run: RunRecord, approval: ApprovalRecord,
                            is_among: IsAmong, now: PolicyNow) -> str | None:
        """Why the policy as it is now does not let `user` decide `approval`, or None.

        The file may have changed since the call was asked about (or SIGNOFF_APPROVERS, with a
        restart): a decision must satisfy the rule then and the rule now, so someone taken off
        the approvers cannot decide what was asked of them before.
        """
        match now.verdict:
            case Deny(rule=rule):
                return f"the approval policy now refuses this call (policy rule {rule})"
            case Ask(rule=rule, requirement=asks):
                approvers = asks.approvers
                if (approval.asked or {}).get("escalated") and asks.escalate is not None:
                    approvers += asks.escalate.to  # escalated as the rule says: those added may decide
                return with_rule(decider_refusal(user, run.requester, approvers, asks.allow_self_approval, is_among),
                                 rule)
        return None

    def policy_now(self, run: RunRecord, approval: ApprovalRecord) -> PolicyNow:
        """What the policy as it is now says of `approval`'s call, read once for everything one
        decision asks of it (who may, step-up, break-glass)."""
        tool = run_tools(run, self.tools).get(approval.tool)
        if tool is None:
            return PolicyNow(None)
        caller = Caller(run.requester, str(run.origin.get("channel") or ""))
        return PolicyNow(classify(self.config.policy, tool, approval.args, caller, run.usage,
                                  defaulted_of(approval.asked)))

    def step_up_needed(self, run: RunRecord, approval: ApprovalRecord, now: PolicyNow | None = None) -> timedelta | None:
        """How recent a sign-in at the web console approving `approval` needs (None: any approve
        counts, a Slack click too): by the rule that asked for it and by the rule as the policy words
        it now, the stricter of the two, so a card posted before a rule said `step_up` approves
        nothing without one either."""
        then = step_up_of(approval.asked)
        verdict = (now or self.policy_now(run, approval)).verdict
        asks_now = verdict.requirement.step_up if isinstance(verdict, Ask) else None
        return min((d for d in (then, asks_now) if d is not None), default=None)

    def to_tell(self, run: RunRecord, approval: ApprovalRecord, ids: Iterable[str]) -> list[str]:
        """The people among `ids` to tell directly that `approval` waits for them: each a person,
        not a group or a channel (told in the card's thread: a message to each member would be a
        broadcast), who has not decided it and may, by the rule that asked and the rule now."""
        now = self.policy_now(run, approval)
        return [person for person in dict.fromkeys(ids) if is_slack_user(person) and not has_voted(approval, person)
                and self.approval_refusal(person, run, approval, now) is None]

    def unopenable(self, approval: ApprovalRecord, digest: str) -> Unopenable | None:
        """Why a form or a decision on `approval` from a message showing `digest` cannot be taken
        now (None: it may be), as the store would find it by the database's clock: what an edge
        says before it opens a form, without deciding anything."""
        return decision_refusal(approval, digest, self.store.now())

    def visibility_refusal(self, user: str, run: RunRecord) -> str | None:
        """Why `user` may not see `run` (its goal, arguments, answer), or None if they may: its
        requester, anyone who may decide it, and whoever `may_see` admits (its channel's members)."""
        if user == run.requester or self.may_approve(user, run, ()) is None or self.may_see(user, run):
            return None
        return "you are not its requester, one of its approvers or a member of its channel"
