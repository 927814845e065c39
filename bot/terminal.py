"""The terminal as a place where runs are shown and decided: a console, a `Notifier` for it, and
the loop that executes a run and asks the person at the keyboard whatever it waits for.

Plain text, ASCII only, so the output reads the same in a pipe, a log file or a terminal.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, TextIO

import click

from signoff.bot.arguments import ToolDisplay, argument_lines
from signoff.bot.words import budget_figures, unlimited_figures
from signoff.runtime.records import (
    AlreadyDecided,
    AlreadyDone,
    ApprovalRecord,
    Decided,
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
from signoff.runtime.state import DEFAULT_REDACT_KEYS, redact
from signoff.tools.base import Tool

MAX_INVALID_ANSWERS = 3
_WIDTH = 78
_RESULT_CHARS = 300


EXIT_OK, EXIT_ERROR, EXIT_PAUSED, EXIT_STOPPED = 0, 1, 3, 4


class RunBusy(click.ClickException):
    """Another worker holds the run's lease."""


class Console:
    """Lines out, answers in (one a line). `quiet` keeps everything but the outcome line off the output."""

    def __init__(self, out: TextIO, answers: TextIO, *, quiet: bool = False, echo_answers: bool = False) -> None:
        self.out, self.answers, self.quiet = out, answers, quiet
        self.echo_answers = echo_answers
        """Repeat piped answers after their prompt, so a transcript shows what was decided."""

    def say(self, text: str = "") -> None:
        if not self.quiet:
            click.echo(text, file=self.out)

    def outcome(self, text: str) -> None:
        click.echo(text, file=self.out)

    def read(self, prompt: str) -> str | None:
        """One answer line, stripped; None at end of input."""
        if not self.quiet:
            click.echo(prompt, file=self.out, nl=False)
        line = self.answers.readline()
        if not line:
            self.say("")
            return None
        answer = line.strip()
        if self.echo_answers and not self.quiet:
            click.echo(answer, file=self.out)
        return answer

    def choose(self, prompt: str, choices: Mapping[str, str]) -> str | None:
        """One of `choices` (answer letter -> meaning) by its letter or its word; None at end of input.

        Only a few unusable answers are tolerated, so `yes | signoff ...` cannot loop forever.
        """
        accepted = {**choices, **{v: v for v in choices.values()}}
        for _ in range(MAX_INVALID_ANSWERS):
            answer = self.read(prompt)
            if answer is None:
                return None
            if answer.lower() in accepted:
                return accepted[answer.lower()]
            self.say(f"  please answer {', '.join(choices)}")
        self.say(f"  no usable answer after {MAX_INVALID_ANSWERS} tries; stopping here")
        return None


