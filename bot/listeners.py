"""Bolt listeners. Thin: ack() first, parse, one runner call, render the outcome.

Every handler is idempotent: Slack retries, and a signed request replayed inside its 5-minute
window verifies. Decisions are compare-and-set in the store; slash commands dedupe on trigger_id.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any, assert_never

from slack_bolt import Ack, App, Respond
from slack_sdk.errors import SlackApiError
from slack_sdk.webhook import WebhookClient

from signoff.bot import argument_blocks, blocks, messages
from signoff.bot.blocks import Message, notice, safe
from signoff.bot.notifier import SlackNotifier
from signoff.bot.payloads import (
    ApprovalClick,
    CancelRun,
    Command,
    ListRuns,
    Malformed,
    RunClick,
    ShowHelp,
    ShowStatus,
    StartRun,
    Where,
    parse_click,
    parse_command,
    parse_deny_submission,
)
from signoff.bot.replies import (
    APPROVAL_GONE,
    already_text,
    approval_outcome,
    decided_text,
    done_text,
    expired_text,
    no_visible_run,
    not_done_text,
)
from signoff.bot.seen import SeenTriggers
from signoff.bot.words import is_slack_user
from signoff.bot.workers import Workers
from signoff.runtime.records import (
    AlreadyDecided,
    AlreadyDone,
    ApprovalRecord,
    Decided,
    DecisionOutcome,
    Done,
    Expired,
    Mismatch,
    Missing,
    NotAllowed,
    Refused,
    RunOutcome,
    RunRecord,
)
from signoff.runtime.runner import Runner

log = logging.getLogger("signoff.bot.listeners")

_REQUEST_OF_BUTTON = {  # each stopped-run button, and what it asks of the runner (`AlreadyDone.what`)
    blocks.EXTEND_ACTION: "extend", blocks.CLOSE_ACTION: "cancel", blocks.RETRY_ACTION: "retry",
    blocks.RECONCILE_DONE_ACTION: "reconcile.done", blocks.RECONCILE_RETRY_ACTION: "reconcile.retry",
    blocks.RECONCILE_ABORT_ACTION: "reconcile.abort",
}
FAILED_REQUEST = ("Signoff could not finish handling that (the error is in its log). If nothing above "
                  "changed, nothing was decided: please try again in a moment.")


def tell_failure(error: Exception, body: Any, respond: Respond | None) -> None:
    """Log a request that failed after its ack, and tell the person (else they would hear nothing)."""
    log.error("slack request failed: %s: %s (type=%s)", type(error).__name__, error,
              body.get("type") if isinstance(body, dict) else None, exc_info=error)
    if respond is None:
        return
    try:
        respond(text=FAILED_REQUEST, response_type="ephemeral", replace_original=False)
    except Exception as exc:  # Slack is failing too; the log above is all we can do
        log.warning("could not tell the user their request failed: %s", exc)


def answered(listener: Callable[[Ack, dict[str, Any]], None]) -> Callable[..., None]:
    """`listener`, with a failure after its ack handled here rather than by Bolt.

    Bolt resets the ack of a listener that raises, and when that happens before Bolt has read the
    ack (a database that refuses connections fails in a millisecond) the request is answered 404
    after 3 s, and Slack shows the person an error. A failure before the ack still goes to Bolt.
    """
    def run(ack: Ack, body: dict[str, Any], respond: Respond | None = None) -> None:
        try:
            listener(ack, body)
        except Exception as exc:
            if ack.response is None:
                raise
            tell_failure(exc, body, respond)

    return run


class Listeners:
    """Every listener, sharing the runner, the worker pool and the notifier."""

    def __init__(self, runner: Runner, workers: Workers, notifier: SlackNotifier, *,
                 clock: Callable[[], float] = time.time, replay_window_s: float = 300.0) -> None:
        self.runner, self.workers, self.notifier, self.clock = runner, workers, notifier, clock
        self._seen = SeenTriggers(replay_window_s, clock)

    def register(self, app: App) -> None:
        app.command(blocks.COMMAND)(answered(self.on_command))
        app.action(blocks.APPROVE_ACTION)(answered(self.on_approve))
        app.action(blocks.DENY_ACTION)(answered(self.on_deny))
        app.action(blocks.VIEW_ARGS_ACTION)(answered(self.on_view_args))
        app.view_submission(blocks.DENY_MODAL)(answered(self.on_deny_submitted))
        for action in blocks.RUN_ACTIONS:
            app.action(action)(answered(self.on_run_button))
        app.event("app_home_opened")(self.on_home_opened)

    # -- /signoff ------------------------------------------------------------------------------

    def on_command(self, ack: Ack, body: dict[str, Any]) -> None:
        command = parse_command(body)
        if isinstance(command, Malformed):
            ack(text=f"Sorry, Slack sent a command I could not read: {command.reason}.")
            return
        reply, started = self._answer(command)
        ack(**reply.as_kwargs())
        if started is not None:
            # Only after the answer is on its way: a replica dying in the run's first step must
            # not also swallow the "Started run ..." reply.
            self.workers.submit(started)

    def _answer(self, command: Command) -> tuple[Message, str | None]:
        """The reply to the command, and the run it started (to hand to a worker once replied)."""
        who = command.where.user
        match command.request:
            case StartRun(goal=goal):
                return self._start(command, goal)
            case ShowStatus(run_id=run_id):
                run = self._visible_run(run_id, who)
                if run is None:
                    return notice(no_visible_run(run_id)), None
                return messages.status_message(run, self.runner.pending_approval(run_id)), None
            case ListRuns():
                return messages.list_message(self.runner.runs_for(who), self.runner.waiting_on(who)), None
            case CancelRun(run_id=run_id):
                if self._visible_run(run_id, who) is None:
                    return notice(no_visible_run(run_id)), None
                outcome = self.runner.cancel(run_id, who, reason=f"cancelled by {who} with /signoff cancel")
                return notice(self._run_outcome(outcome, run_id, lambda: self._cancelling_text(run_id))), None
            case ShowHelp():
                return messages.help_message(), None
            case _:
                assert_never(command.request)

    def _visible_run(self, run_id: str, who: str) -> RunRecord | None:
        run = self.runner.get_run(run_id, history=False)
        return run if run is not None and self.runner.visibility_refusal(who, run) is None else None

    def _cancelling_text(self, run_id: str) -> str:
        running = self._running_text(run_id)
        return f"Cancelling run `{safe(run_id, 80)}`" + (f": {running}" if running else
                                                         "; nothing pending will be executed.")

    def _running_text(self, run_id: str) -> str | None:
        """What is still true after a cancel: a call that has started cannot be called back."""
        running = self.runner.running_call(run_id)
        if running is None:
            return None
        tool, key = running
        return f"`{safe(tool, 64)}` (key `{safe(key, 120)}`) is already running and will finish; nothing after it will run."

    def _start(self, command: Command, goal: str) -> tuple[Message, str | None]:
        """The reply to `/signoff <goal>`, and the run it started, if it started one."""
        where = command.where
        earlier = self._seen.claim(where.trigger_id)
        if earlier is not None:  # a replay of a command we already took
            return notice(f"Already started as run `{safe(earlier, 80)}`." if earlier else "Already starting."), None
        try:
            # The trigger_id makes a replay that lands on another replica return the same run.
            run = self.runner.start_run(goal, where.user, origin={"channel": where.channel, "team": command.team},
                                        request_id=where.trigger_id or None)
        except ValueError as exc:
            self._seen.forget(where.trigger_id)
            return notice(f"Could not start a run: {safe(exc, 300)}"), None
        self._seen.settle(where.trigger_id, run.run_id)
        return messages.started_message(run), run.run_id

    # -- approval buttons and the deny modal -------------------------------------------------------

    def on_approve(self, ack: Ack, body: dict[str, Any]) -> None:
        ack()
        click = parse_click(body)
        if not isinstance(click, ApprovalClick):
            self._refuse_malformed(body, click)
            return
        outcome = self.runner.decide(click.approval_id, click.digest, click.where.user, approved=True)
        self._after_decision(outcome, click.where, modal=click.where.modal_id)

    def on_view_args(self, ack: Ack, body: dict[str, Any]) -> None:
        ack()
        click = parse_click(body)
        if not isinstance(click, ApprovalClick):
            self._refuse_malformed(body, click)
            return
        approval = self.runner.get_approval(click.approval_id)
        refusal, run = self._modal_refusal(click, approval)
        if refusal is not None or approval is None or run is None:
            self._tell(click.where, refusal or APPROVAL_GONE)
            return
        view = argument_blocks.arguments_modal(run, approval, self.notifier.display(approval.tool))
        if view is None:
            self._tell(click.where, argument_blocks.too_long_for_slack(run.run_id))
            return
        self.notifier.client.views_open(trigger_id=click.where.trigger_id, view=view)

    def on_deny(self, ack: Ack, body: dict[str, Any]) -> None:
        ack()
        click = parse_click(body)
        if not isinstance(click, ApprovalClick):
            self._refuse_malformed(body, click)
            return
        approval = self.runner.get_approval(click.approval_id)
        refusal, _ = self._modal_refusal(click, approval)
        if refusal is not None:
            self._tell(click.where, refusal)
            return
        assert approval is not None
        # The trigger_id is good once, for 3 seconds: open the modal before anything slow.
        self.notifier.client.views_open(trigger_id=click.where.trigger_id,
                          view=messages.deny_modal(approval, channel=click.where.channel))

    def _modal_refusal(self, click: ApprovalClick,
                       approval: ApprovalRecord | None) -> tuple[str | None, RunRecord | None]:
        """Why the Deny or the full-arguments modal should not open (None if it may), and the
        approval's run, read once for the modal too; the decision itself is checked again."""
        if approval is None:
            return APPROVAL_GONE, None
        if approval.digest != click.digest:
            return "This button no longer matches the request it was posted with.", None
        if approval.status != "pending":
            return decided_text(approval), None
        if approval.expires_at <= self.runner.store.now():  # the database's clock decides expiry, not ours
            return expired_text(approval), None
        run = self.runner.get_run(approval.run_id, history=False)
        if run is None:
            return "The run behind this request no longer exists.", None
        if not click.where.trigger_id:
            return "Slack did not send what is needed to open the form; please click again.", run
        return self.runner.approval_refusal(click.where.user, run), run

    def on_deny_submitted(self, ack: Ack, body: dict[str, Any]) -> None:
        ack()
        submission = parse_deny_submission(body)
        if isinstance(submission, Malformed):
            log.warning("deny form not understood: %s", submission.reason)
            return
        outcome = self.runner.decide(submission.approval_id, submission.digest, submission.where.user,
                                     approved=False, note=submission.reason)
        self._after_decision(outcome, submission.where)

    def _after_decision(self, outcome: DecisionOutcome, where: Where, modal: str | None = None) -> None:
        """Act on a decision's outcome and say what it was; `modal` is the view clicked in, if any."""
        if isinstance(outcome, Decided | AlreadyDecided | Expired):
            self._refresh_clicked(outcome.approval, where)
        match outcome:
            case Decided(approval=approval):
                self.workers.submit(approval.run_id)
                if modal:  # a channel card shows the outcome itself; a modal has to be told
                    self._tell(where, f"{approval_outcome(approval)[0]}. The result follows in the "
                                      "run's thread.", modal)
            case AlreadyDecided(approval=approval):
                self._tell(where, decided_text(approval), modal)
                self._refresh(approval)
            case Expired(approval=approval):
                self._tell(where, expired_text(approval), modal)
                self.workers.submit(approval.run_id)  # ends the run now rather than at the next sweep
            case NotAllowed(reason=reason) | Mismatch(reason=reason):
                self._tell(where, not_done_text(reason), modal)
            case Missing(what=what):
                self._tell(where, f"This {what} no longer exists.", modal)
            case _:
                assert_never(outcome)
        if where.in_home or modal:  # a modal may have been opened from Home, whose buttons are now stale
            self.publish_home(where.user)

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
                self.notifier.show_approval(run, approval)
            except SlackApiError as exc:
                log.warning("approval %s: could not refresh its message: %s", approval.approval_id, exc)

    # -- stopped-run buttons --------------------------------------------------------------------------

    def on_run_button(self, ack: Ack, body: dict[str, Any]) -> None:
        ack()
        click = parse_click(body)
        if not isinstance(click, RunClick):
            self._refuse_malformed(body, click)
            return
        outcome = self._run_command(click)
        text = self._run_outcome(outcome, click.run_id, lambda: self._pressed_text(click))
        match outcome:
            case Done(run=run):  # the buttons make way for what was done
                self._show_closed(click.where, run, text)
            case AlreadyDone(what=what, by=by, at=at):
                self._tell(click.where, text)
                current = self.runner.get_run(click.run_id, history=False)
                if current is not None:  # this copy of the message may still show its buttons
                    self._show_closed(click.where, current, done_text(what, by, at))
            case _:
                self._tell(click.where, text)

    def _run_command(self, click: RunClick) -> RunOutcome:
        who, run_id, shown = click.where.user, click.run_id, click.shown_version
        match click.action:
            case blocks.EXTEND_ACTION:
                return self.runner.extend(run_id, who, shown_version=shown)
            case blocks.CLOSE_ACTION:
                return self.runner.cancel(run_id, who, reason=f"closed by {who}", shown_version=shown)
            case blocks.RETRY_ACTION:
                return self.runner.retry(run_id, who, shown_version=shown)
            case blocks.RECONCILE_DONE_ACTION | blocks.RECONCILE_RETRY_ACTION | blocks.RECONCILE_ABORT_ACTION:
                return self.runner.reconcile(run_id, who, click.action.rsplit(".", 1)[1], shown_version=shown)
            case _:
                return Refused("unknown button")

    def _pressed_text(self, click: RunClick) -> str:
        text = done_text(_REQUEST_OF_BUTTON[click.action], click.where.user, None)
        running = self._running_text(click.run_id) if click.action == blocks.CLOSE_ACTION else None
        return f"{text} {running}" if running else text

    def _run_outcome(self, outcome: RunOutcome, run_id: str, done_text: Callable[[], str]) -> str:
        """What to say about a run command; on `Done` the run goes to the workers to apply it."""
        match outcome:
            case Done():
                text = done_text()  # before the workers start: it may say what is running now
                self.workers.submit(run_id)
                return text
            case AlreadyDone(what=what, by=by, at=at):
                return already_text(what, by, at)
            case Refused(reason=reason) | NotAllowed(reason=reason):
                return not_done_text(reason)
            case Missing():
                return no_visible_run(run_id)
            case _:
                assert_never(outcome)

    def _show_closed(self, where: Where, run: RunRecord, note: str) -> None:
        if not (where.channel and where.message_ts):
            return
        try:
            self.notifier.update(where.channel, where.message_ts, messages.run_closed_message(run, note))
        except SlackApiError as exc:
            log.warning("run %s: could not take the buttons off its message: %s", run.run_id, exc)

    # -- App Home -----------------------------------------------------------------------------------

    def on_home_opened(self, event: dict[str, Any]) -> None:
        viewer = event.get("user")
        if event.get("tab", "home") == "home" and isinstance(viewer, str):
            self.publish_home(viewer)

    def publish_home(self, viewer: str) -> None:
        view = messages.home_view(viewer, self.runner.waiting_on(viewer), self.runner.runs_for(viewer),
                                  displays={name: self.notifier.display(name) for name in self.notifier.tools})
        self.notifier.client.views_publish(user_id=viewer, view=view)

    # -- telling the person who clicked --------------------------------------------------------------

    def _refuse_malformed(self, body: Any, problem: Any) -> None:
        reason = problem.reason if isinstance(problem, Malformed) else "this button does not fit here"
        clicker = (body.get("user") or {}).get("id") if isinstance(body, dict) else None
        log.warning("click not understood: %s", reason)
        if is_slack_user(clicker):
            self._tell(Where(user=clicker), f"Sorry, I could not read that click: {safe(reason, 200)}.")

    def _tell(self, where: Where, text: str, modal: str | None = None) -> None:
        """An ephemeral answer: in the `modal` clicked in, via response_url, ephemeral in the channel, or a DM."""
        message = notice(text)
        try:
            if modal:
                self.notifier.client.views_update(view_id=modal, view=argument_blocks.outcome_modal(text))
            elif where.response_url:
                WebhookClient(where.response_url).send(
                    text=message.text, blocks=message.blocks, response_type="ephemeral", replace_original=False)
            elif where.channel:
                self.notifier.client.chat_postEphemeral(channel=where.channel, user=where.user, **message.as_kwargs())
            else:
                self.notifier.client.chat_postMessage(channel=where.user, **message.as_kwargs())
        except SlackApiError as exc:
            log.warning("could not tell %s: %s", where.user, exc.response.get("error"))
