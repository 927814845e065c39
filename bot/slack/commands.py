"""`/signoff ...`: start a run, or say where runs stand; each answered in the command's ack."""

from __future__ import annotations

from typing import Any, assert_never

from slack_bolt import Ack

from signoff.bot.slack import command_replies
from signoff.bot.slack.blocks import Message, notice, safe
from signoff.bot.slack.payloads import (
    CancelRun,
    Command,
    ListRuns,
    Malformed,
    ShowHelp,
    ShowStatus,
    StartRun,
    parse_command,
)
from signoff.bot.slack.replies import no_visible_run
from signoff.bot.slack.run_buttons import run_outcome_text, running_text
from signoff.bot.slack.seen import SeenTriggers
from signoff.bot.slack.workers import Workers
from signoff.runtime.records import RunRecord
from signoff.runtime.runner import Runner
from signoff.runtime.schema import TERMINAL

NO_RUNS = "You have no runs yet. Start one with `/signoff <goal>`."
NOTHING_TO_CANCEL = "You have no run in progress to cancel."


class Commands:
    """The slash command's listener; `seen` keeps a replayed command from starting a second run."""

    def __init__(self, runner: Runner, workers: Workers, seen: SeenTriggers) -> None:
        self.runner, self.workers, self.seen = runner, workers, seen

    def on_command(self, ack: Ack, body: dict[str, Any]) -> None:
        command = parse_command(body)
        if isinstance(command, Malformed):
            ack(text=f"Sorry, Slack sent a command I could not read: {command.reason}.")
            return
        bare = _bare_subcommand(body)
        if isinstance(command.request, ShowHelp) and bare is not None:
            reply, started = self._latest(bare, command.where.user), None
        else:
            reply, started = self._answer(command)
        ack(**reply.as_kwargs())
        if started is not None:
            # Only after the answer is on its way: a replica dying in the run's first step must
            # not also swallow the "Started run ..." reply.
            self.workers.submit(started.run_id)

    def _answer(self, command: Command) -> tuple[Message, RunRecord | None]:
        """The reply to the command, and the run it started (to hand to a worker once replied)."""
        who = command.where.user
        match command.request:
            case StartRun(goal=goal):
                return self._start(command, goal)
            case ShowStatus(run_id=run_id):
                run = self._visible_run(run_id, who)
                if run is None:
                    return notice(no_visible_run(run_id)), None
                return command_replies.status_message(run, self.runner.pending_approval(run_id)), None
            case ListRuns():
                return command_replies.list_message(self.runner.runs_for(who),
                                                    self.runner.waiting_on(who)), None
            case CancelRun(run_id=run_id):
                return self._cancel(run_id, who), None
            case ShowHelp():
                return command_replies.help_message(), None
            case _:
                assert_never(command.request)

    def _latest(self, subcommand: str, who: str) -> Message:
        """`/signoff status` or `/signoff cancel` without a run: about the person's latest run (to
        cancel: the latest that has not ended)."""
        runs = self.runner.runs_for(who)
        if subcommand == "cancel":
            going = next((run for run in runs if run.status not in TERMINAL), None)
            return self._cancel(going.run_id, who) if going is not None else notice(NOTHING_TO_CANCEL)
        latest = self._visible_run(runs[0].run_id, who) if runs else None
        if latest is None:
            return notice(NO_RUNS)
        return command_replies.status_message(latest, self.runner.pending_approval(latest.run_id))

    def _visible_run(self, run_id: str, who: str) -> RunRecord | None:
        run = self.runner.get_run(run_id, history=False)
        return run if run is not None and self.runner.visibility_refusal(who, run) is None else None

    def _cancel(self, run_id: str, who: str) -> Message:
        if self._visible_run(run_id, who) is None:
            return notice(no_visible_run(run_id))
        outcome = self.runner.cancel(run_id, who, reason=f"cancelled by {who} with /signoff cancel")
        return notice(run_outcome_text(outcome, run_id, lambda: self._cancelling_text(run_id), self.workers))

    def _cancelling_text(self, run_id: str) -> str:
        running = running_text(self.runner, run_id)
        return f"Cancelling run `{safe(run_id, 80)}`" + (f": {running}" if running else
                                                         "; nothing pending will be executed.")

    def _start(self, command: Command, goal: str) -> tuple[Message, RunRecord | None]:
        """The reply to `/signoff <goal>`, and the run it started, if it started one (held for
        this replica's workers, which drive it next)."""
        where = command.where
        earlier = self.seen.claim(where.trigger_id)
        if earlier is not None:  # a replay of a command we already took
            return notice(f"Already started as run `{safe(earlier, 80)}`." if earlier else "Already starting."), None
        try:
            # The trigger_id makes a replay that lands on another replica return the same run.
            origin = {"channel": where.channel, "team": command.team,
                      **({"domain": command.team_domain} if command.team_domain else {})}
            run = self.runner.start_run(goal, where.user, origin=origin,
                                        request_id=where.trigger_id or None, drive=True)
        except ValueError as exc:
            self.seen.forget(where.trigger_id)
            return notice(f"Could not start a run: {safe(exc, 300)}"), None
        self.seen.settle(where.trigger_id, run.run_id)
        return command_replies.started_message(run), run


def _bare_subcommand(body: dict[str, Any]) -> str | None:
    """`status` or `cancel` when the command is that one word alone (which `parse_command` reads as
    a request for help): it then means the person's latest run."""
    text = body.get("text")
    words = text.split() if isinstance(text, str) else []
    return words[0].lower() if len(words) == 1 and words[0].lower() in ("status", "cancel") else None
