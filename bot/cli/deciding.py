"""Deciding in the terminal: execute a run and ask the person at the keyboard whatever it waits for
(an approval, or what to do with a run that stopped)."""

from __future__ import annotations

import json
from typing import Any

import click

from signoff.bot.arguments import argument_lines
from signoff.bot.cli.console import MAX_INVALID_ANSWERS, Console
from signoff.bot.cli.notifier import TerminalNotifier
from signoff.bot.cli.rendering import one_line
from signoff.bot.words import (
    approval_progress,
    approval_words,
    capitalized,
    not_done,
    plain_budget_line,
    request_words,
    who_decides,
)
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
    RunOutcome,
    RunRecord,
)
from signoff.runtime.runner import Runner
from signoff.runtime.schema import ACTIVE

YES_NO = {"y": "approve", "yes": "approve", "n": "deny", "no": "deny"}
"""What people type at a yes-or-no question, taken at the approval prompt as approve or deny."""


class RunBusy(click.ClickException):
    """Another worker holds the run's lease."""


def drive(runner: Runner, run_id: str, console: Console, notifier: TerminalNotifier, user: str, *,
          settle: bool) -> RunRecord:
    """Execute the run, deciding what it waits for here, until it ends or the person quits.

    With `settle`, a run that stopped (budget, failure, unknown outcome) is offered extend, retry
    or reconcile; otherwise only approvals are asked.
    """
    stalled_at: int | None = None
    before = runner.get_run(run_id)
    if before is not None:
        notifier.skip_earlier(before)
    while True:
        runner.execute(run_id)
        run = runner.get_run(run_id)
        assert run is not None, "runs are never deleted"
        if run.status in ACTIVE:
            until = f" until {run.lease_expires_at:%H:%M:%S} UTC" if run.lease_expires_at else ""
            raise RunBusy(f"run {run_id} is being run by {run.lease_owner or 'another worker'}{until}; "
                          "try again later")
        if run.version == stalled_at:
            return run  # nothing moved since the last round: stop rather than spin
        stalled_at = run.version
        match run.status:
            case "awaiting_approval":
                approval = runner.pending_approval(run_id)
                if approval is not None and not decide_here(runner, run, approval, console, notifier, user):
                    return run
            case "budget_exhausted" | "stalled" | "failed" | "needs_reconciliation" if settle:
                if not settle_here(runner, run, console, notifier, user):
                    return run
            case _:
                return run


def decide_here(runner: Runner, run: RunRecord, approval: ApprovalRecord, console: Console,
                notifier: TerminalNotifier, user: str) -> bool:
    """Ask for a decision on `approval` and record it; False if the run stays paused: the person
    quit, may not decide it, or its rule needs more approvals than theirs."""
    notifier.show_approval(run, approval)
    if approval.expires_at <= runner.store.now():  # the database's clock, as for every expiry
        # Deciding cannot win any more; the store marks it expired and the run ends as expired.
        runner.decide(approval.approval_id, approval.digest, user, approved=False)
        return True
    if any(vote.user == user for vote in approval.votes):  # e.g. resumed by the one who approved
        console.say(f"  you approved it already ({approval_progress(approval)}); {still_needed(approval)}")
        return False
    refusal = runner.approval_refusal(user, run, approval)
    if refusal is not None:
        console.say(f"  {not_done(refusal)}; the run stays paused")
        return False
    answer = ask_decision(console, approval)
    if answer is None:
        return False
    approved, note = answer
    return told(runner.decide(approval.approval_id, approval.digest, user, approved=approved, note=note), console)


def told(outcome: DecisionOutcome, console: Console) -> bool:
    """Say what a decision came to, where the notifier has not; False if the run stays paused."""
    match outcome:
        case Decided() | Expired():
            pass  # the notifier has said so
        case Counted(approval=counted):  # the notifier has said how far the quorum is
            console.say(f"  {capitalized(still_needed(counted))}")
            return False
        case AlreadyCounted(approval=counted):
            console.say(f"  you approved it already ({approval_progress(counted)}); {still_needed(counted)}")
            return False
        case AlreadyDecided(approval=earlier):
            console.say(f"  already {approval_words(earlier.status, earlier.decided_by)}")
        case NotAllowed(reason=reason):
            console.say(f"  {not_done(reason)}; the run stays paused")
            return False
        case Mismatch(reason=reason):
            raise click.ClickException(reason)
        case Missing(what=what):
            raise click.ClickException(f"the {what} disappeared while you were deciding")
    return True


