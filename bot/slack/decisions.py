"""Approve (alone, or allowing similar calls), Deny (and its reason modal), Edit (and its modal)
and View full arguments: deciding an approval in Slack."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any, assert_never

from slack_bolt import Ack
from slack_sdk.errors import SlackApiError

from signoff.bot.slack import argument_blocks, blocks, messages
from signoff.bot.slack.approval_buttons import approval_page
from signoff.bot.slack.argument_blocks import BATCH_SECTIONS, MODAL_SECTIONS, outcome_modal
from signoff.bot.slack.edit_form import FieldErrors, edit_errors, edit_fields, edit_modal, read_edit
from signoff.bot.slack.home import Home
from signoff.bot.slack.notices import Notices
from signoff.bot.slack.notifier import SlackNotifier
from signoff.bot.slack.payloads import (
    ApprovalClick,
    BatchClick,
    EditSubmission,
    Malformed,
    Where,
    parse_click,
    parse_deny_submission,
    parse_edit_submission,
)
from signoff.bot.slack.replies import (
    APPROVAL_GONE,
    already_text,
    approval_outcome,
    decided_text,
    expired_text,
    not_done_text,
)
from signoff.bot.slack.workers import Workers
from signoff.bot.words import approval_progress
from signoff.runtime.approval import bound_to
from signoff.runtime.records import (
    AlreadyCounted,
    AlreadyDecided,
    AlreadyDone,
    ApprovalRecord,
    Counted,
    Decided,
    DecisionOutcome,
    Done,
    Expired,
    Mismatch,
    Missing,
    NotAllowed,
    Refused,
    RunRecord,
    StepUpNeeded,
)
from signoff.runtime.runner import Runner

log = logging.getLogger("signoff.bot.slack.decisions")

Rest = Callable[[], None]
"""A listener's work after its ack, for the listener pool to run once the clicks queued before it
are acked (see `listeners.answered`)."""


class Decisions:
    """The listeners of an approval request's buttons and of the Deny modal."""

    def __init__(self, runner: Runner, workers: Workers, notifier: SlackNotifier, notices: Notices,
                 home: Home) -> None:
        self.runner, self.workers, self.notifier = runner, workers, notifier
        self.notices, self.home = notices, home

    def acked_click(self, ack: Ack, body: dict[str, Any]) -> ApprovalClick | None:
        """Ack first, then read the click; one that is not an approval click is refused and None."""
        ack()
        click = parse_click(body)
        if isinstance(click, ApprovalClick):
            return click
        self.notices.refuse_malformed(body, click)
        return None

    def on_approve(self, ack: Ack, body: dict[str, Any]) -> Rest | None:
        click = self.acked_click(ack, body)
        if click is None:
            return None
        return lambda: self._approve(click)

    def _approve(self, click: ApprovalClick, grant: bool = False) -> None:
        outcome = self._approve_shown(click.approval_id, click.digest, click.where.user, MODAL_SECTIONS, grant=grant)
        self.after_decision(outcome, click.where, modal=click.where.modal_id)

    def _approve_shown(self, approval_id: str, digest: str, user: str, room: int,
                       grant: bool = False) -> DecisionOutcome:
        """Approve, as `user`, a call some message could have offered Approve for: its arguments fit
        beside it in full (`room` code sections: a card of several calls, or the full-arguments
        modal, the largest place Approve is offered). A signed click names what it likes; the server
        approves only what it showed. What an approval asks never changes under its id (an edit asks
        afresh), so the approval read here is the one decided."""
        approval = self.runner.get_approval(approval_id)
        if (approval is not None and bound_to(approval, digest)
                and not argument_blocks.approvable_in(approval, self.notifier.display(approval.tool), room)):
            return NotAllowed("Approve was not offered for this call here: its arguments are too long to show "
                              "in full beside it; open them in full and approve it there")
        return self.runner.decide(approval_id, digest, user, approved=True, grant=grant, drive=True, show=False)

    def on_approve_all(self, ack: Ack, body: dict[str, Any]) -> Rest | None:
        """Approve all, on the card of a turn's several calls: each call the clicker may approve is
        decided as its own Approve would decide it (a call decided first, by anyone, stays as it
        was decided), and the clicker is told what became of each."""
        ack()
        click = parse_click(body)
        if not isinstance(click, BatchClick):
            self.notices.refuse_malformed(body, click)
            return None
        return lambda: self._approve_all(click)

    def _approve_all(self, click: BatchClick) -> None:
        said: list[str] = []
        runs: dict[str, None] = {}  # each run decided, in order: driven here once, whichever decision took its lease
        outcomes: list[DecisionOutcome] = []
        for approval_id, digest in click.approvals:
            outcome = self._approve_shown(approval_id, digest, click.where.user, BATCH_SECTIONS)
            outcomes.append(outcome)
            if isinstance(outcome, Decided):
                runs[outcome.approval.run_id] = None
            # A refusal carries no approval: read it (after the ack, and only then) to name its call.
            found = self.runner.get_approval(approval_id) if isinstance(outcome, NotAllowed | Mismatch) else None
            said.append(batch_outcome_line(outcome, found.tool if found is not None else None))
        for run_id in runs:
            self.workers.submit(run_id)
        for outcome in outcomes:  # the runs are on their way: their tools do not wait for these updates
            self.runner.show_decision(outcome)
            if isinstance(outcome, Decided | AlreadyDecided | Expired):
                self._refresh_clicked(outcome.approval, click.where)
        self.notices.tell(click.where, "*Approve all*\n" + "\n".join(said))

    def on_approve_similar(self, ack: Ack, body: dict[str, Any]) -> Rest | None:
        click = self.acked_click(ack, body)
        if click is None:
            return None
        return lambda: self._approve(click, grant=True)

    def on_edit(self, ack: Ack, body: dict[str, Any]) -> Rest | None:
        click = self.acked_click(ack, body)
        return None if click is None else lambda: self._open_edit(click)

    def _open_edit(self, click: ApprovalClick) -> None:
        approval = self.runner.get_approval(click.approval_id)
        refusal, run = self.modal_refusal(click, approval)
        if refusal is not None or approval is None or run is None:
            self.notices.tell(click.where, refusal or APPROVAL_GONE)
            return
        fields = edit_fields(approval, self.notifier.tool(approval.tool, run), self.notifier.display(approval.tool, run))
        if fields is None:
            self.notices.tell(click.where, argument_blocks.not_editable_in_slack(run.run_id))
            return
        self.notifier.client.views_open(trigger_id=click.where.trigger_id, view=edit_modal(
            run, approval, fields, channel=click.where.channel, home=click.where.in_home))

    def on_edit_submitted(self, ack: Ack, body: dict[str, Any]) -> None:
        # Slack shows errors beside the inputs only when they come in the ack, within 3 s: this
        # listener asks the runner first (a few reads and one write) and acks with its answer.
        submission = parse_edit_submission(body)
        if isinstance(submission, Malformed):
            ack()
            log.warning("edit form not understood: %s", submission.reason)
            return
        answer, edited = self._edit(submission)
        ack(**answer)
        if edited is not None:
            self.workers.submit(edited.run_id)  # its worker asks afresh about the edited call
            self.notices.tell(submission.where, f"Your edit of `{blocks.safe(edited.tool, 64)}` is saved: a new "
                                                "request follows, to be approved like any other.")
        if submission.where.in_home:
            self.home.publish(submission.where.user)

    def _edit(self, submission: EditSubmission) -> tuple[dict[str, Any], ApprovalRecord | None]:
        """The ack for an edit (errors beside the inputs, an outcome in place of the form, or none:
        the form closes), and the approval it edited, if it did."""
        approval = self.runner.get_approval(submission.approval_id)
        if approval is None:
            return _in_place(APPROVAL_GONE), None
        run = self.runner.get_run(approval.run_id, history=False)
        fields = edit_fields(approval, self.notifier.tool(approval.tool, run), self.notifier.display(approval.tool, run))
        if fields is None:
            return _in_place(argument_blocks.not_editable_in_slack(approval.run_id)), None
        args = read_edit(fields, submission.values)
        if isinstance(args, FieldErrors):
            return _errors(args), None
        outcome = self.runner.edit(submission.approval_id, submission.digest, submission.where.user, args)
        match outcome:
            case Done():
                return {}, approval
            case Refused(reason=reason):
                now = self.runner.get_approval(submission.approval_id)
                # Decided or replaced meanwhile (no clock read: this answer is the form's acknowledgement).
                if now is None or now.status != "pending" or not bound_to(now, submission.digest):
                    return _in_place(decided_text(now) if now is not None else APPROVAL_GONE), None
                return _errors(edit_errors(fields, reason)), None
            case NotAllowed(reason=reason):
                return _in_place(not_done_text(reason)), None
            case AlreadyDone(what=what, by=by, at=at):
                return _in_place(already_text(what, by, at)), None
            case Missing(what=what):
                return _in_place(f"This {what} no longer exists."), None
            case _:
                assert_never(outcome)

    def on_view_args(self, ack: Ack, body: dict[str, Any]) -> Rest | None:
        click = self.acked_click(ack, body)
        return None if click is None else lambda: self._open_arguments(click)

    def _open_arguments(self, click: ApprovalClick) -> None:
        approval = self.runner.get_approval(click.approval_id)
        refusal, run = self.modal_refusal(click, approval, history=True)  # the modal quotes the model too
        if refusal is not None or approval is None or run is None:
            self.notices.tell(click.where, refusal or APPROVAL_GONE)
            return
        view = argument_blocks.arguments_modal(run, approval, self.notifier.display(approval.tool, run),
                                               console=self.notifier.console_url)
        if view is None:
            self.notices.tell(click.where, argument_blocks.too_long_for_slack(run.run_id))
            return
        self.notifier.client.views_open(trigger_id=click.where.trigger_id, view=view)

    def on_deny(self, ack: Ack, body: dict[str, Any]) -> Rest | None:
        click = self.acked_click(ack, body)
        return None if click is None else lambda: self._open_deny(click)

    def _open_deny(self, click: ApprovalClick) -> None:
        approval = self.runner.get_approval(click.approval_id)
        refusal, _ = self.modal_refusal(click, approval)
        if refusal is not None:
            self.notices.tell(click.where, refusal)
            return
        assert approval is not None
        # The trigger_id is good once, for 3 seconds: open the modal before anything slow.
        self.notifier.client.views_open(trigger_id=click.where.trigger_id,
                                        view=messages.deny_modal(approval, channel=click.where.channel))

    def modal_refusal(self, click: ApprovalClick, approval: ApprovalRecord | None,
                       history: bool = False) -> tuple[str | None, RunRecord | None]:
        """Why the Deny or the full-arguments modal should not open (None if it may), and the
        approval's run (with its `history` if asked), read once for the modal too; the decision
        itself is checked again."""
        if approval is None:
            return APPROVAL_GONE, None
        match self.runner.unopenable(approval, click.digest):
            case "changed":
                return "This button no longer matches the request it was posted with.", None
            case "decided":
                return decided_text(approval), None
            case "expired":
                return expired_text(approval), None
        run = self.runner.get_run(approval.run_id, history=history)
        if run is None:
            return "The run behind this request no longer exists.", None
        if not click.where.trigger_id:
            return "Slack did not send what is needed to open the form; please click again.", run
        reason = self.runner.approval_refusal(click.where.user, run, approval)
        return (not_done_text(reason) if reason else None), run

    def on_deny_submitted(self, ack: Ack, body: dict[str, Any]) -> Rest | None:
        ack()
        submission = parse_deny_submission(body)
        if isinstance(submission, Malformed):
            log.warning("deny form not understood: %s", submission.reason)
            return None

        def deny() -> None:
            outcome = self.runner.decide(submission.approval_id, submission.digest, submission.where.user,
                                         approved=False, note=submission.reason, drive=True, show=False)
            self.after_decision(outcome, submission.where)
        return deny

    def after_decision(self, outcome: DecisionOutcome, where: Where, modal: str | None = None) -> None:
        """Act on a decision's outcome and say what it was; `modal` is the view clicked in, if any."""
        if isinstance(outcome, Decided):
            # First: the decision holds the run for this replica, so the run goes on here whatever
            # Slack does with the messages below, and its tool does not wait for them.
            self.workers.submit(outcome.approval.run_id)
        self.runner.show_decision(outcome)
        if isinstance(outcome, Decided | AlreadyDecided | Expired):
            self._refresh_clicked(outcome.approval, where)
        self._tell_outcome(outcome, where, modal)
        if where.in_home or modal:  # a modal may have been opened from Home, whose buttons are now stale
            self.home.publish(where.user)

    def _tell_outcome(self, outcome: DecisionOutcome, where: Where, modal: str | None) -> None:
        """Tell the clicker what became of their decision, and set right what a lost race left showing."""
        match outcome:
            case Decided(approval=approval):
                if modal:  # a channel card shows the outcome itself; a modal has to be told
                    self.notices.tell(where, f"{approval_outcome(approval)[0]}. The result follows in the "
                                             "run's thread.", modal)
            case AlreadyDecided(approval=approval):
                self.notices.tell(where, decided_text(approval), modal)
                self._refresh(approval)
            case Expired(approval=approval):
                self.notices.tell(where, expired_text(approval), modal)
                self.workers.submit(approval.run_id)  # ends the run now rather than at the next sweep
            case Counted(approval=approval):
                missing = approval.quorum - len(approval.approved_by)
                more = "1 more person approves" if missing == 1 else f"{missing} more people approve"
                self.notices.tell(where, f"Your approval is counted: {approval_progress(approval, blocks.user)}. "
                                         f"`{blocks.safe(approval.tool, 64)}` runs once {more}.", modal)
            case AlreadyCounted(approval=approval):
                self.notices.tell(where, f"You already decided this one; one person counts once "
                                         f"({approval_progress(approval, blocks.user)}).", modal)
            case StepUpNeeded(reason=reason, approval_id=approval_id):
                self.notices.tell(where, self._step_up_text(reason, approval_id), modal)
            case NotAllowed(reason=reason) | Mismatch(reason=reason):
                self.notices.tell(where, not_done_text(reason), modal)
            case Missing(what=what):
                self.notices.tell(where, f"This {what} no longer exists.", modal)
            case _:
                assert_never(outcome)

    def _step_up_text(self, reason: str, approval_id: str) -> str:
        """Why an Approve click was refused for want of a fresh sign-in, with the link to approve it."""
        approval = self.runner.get_approval(approval_id)
        console = self.notifier.console_url
        if approval is None or console is None:
            return not_done_text(reason)
        return f"{not_done_text(reason)}\n<{approval_page(console, approval)}|Approve it on its page>"

    def _refresh_clicked(self, approval: ApprovalRecord, where: Where) -> None:
        """The clicked message may be a copy of the request (a post that timed out but arrived, then
        was posted again): take its buttons away too, not only those of the copy we recorded."""
        recorded = approval.message or {}
        if where.in_home or not (where.channel and where.message_ts):
            return
        if (recorded.get("channel"), recorded.get("ts")) == (where.channel, where.message_ts):
            return
        self._refresh(dataclasses.replace(approval, message={"channel": where.channel, "ts": where.message_ts}))

    def _refresh(self, approval: ApprovalRecord) -> None:
        """A lost race may find the message still showing buttons (its winner crashed): fix it."""
        run = self.runner.get_run(approval.run_id, history=False)
        if run is not None:
            try:
                self.notifier.show_approval(run, approval, self.runner.card_of(run, approval))
            except SlackApiError as exc:
                log.warning("approval %s: could not refresh its message: %s", approval.approval_id, exc)


