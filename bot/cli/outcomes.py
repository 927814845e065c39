"""How a run ends in the terminal: its outcome line, with what to type next, and the exit code."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # `signoff --help` imports this module (for the exit codes), and none of the runtime
    from signoff.bot.cli.console import Console
    from signoff.runtime.records import RunRecord

EXIT_OK, EXIT_ERROR, EXIT_PAUSED, EXIT_STOPPED, EXIT_CALLS_FAILED = 0, 1, 3, 4, 5
EXIT_INTERRUPTED = 130
"""Ctrl-C, as shells report a process ended by SIGINT."""


class Interrupted(Exception):
    """Ctrl-C while a run was being decided in the terminal; `resume` is the command that goes on with it."""

    def __init__(self, resume: str) -> None:
        super().__init__(resume)
        self.resume = resume


def finish(console: Console, run: RunRecord, hint: str, executions: Iterable[Mapping[str, Any]] = ()) -> int:
    """Print the outcome line; return the exit code for the run's status.

    `executions` are the run's side effects that were let run (by a person or a rule); a run that
    is done although every one of them failed says so, and exits `EXIT_CALLS_FAILED`."""
    failed, ran = failed_calls(executions)
    console.outcome(outcome_line(run, hint, failed=failed, ran=ran))
    if run.status == "done" and ran and failed == ran:
        return EXIT_CALLS_FAILED
    return exit_code(run.status)


def failed_calls(executions: Iterable[Mapping[str, Any]]) -> tuple[int, int]:
    """(failed, all) of a run's executed side effects."""
    statuses = [execution.get("status") for execution in executions]
    return statuses.count("failed"), len(statuses)


def outcome_line(run: RunRecord, hint: str, *, failed: int = 0, ran: int = 0) -> str:
    reason = (run.stop or {}).get("reason", "")
    match run.status:
        case "done" if failed:
            calls = "call" if ran == 1 else "calls"
            return f"{run.run_id} done, but {failed} of {ran} approved {calls} failed: {run.answer}"
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