def ask_decision(console: Console, approval: ApprovalRecord) -> tuple[bool, str] | None:
    """Approve (True) or deny (False, with the reason the model is told); None if the person quit.

    A rule with `confirm` has the person type the tool's name to approve; anything else cancels
    back to the question, a few times at most, so piped answers cannot loop forever.
    """
    confirm = bool((approval.asked or {}).get("confirm"))
    for _ in range(MAX_INVALID_ANSWERS):
        choice = console.choose("Approve [a], deny [d] or quit [q]? ", {"a": "approve", "d": "deny", "q": "quit"},
                                aliases=YES_NO)
        if choice in (None, "quit"):
            return None
        if choice == "deny":
            return False, console.read("Reason (the model is told): ") or ""
        if not confirm:
            return True, ""
        rule = f"rule {approval.rule}" if approval.rule else "the policy"
        typed = console.read(f"{capitalized(rule)} asks you to confirm: type {approval.tool} to approve it, "
                             "anything else cancels: ")
        if typed == approval.tool:
            return True, ""
        console.show("  cancelled; nothing was decided")
    console.show(f"  not confirmed after {MAX_INVALID_ANSWERS} tries; stopping here")
    return None


def still_needed(approval: ApprovalRecord) -> str:
    """What its quorum still needs, e.g. `this rule (big-refunds) needs 1 more approval from S0FINANCE,
    in Slack. The run stays paused.`"""
    whose = f"this rule ({approval.rule})" if approval.rule else "the policy's defaults"
    missing = approval.quorum - len(approval.approved_by)
    # `who_decides` leads with the count: "1 approval from S0FINANCE" becomes "1 more approval from ...".
    count, _, rest = who_decides({**(approval.asked or {}), "quorum": missing, "rule": None}).partition(" ")
    return f"{whose} needs {count} more {rest}, in Slack. The run stays paused."


def settle_here(runner: Runner, run: RunRecord, console: Console, notifier: TerminalNotifier, user: str) -> bool:
    """Offer what fits a stopped run (extend, retry, reconcile); False if the person quit."""
    stop = run.stop or {}
    console.show(f"run {run.run_id} is {run.status}: {stop.get('reason', '')}")
    if stop.get("detail"):
        console.show(f"  {one_line(stop['detail'], 300)}")
    console.show(f"  budget: {plain_budget_line(run.state)}")
    match offer(runner, run, console, notifier, user):
        case None:
            return False
        case Done():
            return True
        case Refused(reason=reason) | NotAllowed(reason=reason):
            console.say(f"  {not_done(reason)}")
            return False
        case AlreadyDone(what=what, by=by):
            console.say(f"  already {request_words(what)[0]} by {by}; nothing changed")
            return True
        case Missing(what=what):
            raise click.ClickException(f"the {what} disappeared")
    return False


def offer(runner: Runner, run: RunRecord, console: Console, notifier: TerminalNotifier,
          user: str) -> RunOutcome | None:
    """Ask what to do with a stopped run and ask the runner for it; None if the person quit."""
    match run.status:
        case "budget_exhausted":
            limit = (run.stop or {}).get("budget", "max_steps")
            choice = console.choose(f"Extend {limit} [e] or quit [q]? ", {"e": "extend", "q": "quit"})
            return runner.extend(run.run_id, user) if choice == "extend" else None
        case "stalled":
            choice = console.choose("Let it go on [e] or quit [q]? ", {"e": "extend", "q": "quit"})
            return runner.extend(run.run_id, user) if choice == "extend" else None
        case "failed":
            choice = console.choose("Retry from the last checkpoint [r] or quit [q]? ", {"r": "retry", "q": "quit"})
            return runner.retry(run.run_id, user) if choice == "retry" else None
        case _:
            return reconcile_here(runner, run, console, notifier, user)


def reconcile_here(runner: Runner, run: RunRecord, console: Console, notifier: TerminalNotifier,
                   user: str) -> RunOutcome | None:
    pending = run.state.get("pending") or {}
    tool = pending.get("tool", "")
    # Retry runs the call again: it is shown in full, as an approval card shows it.
    console.show(f"  the call: {tool} (key {pending.get('key')}), its arguments in full:")
    for line in argument_lines(pending.get("args", {}), notifier.display(tool)):
        console.show(f"    {line}")
    console.show("  it may or may not have taken effect; check, then say what happened")
    # Whole words: claiming a side effect happened, or running it again, must not be one stray letter.
    choice = console.choose("Type done (it happened), retry (run it again) or abort (end the run), or q to quit: ",
                            {"done": "done", "retry": "retry", "abort": "abort", "q": "quit"})
    if choice in (None, "quit"):
        return None
    result: Any = None
    if choice == "done":
        text = console.read("Its result, for the model (JSON or text, empty for none): ") or ""
        result = _json_or_text(text)
    return runner.reconcile(run.run_id, user, choice, result, note="settled in the terminal")


def _json_or_text(text: str) -> Any:
    if not text:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text
