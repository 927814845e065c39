"""What people ask of a run (cancel, edit, extend, retry, request again, reconcile, revoke a
grant): the runner's part that checks who asks and leaves the request for the run's worker."""

from __future__ import annotations

from typing import Any, cast

from signoff.runtime import approval_commands
from signoff.runtime.access_reviews import GRANT_RUN_GONE, Verdict, grant_reviewer_refusal
from signoff.runtime.approval import bound_to
from signoff.runtime.approval_policy import Deny
from signoff.runtime.budget import extension
from signoff.runtime.caller_runs import run_tools
from signoff.runtime.commands import (
    Cancel,
    Command,
    Edit,
    Extend,
    Reconcile,
    ReconcileAction,
    RequestAgain,
    Retry,
    request_name,
)
from signoff.runtime.deciders import Deciders
from signoff.runtime.decisions import jsonable
from signoff.runtime.edits import checked_edit
from signoff.runtime.errors import InvalidTransition
from signoff.runtime.events import command_recorded, grant_revoked
from signoff.runtime.judging import Caller, classify
from signoff.runtime.pending_calls import PendingCall
from signoff.runtime.records import (
    AlreadyDone,
    ApprovalRecord,
    Done,
    GrantRecord,
    Missing,
    NotAllowed,
    Refused,
    RunOutcome,
    RunRecord,
)
from signoff.runtime.relay import Relay
from signoff.runtime.requests import call_to_ask_again, waiting_on
from signoff.runtime.rules import (
    CANCEL,
    EDIT,
    EXTEND_BUDGET,
    EXTEND_STALLED,
    RECONCILE,
    REQUEST_AGAIN,
    RETRY,
    CommandRule,
)
from signoff.runtime.schema import REOPENABLE
from signoff.runtime.state import parse_state, redact, secret_names
from signoff.runtime.telling import Teller

REQUESTER_ONLY = "only the person who started this run can request its call again"


