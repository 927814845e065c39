"""Deciding in the terminal: execute a run and ask the person at the keyboard whatever it waits for
(an approval, which they may also edit or approve allowing similar calls, or what to do with a run
that stopped)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import click

from signoff.bot.arguments import ToolDisplay, argument_lines, ordered
from signoff.bot.cli.console import MAX_INVALID_ANSWERS, Console
from signoff.bot.cli.notifier import TerminalNotifier
from signoff.bot.cli.rendering import one_line
from signoff.bot.words import (
    allowing_similar,
    approval_progress,
    approval_words,
    capitalized,
    grant_offer,
    not_done,
    plain_budget_line,
    request_words,
    similar_words,
    who_decides,
)
from signoff.runtime.approval import has_voted
from signoff.runtime.durations import spoken
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
from signoff.tools.base import Tool

YES_NO = {"y": "approve", "yes": "approve", "n": "deny", "no": "deny"}
"""What people type at a yes-or-no question, taken at the approval prompt as approve or deny."""


class RunBusy(click.ClickException):
    """Another worker holds the run's lease."""


@dataclass(frozen=True)
class Approve:
    similar: bool = False
    """Approve and allow similar calls, as the approval's rule offers."""


@dataclass(frozen=True)
class Deny:
    note: str


@dataclass(frozen=True)
class EditTo:
    """Change the call's arguments to `args` (it is then asked about afresh)."""

    args: dict[str, Any]


Answer = Approve | Deny | EditTo


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
            case "expired" if settle and run.state.get("pending"):  # nobody decided its call in time
                if not settle_here(runner, run, console, notifier, user):
                    return run
            case _:
                return run


def decide_here(runner: Runner, run: RunRecord, approval: ApprovalRecord, console: Console,
                notifier: TerminalNotifier, user: str) -> bool:
    """Ask for a decision on `approval` and record it; False if the run stays paused: the person
    quit, may not decide it, or its rule needs more approvals than theirs."""
    notifier.show_approval(run, approval)
    if runner.unopenable(approval, approval.digest) == "expired":
        # Deciding cannot win any more; the store marks it expired and the run ends as expired.
        runner.decide(approval.approval_id, approval.digest, user, approved=False)
        return True
    if has_voted(approval, user):  # e.g. resumed by the one who approved
        console.say(f"  you approved it already ({approval_progress(approval)}); {still_needed(approval)}")
        return False
    refusal = runner.approval_refusal(user, run, approval)
    if refusal is not None:
        console.say(f"  {not_done(refusal)}; the run stays paused")
        return False
    for _ in range(MAX_INVALID_ANSWERS):
        match ask_decision(console, approval, notifier.display(approval.tool),
                           text_arguments(notifier.tools.get(approval.tool))):
            case None:
                return False
            case Approve(similar=similar):
                return told(runner.decide(approval.approval_id, approval.digest, user, approved=True, grant=similar),
                            console)
            case Deny(note=note):
                return told(runner.decide(approval.approval_id, approval.digest, user, approved=False, note=note),
                            console)
            case EditTo(args=args):
                match runner.edit(approval.approval_id, approval.digest, user, args):
                    case Done():  # the notifier said so, and the next round asks about the edited call
                        return True
                    case Refused(reason=reason):  # the tool or the policy would not take it: ask again
                        console.show(f"  {not_done(reason)}")
                    case NotAllowed(reason=reason):
                        console.say(f"  {not_done(reason)}; the run stays paused")
                        return False
                    case AlreadyDone() | Missing():
                        return True  # the run moved on meanwhile: the next round shows where it is
    console.show(f"  no edit taken after {MAX_INVALID_ANSWERS} tries; stopping here")
    return False


def told(outcome: DecisionOutcome, console: Console) -> bool:
    """Say what a decision came to, where the notifier has not; False if the run stays paused."""
    match outcome:
        case Decided(approval=decided, grant=grant) if grant is not None:
            offer = grant_offer(decided.asked) or {}
            console.say(f"  {allowing_similar(offer)}: {similar_words(offer)} run unasked (grant {grant.grant_id})")
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


