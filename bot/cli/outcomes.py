"""How a run ends in the terminal: its outcome line, with what to type next, and the exit code."""

from __future__ import annotations

from signoff.bot.cli.console import Console
from signoff.runtime.records import RunRecord

EXIT_OK, EXIT_ERROR, EXIT_PAUSED, EXIT_STOPPED = 0, 1, 3, 4


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