def batch_outcome_line(outcome: DecisionOutcome, tool: str | None = None) -> str:
    """One line of what Approve all did to one call (`tool`: its tool, for an outcome that does not say)."""
    match outcome:
        case Decided(approval=approval):
            return f"• `{blocks.safe(approval.tool, 64)}` ({blocks.safe(approval.key, 120)}): approved; it runs now."
        case Counted(approval=approval):
            return (f"• `{blocks.safe(approval.tool, 64)}` ({blocks.safe(approval.key, 120)}): your approval is "
                    f"counted ({approval_progress(approval, blocks.user)}).")
        case AlreadyCounted(approval=approval):
            return f"• `{blocks.safe(approval.tool, 64)}`: you already approved it."
        case AlreadyDecided(approval=approval) | Expired(approval=approval):
            return f"• `{blocks.safe(approval.tool, 64)}`: {decided_text(approval)}"
        case NotAllowed(reason=reason) | Mismatch(reason=reason):
            return f"• `{blocks.safe(tool, 64)}`: {not_done_text(reason)}" if tool else f"• {not_done_text(reason)}"
        case Missing(what=what):
            return f"• This {what} no longer exists."
        case _:
            assert_never(outcome)


def _in_place(text: str) -> dict[str, Any]:
    """An ack that shows `text` (safe mrkdwn) in place of the submitted form."""
    return {"response_action": "update", "view": outcome_modal(text)}


def _errors(found: FieldErrors) -> dict[str, Any]:
    """An ack that keeps the form open with each error beside its input."""
    return {"response_action": "errors", "errors": found.errors}