def ask_decision(console: Console, approval: ApprovalRecord, display: ToolDisplay,
                 texts: frozenset[str] | None = None) -> Answer | None:
    """Approve (alone, or allowing similar calls where the rule offers it), deny (with the reason
    the model is told) or edit the arguments; None if the person quit.

    A rule with `confirm` has the person type the tool's name to approve; anything else cancels
    back to the question, a few times at most, so piped answers cannot loop forever.
    """
    confirm = bool((approval.asked or {}).get("confirm"))
    offer = grant_offer(approval.asked)
    choices = {"a": "approve", **({"s": "similar"} if offer else {}), "d": "deny", "e": "edit", "q": "quit"}
    similar = f"approve + allow similar for {spoken(offer['for_seconds'])} [s], " if offer else ""
    for _ in range(MAX_INVALID_ANSWERS):
        choice = console.choose(f"Approve [a], {similar}deny [d], edit [e] or quit [q]? ", choices, aliases=YES_NO)
        if choice in (None, "quit"):
            return None
        if choice == "deny":
            return Deny(console.read("Reason (the model is told): ") or "")
        if choice == "edit":
            edited = ask_arguments(console, approval, display, texts)
            if edited is None:
                return None
            return EditTo(edited)
        if not confirm:
            return Approve(similar=choice == "similar")
        rule = f"rule {approval.rule}" if approval.rule else "the policy"
        typed = console.read(f"{capitalized(rule)} asks you to confirm: type {approval.tool} to approve it, "
                             "anything else cancels: ")
        if typed == approval.tool:
            return Approve(similar=choice == "similar")
        console.show("  cancelled; nothing was decided")
    console.show(f"  not confirmed after {MAX_INVALID_ANSWERS} tries; stopping here")
    return None


def ask_arguments(console: Console, approval: ApprovalRecord, display: ToolDisplay,
                  texts: frozenset[str] | None = None) -> dict[str, Any] | None:
    """The arguments as the person changes them, one at a time (Enter keeps one as it is) or all
    at once as one JSON object; None if the input ended, or nothing usable came in a few tries.

    An argument in `texts` (the tool's schema takes text there) takes what is typed as its text:
    quotes are needed only where other values are JSON. With no schema known (`texts` None), an
    argument whose value is text now is taken as text."""
    args = dict(approval.args)
    names = ordered({**dict.fromkeys(display.order), **args}, display.order)
    if not names:
        return ask_whole(console)
    console.show("  Edit the arguments: for each, Enter keeps it as it is, new text replaces text (other values "
                 "in JSON), and - leaves it out. Or type json to give them all as one JSON object.")
    shown = dict(zip(names, argument_lines({name: args.get(name) for name in names}, display), strict=True))
    for index, name in enumerate(names):
        line = shown[name] if name in args else f"{name}: (not given)"
        # Stored arguments are canonical JSON (a decimal is text there): the schema knows better.
        text = name in texts if texts is not None else isinstance(args.get(name), str)
        for _ in range(MAX_INVALID_ANSWERS):
            typed = console.read(f"    {line}\n    new value: ")
            if typed is None:
                return None
            if typed == "json" and index == 0:
                return ask_whole(console)
            if typed in ("", "-"):
                if typed == "-":
                    args.pop(name, None)
                break
            try:
                args[name] = _text(typed) if text else json.loads(typed)
                break
            except ValueError as exc:
                console.show(f'    not JSON ({exc}); text goes in quotes, e.g. "like this"')
        else:
            console.show(f"  no usable value after {MAX_INVALID_ANSWERS} tries; stopping here")
            return None
    return args


def _text(typed: str) -> str:
    """What was typed for a text argument: as typed, or unquoted if typed as a JSON string."""
    try:
        value = json.loads(typed)
    except ValueError:
        return typed
    return value if isinstance(value, str) else typed


def text_arguments(tool: Tool | None) -> frozenset[str] | None:
    """The names of the arguments `tool`'s schema says are text (a string, or a string or null);
    None if the tool is not loaded here or its schema names no arguments."""
    if tool is None:
        return None
    properties = tool.json_schema().get("properties")
    if not isinstance(properties, dict):
        return None
    return frozenset(name for name, schema in properties.items()
                     if isinstance(schema, dict) and _is_text(schema))


def _is_text(schema: dict[str, Any]) -> bool:
    kinds = schema.get("type")
    if isinstance(kinds, list):  # e.g. ["string", "null"]
        return "string" in kinds and set(kinds) <= {"string", "null"}
    if kinds is not None:
        return bool(kinds == "string")
    options = schema.get("anyOf")
    return isinstance(options, list) and bool(options) and all(
        isinstance(option, dict) and option.get("type") in ("string", "null") for option in options
    ) and any(isinstance(option, dict) and option.get("type") == "string" for option in options)


def ask_whole(console: Console) -> dict[str, Any] | None:
    """The arguments typed as one JSON object; None if the input ended or none was given."""
    for _ in range(MAX_INVALID_ANSWERS):
        typed = console.read("  All the arguments, as one JSON object: ")
        if typed is None:
            return None
        try:
            value = json.loads(typed)
        except ValueError as exc:
            console.show(f"  not JSON ({exc})")
            continue
        if isinstance(value, dict):
            return value
        console.show("  the arguments are one JSON object, {...}")
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
        case "expired":
            pending = run.state.get("pending") or {}
            console.show(f"  nobody decided {pending.get('tool')} (key {pending.get('key')}) in time; it was not run")
            choice = console.choose("Request it again (a fresh approval) [a] or quit [q]? ",
                                    {"a": "again", "q": "quit"})
            return runner.request_again(run.run_id, user) if choice == "again" else None
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