class RunRequests(Deciders):
    """People's requests of a run (a part of `Runner`, which sets `teller` and what `Deciders` needs)."""

    teller: Teller
    relay: Relay

    def cancel(self, run_id: str, user: str, reason: str = "", *, shown_version: int | None = None) -> RunOutcome:
        """Ask for the run to end as cancelled; its pending approval is closed at once.

        A call already running is not stopped (`running_call` says which): it finishes, and nothing
        after it runs.
        """
        outcome = self._command(run_id, user, Cancel(reason=reason), CANCEL, requester_may=True,
                                shown_version=shown_version)
        if isinstance(outcome, Done):  # the redraws its pending approval's close owes
            self.relay.send_owed(run_id)
        return outcome

    def edit(self, approval_id: str, digest: str, user: str, args: Any) -> RunOutcome:
        """Change the arguments of a pending call before anyone approves it (people who may decide
        it only). The approval closes as superseded at once and the run's worker asks afresh
        about the edited call: a new approval, which the editor has still to approve like anyone.

        Refused when the arguments are not ones the tool takes (`Refused` naming each problem),
        unchanged, or refused by the policy; and, atomically, when the approval was decided first.
        """
        approval = self.store.get_approval(approval_id)
        if approval is None:
            return Missing("approval")
        if not bound_to(approval, digest):
            return Refused("this form no longer matches the request it was opened for")
        run = self.store.get_run(approval.run_id, history=False)
        if run is None:
            return Missing("run")
        reason = self.approval_refusal(user, run, approval)
        if reason:  # before anything about the call is said
            return NotAllowed(reason)
        tool = run_tools(run, self.tools).get(approval.tool)
        if tool is None:
            return Refused(f"tool {approval.tool} is no longer registered")
        state = parse_state(run.state)[0]
        try:  # the edit's own check, answered in the form (a call decided meanwhile: the command says so)
            checked = checked_edit(state, waiting_on(state, approval.key), tool, args)
        except ValueError as exc:
            return Refused(str(exc))
        edited = checked.args
        caller = Caller(run.requester, str(run.origin.get("channel") or ""))
        verdict = classify(self.config.policy, tool, edited, caller, run.usage, checked.defaulted)
        if isinstance(verdict, Deny):
            return Refused(f"the approval policy refuses the edited call (policy rule {verdict.rule}: "
                           f"{verdict.reason})")
        outcome = self._command(run.run_id, user, Edit(approval_id=approval_id, digest=digest, args=edited,
                                                       key=approval.key), EDIT, approval=approval)
        if isinstance(outcome, Done):
            self.relay.send_owed(run.run_id)  # its card, superseded
        return outcome

    def extend(self, run_id: str, user: str, *, shown_version: int | None = None) -> RunOutcome:
        """Raise the budget that ran out by the configured increment and continue (approvers only);
        a stalled run goes on with its budget as it is, its repeats so far forgiven."""
        run = self.store.get_run(run_id, history=False)
        if run is None:
            return Missing("run")
        if run.status == "stalled":
            return self._command(run_id, user, Extend(), EXTEND_STALLED,
                                 shown_version=shown_version)
        if run.status != "budget_exhausted":
            return self._stale(run, shown_version) or Refused(f"run {run_id} is {run.status}, not out of budget")
        limit = (run.stop or {}).get("budget", "max_steps")
        limits = {limit: extension(limit, run.budget.get(limit) or 0, self.config.extend_steps)}
        return self._command(run_id, user, Extend(limits=limits), EXTEND_BUDGET,
                             shown_version=shown_version)

    def retry(self, run_id: str, user: str, *, shown_version: int | None = None) -> RunOutcome:
        """Continue a failed run from its last checkpoint."""
        return self._command(run_id, user, Retry(), RETRY, requester_may=True,
                             shown_version=shown_version)

    def request_again(self, run_id: str, user: str, *, shown_version: int | None = None) -> RunOutcome:
        """Ask again about the call of a run that expired with nobody deciding it (its requester
        only): the run's worker opens a fresh approval for the same call and key, with a fresh time
        limit, under the policy as it is now, and the run goes on from where it paused."""
        run = self.store.get_run(run_id, history=False)
        if run is None:
            return Missing("run")
        if user != run.requester:
            return NotAllowed(REQUESTER_ONLY)
        if run.status in REOPENABLE:  # said now, not only by the worker that would refuse it
            pending = run.state.get("pending")
            caller = Caller(run.requester, str(run.origin.get("channel") or ""))
            try:
                call_to_ask_again(PendingCall.model_validate(pending) if pending else None, run_tools(run, self.tools),
                                  lambda tool, args: classify(self.config.policy, tool, args, caller, run.usage))
            except InvalidTransition as exc:
                return Refused(str(exc))
        return self._command(run_id, user, RequestAgain(), REQUEST_AGAIN, requester_may=True,
                             shown_version=shown_version)

    def reconcile(self, run_id: str, user: str, action: str, result: Any = None, note: str = "", *,
                  shown_version: int | None = None) -> RunOutcome:
        """Settle a call with an unknown outcome: `done` (it happened), `retry` (run it again) or `abort`."""
        if action not in ("done", "retry", "abort"):
            return Refused("choose done, retry or abort")
        return self._command(run_id, user, Reconcile(action=cast(ReconcileAction, action), result=jsonable(result), note=note), RECONCILE,
                             shown_version=shown_version)

    def _command(self, run_id: str, user: str, command: Command, rule: CommandRule,
                 requester_may: bool = False, shown_version: int | None = None,
                 approval: ApprovalRecord | None = None) -> RunOutcome:
        """Leave `command` for the run's worker, if `user` may ask it (of `approval`, when it is about one)."""
        run = self.store.get_run(run_id, history=False)
        if run is None:
            return Missing("run")
        if not (requester_may and user == run.requester):
            reason = self.approval_refusal(user, run, approval)
            if reason:
                return NotAllowed(reason)
        command = command.model_copy(update={"by": user, "shown_version": shown_version})
        audited = self._audited(command.to_json(), approval)
        refusal = approval_commands.set_command(self.store, run_id, command.to_json(), rule, audited)
        if refusal is None:
            self.teller.observe(run, [{**command_recorded(audited), "run_id": run_id}])
            return Done(self.store.get_run(run_id, history=False) or run)
        if shown_version is not None and refusal.waiting is not None:
            return AlreadyDone(request_name(refusal.waiting), refusal.waiting.get("by"))
        return (self._stale(run, shown_version) if shown_version is not None else None) or Refused(refusal.reason)

    def _audited(self, command: dict[str, Any], approval: ApprovalRecord | None) -> dict[str, Any]:
        """`command` as the audit log and the observers keep it: an edit's arguments with the
        tool's secrets redacted (the command itself keeps them: the worker runs what was typed)."""
        if approval is None or "args" not in command:
            return command
        secrets = secret_names(self.tools.get(approval.tool), configured=self.config.redact_keys)
        return {**command, "args": redact(command["args"], secrets)}

    def _stale(self, run: RunRecord, shown_version: int | None) -> AlreadyDone | Refused | None:
        """What became of a button pressed on a message showing the run at `shown_version`, if the
        run has moved on since: the request made from that message, or that it is out of date."""
        if shown_version is None:
            return None
        made = self.store.command_shown_at(run.run_id, shown_version)
        if made is not None:
            command, at = made
            return AlreadyDone(request_name(command), command.get("by"), at)
        waiting = run.command
        if waiting is not None and waiting.get("shown_version") == shown_version:
            return AlreadyDone(request_name(waiting), waiting.get("by"))
        if run.version != shown_version:
            return Refused(f"this message is out of date: the run is now {run.status.replace('_', ' ')}")
        return None

    def revoke_grant(self, grant_id: str, user: str) -> RunOutcome:
        """End a grant at once: its next call is asked about. Its maker, or anyone who may decide
        the approval it was made on, may revoke it."""
        grant = self.store.get_grant(grant_id)
        if grant is None:
            return Missing("grant")
        reason = self.grant_refusal("revoke", user, grant)
        if reason:
            return NotAllowed(reason)
        revoked = self.store.revoke_grant(grant_id, user)
        run = self.store.get_run(grant.run_id, history=False)
        if revoked is None or run is None:
            return Missing("grant")
        if revoked.revoked_by != user:
            return AlreadyDone("revoke", revoked.revoked_by, revoked.revoked_at)
        self.teller.observe(run, [{**grant_revoked(grant_id, user), "run_id": run.run_id}])
        return Done(run, {"grant_id": grant_id})

    def grant_refusal(self, verdict: Verdict, user: str, grant: GrantRecord) -> str | None:
        """Why `user` may not keep or revoke `grant` (`access_reviews.grant_reviewer_refusal`), or None."""
        def approver_refusal() -> str | None:
            approval = self.store.get_approval(grant.approval_id)
            run = self.store.get_run(grant.run_id, history=False)
            if approval is None or run is None:
                return GRANT_RUN_GONE
            return self.approval_refusal(user, run, approval)

        return grant_reviewer_refusal(verdict, user, grant, approver_refusal)

    def grants_for(self, user: str, limit: int = 20) -> list[GrantRecord]:
        """Grants in force that `user` made or that cover their runs, newest first."""
        return [g for g in self.store.list_grants(live=True, limit=limit * 3)
                if user in (g.created_by, g.requester)][:limit]