class TerminalNotifier:
    """`runtime.ports.Notifier` for a person at a terminal: progress per step, proposals as Slack shows them."""

    def __init__(self, console: Console, tools: Mapping[str, Tool], *,
                 redact_keys: Iterable[str] = DEFAULT_REDACT_KEYS,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.console = console
        self.tools = tools
        self.redact_keys = frozenset(redact_keys)
        self.clock = clock
        self.announced: set[str] = set()
        self.shown: set[str] = set()
        """Approvals whose card this process has printed."""

    def run_started(self, run: RunRecord) -> dict[str, Any] | None:
        # The runner announces a run on every `execute` until a Slack thread exists; say it once.
        if run.run_id not in self.announced:
            self.announced.add(run.run_id)
            self.console.say(f"run {run.run_id} by {run.requester}: {one_line(run.goal, 200)}")
            self.console.say(f"  budget: {plain_budget_line(run.state)}")
        return None

    def approval_requested(self, run: RunRecord, approval: ApprovalRecord) -> dict[str, Any] | None:
        self.show_approval(run, approval)
        # Recorded as the approval's message, so no Slack process re-posts it as "never shown".
        return {"shown_in": "terminal", "to": run.requester}

    def show_approval(self, run: RunRecord, approval: ApprovalRecord) -> None:
        """Print the approval card once per process."""
        if approval.approval_id in self.shown:
            return
        self.shown.add(approval.approval_id)
        display = self.display(approval.tool)
        self.console.say(approval_card(run, approval, self.tools.get(approval.tool), display.secret_names,
                                       self.clock()))

    def approval_decided(self, run: RunRecord, approval: ApprovalRecord) -> None:
        verb = "approved" if approval.status in ("approved", "consumed") else approval.status
        note = f": {approval.note}" if approval.note else ""
        self.console.say(f"  {verb} by {approval.decided_by}{note}")

    def approval_expired(self, run: RunRecord, approval: ApprovalRecord) -> None:
        self.console.say(f"  the approval for {approval.tool} ({approval.key}) expired; nothing was executed")

    def tool_result(self, run: RunRecord, entry: dict[str, Any]) -> None:
        call = find_call(run.state.get("history", []), entry)
        for line in step_lines(call, entry, self.display(entry.get("tool", "")).secret_names):
            self.console.say(line)

    def run_finished(self, run: RunRecord) -> None:
        self.console.say(f"  finished after {run.state.get('steps', 0)} step(s); {plain_budget_line(run.state)}")

    def run_stopped(self, run: RunRecord) -> None:
        reason = (run.stop or {}).get("reason", "")
        self.console.say(f"  stopped: {run.status}{': ' + reason if reason else ''}")

    def display(self, tool_name: str) -> ToolDisplay:
        """How the person at the keyboard is shown `tool_name`, as Slack shows it to approvers."""
        return ToolDisplay.of(self.tools.get(tool_name), self.redact_keys)


# -- driving a run in the terminal ------------------------------------------------------------

def drive(runner: Runner, run_id: str, console: Console, notifier: TerminalNotifier, user: str, *,
          settle: bool) -> RunRecord:
    """Execute the run, deciding what it waits for here, until it ends or the person quits.

    With `settle`, a run that stopped (budget, failure, unknown outcome) is offered extend, retry
    or reconcile; otherwise only approvals are asked.
    """
    stalled_at: int | None = None
    while True:
        runner.execute(run_id)
        run = runner.get_run(run_id)
        assert run is not None, "runs are never deleted"
        if run.status in ("idle", "running"):
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
    """Ask for a decision on `approval` and record it; False if the person quit."""
    notifier.show_approval(run, approval)
    if approval.expires_at <= runner.store.now():  # the database's clock, as for every expiry
        # Deciding cannot win any more; the store marks it expired and the run ends as expired.
        runner.decide(approval.approval_id, approval.digest, user, approved=False)
        return True
    choice = console.choose("Approve [a], deny [d] or quit [q]? ", {"a": "approve", "d": "deny", "q": "quit"})
    if choice in (None, "quit"):
        return False
    note = ""
    if choice == "deny":
        note = console.read("Reason (the model is told): ") or ""
    match runner.decide(approval.approval_id, approval.digest, user, approved=choice == "approve", note=note):
        case Decided() | Expired():
            pass  # the notifier has said so
        case AlreadyDecided(approval=earlier):
            console.say(f"  already {earlier.status} by {earlier.decided_by}")
        case NotAllowed(reason=reason) | Mismatch(reason=reason):
            raise click.ClickException(reason)
        case Missing(what=what):
            raise click.ClickException(f"the {what} disappeared while you were deciding")
    return True


def settle_here(runner: Runner, run: RunRecord, console: Console, notifier: TerminalNotifier, user: str) -> bool:
    """Offer what fits a stopped run (extend, retry, reconcile); False if the person quit."""
    stop = run.stop or {}
    console.say(f"run {run.run_id} is {run.status}: {stop.get('reason', '')}")
    if stop.get("detail"):
        console.say(f"  {one_line(stop['detail'], 300)}")
    console.say(f"  budget: {plain_budget_line(run.state)}")
    match run.status:
        case "budget_exhausted":
            limit = stop.get("budget", "max_steps")
            choice = console.choose(f"Extend {limit} [e] or quit [q]? ", {"e": "extend", "q": "quit"})
            outcome = runner.extend(run.run_id, user) if choice == "extend" else None
        case "stalled":
            choice = console.choose("Let it go on [e] or quit [q]? ", {"e": "extend", "q": "quit"})
            outcome = runner.extend(run.run_id, user) if choice == "extend" else None
        case "failed":
            choice = console.choose("Retry from the last checkpoint [r] or quit [q]? ", {"r": "retry", "q": "quit"})
            outcome = runner.retry(run.run_id, user) if choice == "retry" else None
        case _:
            outcome = reconcile_here(runner, run, console, notifier, user)
    match outcome:
        case None:
            return False
        case Done():
            return True
        case Refused(reason=reason) | NotAllowed(reason=reason):
            console.say(f"  not possible: {reason}")
            return False
        case AlreadyDone(what=what, by=by):
            console.say(f"  already done: {what} by {by}")
            return True
        case Missing(what=what):
            raise click.ClickException(f"the {what} disappeared")
    return False


def reconcile_here(runner: Runner, run: RunRecord, console: Console, notifier: TerminalNotifier,
                   user: str) -> RunOutcome | None:
    pending = run.state.get("pending") or {}
    tool = pending.get("tool", "")
    # Retry runs the call again: it is shown in full, as an approval card shows it.
    console.say(f"  the call: {tool} (key {pending.get('key')}), its arguments in full:")
    for line in argument_lines(pending.get("args", {}), notifier.display(tool)):
        console.say(f"    {line}")
    console.say("  it may or may not have taken effect; check, then say what happened")
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


def finish(console: Console, run: RunRecord, hint: str) -> int:
    """Print the outcome line; return the exit code for the run's status."""
    console.outcome(outcome_line(run, hint))
    return exit_code(run.status)


def outcome_line(run: RunRecord, hint: str) -> str:
    reason = (run.stop or {}).get("reason", "")
    match run.status:
        case "done":
            return f"{run.run_id} done: {run.answer}"
        case "awaiting_approval":
            return f"{run.run_id} awaiting_approval (resume with: {hint})"
        case "budget_exhausted":
            return f"{run.run_id} budget_exhausted: {reason} (extend with: {hint})"
        case "stalled":
            return f"{run.run_id} stalled: {reason} (let it go on with: {hint})"
        case "failed":
            return f"{run.run_id} failed: {reason} (retry with: {hint})"
        case "needs_reconciliation":
            return f"{run.run_id} needs_reconciliation: {reason} (settle with: {hint})"
        case status:
            return f"{run.run_id} {status}: {reason}" if reason else f"{run.run_id} {status}"


def exit_code(status: str) -> int:
    if status == "done":
        return EXIT_OK
    return EXIT_PAUSED if status == "awaiting_approval" else EXIT_STOPPED


# -- rendering, pure ----------------------------------------------------------------------------


def one_line(text: Any, limit: int) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def plain_budget_line(state: Mapping[str, Any]) -> str:
    """`words.budget_figures` and `words.unlimited_figures` in ASCII, e.g. `steps 3/8, tool calls 2`."""
    return ", ".join(budget_figures(state) + unlimited_figures(state))


def find_call(history: Iterable[Mapping[str, Any]], result: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The assistant entry that asked for the call a tool entry answers."""
    for entry in history:
        if (entry.get("role") == "assistant" and "tool" in entry and entry.get("step") == result.get("step")
                and entry.get("call_id") == result.get("call_id")):
            return entry
    return None


def step_lines(call: Mapping[str, Any] | None, entry: Mapping[str, Any], secret_keys: frozenset[str]) -> list[str]:
    """`step 2  lookup_orders {...}` then `-> result` or `x error`, secrets redacted."""
    lines = []
    if call is not None and call.get("text"):
        lines.append(f"  step {entry.get('step')}  model: {one_line(call['text'], 200)}")
    args = as_text(redact(call.get("args", {}), secret_keys)) if call is not None else ""
    lines.append(f"  step {entry.get('step')}  {entry.get('tool')} {one_line(args, 200)}")
    if "error" in entry:
        lines.append(f"          x {one_line(entry['error'], _RESULT_CHARS)}")
    else:
        lines.append(f"          -> {one_line(as_text(redact(entry.get('result'), secret_keys)), _RESULT_CHARS)}")
    return lines


def approval_card(run: RunRecord, approval: ApprovalRecord, tool: Tool | None, secret_keys: frozenset[str],
                  now: datetime) -> str:
    """The approval request as Slack shows it: goal, requester, tool, arguments, key, budget, expiry.

    The arguments are `argument_lines`, the same lines every Slack surface shows, never shortened.
    """
    description = one_line(tool.description, 300) if tool is not None else "(tool not loaded here)"
    rows = [
        ("Goal", one_line(run.goal, 300)),
        ("Requested by", run.requester),
        ("Tool", f"{approval.tool}: {description}"),
        ("Key", approval.key),
        ("Budget used", plain_budget_line(run.state)),
        ("Expires", f"{approval.expires_at:%Y-%m-%d %H:%M:%S} UTC ({until(approval.expires_at, now)})"),
    ]
    call = next((e for e in run.state.get("history", []) if e.get("role") == "assistant"
                 and e.get("step") == approval.step and "tool" in e), None)
    if call is not None and call.get("text"):
        rows.insert(2, ("Model says", one_line(call["text"], 300)))
    lines = [f"+-- Approval needed: {approval.tool} ".ljust(_WIDTH, "-")]
    lines += [f"| {name + ':':<14}{value}" for name, value in rows[:-3]]
    lines.append("| Arguments:")
    lines += ["|   " + line for line in argument_lines(approval.args, ToolDisplay.of(tool, secret_keys)) or ["(none)"]]
    lines += [f"| {name + ':':<14}{value}" for name, value in rows[-3:]]
    lines.append("+" + "-" * (_WIDTH - 1))
    return "\n".join(line.rstrip() for line in lines)


def until(moment: datetime, now: datetime) -> str:
    seconds = int((moment - now).total_seconds())
    if seconds <= 0:
        return "expired"
    hours, rest = divmod(seconds, 3600)
    minutes = rest // 60
    if hours:
        return f"in {hours}h{minutes:02d}m"
    return f"in {minutes}m" if minutes else f"in {seconds}s"
