"""Who may decide an approval or ask something of a run: the runner's part that asks the aggregate.

The rule itself is `approval.decider_refusal`; this part knows what it needs and the aggregate
does not: the policy as it is now, and the edge's answer to "is this person one of these approvers"
(`may_approve`: Slack knows who is in a group or a channel).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
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


class Deciders:
    """The runner's answers to "may this person decide this" (a part of `Runner`, which sets these)."""

    store: Store
    tools: dict[str, Tool]
    config: RunnerConfig
    may_approve: MayApprove
    may_see: MaySee

    def approval_refusal(self, user: str, run: RunRecord, approval: ApprovalRecord | None = None) -> str | None:
        """Why `user` may not decide `approval` (by the rule that asked for it, and by the rule as
        the policy words it now), or `run`'s requests (extend, retry, reconcile: by the policy's
        defaults), or None if they may."""
        is_among: IsAmong = functools.partial(self.may_approve, user, run)
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
        return refusal or self._policy_now_refuses(user, run, approval, is_among)

    def _policy_now_refuses(self, user: str, run: RunRecord, approval: ApprovalRecord,
                            is_among: IsAmong) -> str | None:
        """Why the policy as it is now does not let `user` decide `approval`, or None.

        The file may have changed since the call was asked about (or SIGNOFF_APPROVERS, with a
        restart): a decision must satisfy the rule then and the rule now, so someone taken off
        the approvers cannot decide what was asked of them before.
        """
        match self._verdict_now(run, approval):
            case Deny(rule=rule):
                return f"the approval policy now refuses this call (policy rule {rule})"
            case Ask(rule=rule, requirement=now):
                approvers = now.approvers
                if (approval.asked or {}).get("escalated") and now.escalate is not None:
                    approvers += now.escalate.to  # escalated as the rule says: those added may decide
                return with_rule(decider_refusal(user, run.requester, approvers, now.allow_self_approval, is_among),
                                 rule)
        return None

    def _verdict_now(self, run: RunRecord, approval: ApprovalRecord) -> Verdict | None:
        """What the policy as it is now says of `approval`'s call (None: its tool is gone, and the
        worker refuses the call)."""
        tool = run_tools(run, self.tools).get(approval.tool)
        if tool is None:
            return None
        caller = Caller(run.requester, str(run.origin.get("channel") or ""))
        return classify(self.config.policy, tool, approval.args, caller, run.usage, defaulted_of(approval.asked))

    def step_up_needed(self, run: RunRecord, approval: ApprovalRecord) -> timedelta | None:
        """How recent a sign-in at the web console approving `approval` needs (None: any approve
        counts, a Slack click too): by the rule that asked for it and by the rule as the policy words
        it now, the stricter of the two, so a card posted before a rule said `step_up` approves
        nothing without one either."""
        then = step_up_of(approval.asked)
        verdict = self._verdict_now(run, approval)
        now = verdict.requirement.step_up if isinstance(verdict, Ask) else None
        return min((d for d in (then, now) if d is not None), default=None)

    def to_tell(self, run: RunRecord, approval: ApprovalRecord, ids: Iterable[str]) -> list[str]:
        """The people among `ids` to tell directly that `approval` waits for them: each a person,
        not a group or a channel (told in the card's thread: a message to each member would be a
        broadcast), who has not decided it and may, by the rule that asked and the rule now."""
        return [person for person in dict.fromkeys(ids) if is_slack_user(person) and not has_voted(approval, person)
                and self.approval_refusal(person, run, approval) is None]

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
