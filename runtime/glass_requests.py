"""Break-glass as people ask for it: who may break the glass on a call and who may review it (the
runner's part that knows the run and the policy now; the rules themselves are `break_glass`'s)."""

from __future__ import annotations

from signoff.runtime import approval_commands
from signoff.runtime.approval import with_rule
from signoff.runtime.approval_events import as_events
from signoff.runtime.approval_policy import Ask
from signoff.runtime.break_glass import (
    GlassDue,
    Reviewed,
    ReviewOutcome,
    Verdict,
    glass_refusal,
    review_refusal,
)
from signoff.runtime.deciders import Deciders, PolicyNow
from signoff.runtime.errors import IncompatibleState
from signoff.runtime.records import ApprovalRecord, Missing, NotAllowed, RunRecord
from signoff.runtime.relay import Relay
from signoff.runtime.telling import Teller, skip_unreadable

NO_LONGER_OFFERED = "the approval policy no longer offers break-glass for this call"


class GlassRequests(Deciders):
    """Breaking the glass and reviewing it (a part of `Runner`, which sets `teller`)."""

    teller: Teller
    relay: Relay

    def breaker_refusal(self, user: str, run: RunRecord, approval: ApprovalRecord, reason: str | None,
                        now: PolicyNow | None = None) -> str | None:
        """Why `user` may not approve `approval` alone by breaking the glass with `reason` (None:
        they may): the rule offers it, then and now, the reason is long enough (None: not typed
        yet, as a form opens), and they are the run's requester or may decide the call (alone,
        however many its rule needs)."""
        refusal = glass_refusal(approval, reason)
        now = now or self.policy_now(run, approval)
        if refusal is None and not (isinstance(now.verdict, Ask) and now.verdict.requirement.break_glass is not None):
            refusal = NO_LONGER_OFFERED
        if refusal is not None:
            return with_rule(refusal, approval.rule)
        return None if user == run.requester else self.approval_refusal(user, run, approval, now)

    def review_glass(self, approval_id: str, user: str, verdict: Verdict, note: str = "",
                     ) -> ReviewOutcome | NotAllowed | Missing:
        """`user`'s review of the break-glass that approved `approval_id`: one of the rule's
        approvers (then and now), not the person who broke it. The first review stands."""
        approval = self.store.get_approval(approval_id)
        if approval is None:
            return Missing("approval")
        run = self.store.get_run(approval.run_id, history=False)
        if run is None:
            return Missing("run")
        refusal = review_refusal(approval, user) or self.approval_refusal(user, run, approval)
        if refusal:
            return NotAllowed(refusal)
        outcome = approval_commands.review_glass(self.store, approval_id, user=user, verdict=verdict, note=note)
        if isinstance(outcome, Reviewed):
            self.teller.observe(run, as_events(outcome.written))
            self.relay.send_owed(run.run_id)
        return outcome

    def glass_due(self) -> list[GlassDue]:
        """Make each break-glass follow-up now due, once across replicas (the database's clock):
        tell its channels and post its review card, remind its reviewers, say it is overdue."""
        made = approval_commands.glass_due(self.store)
        if made:
            self.config.failpoints.hit("after_sweep")
        for due in made:
            try:
                run = self.store.get_run(due.approval.run_id, history=False)
            except IncompatibleState as exc:
                skip_unreadable(due.approval.run_id, exc)
                continue
            if run is not None:
                self.teller.observe(run, as_events(due.written))
        self.relay.send_owed()  # the follow-ups owed, kept with the sweep that made them
        return made

    def unreviewed_glass(self, limit: int = 100) -> list[ApprovalRecord]:
        """Approvals approved by breaking the glass that nobody has reviewed yet, oldest first."""
        return self.store.unreviewed_glass(limit)
