"""The clock: APScheduler interval jobs that expire stale approvals, remind and escalate waiting
ones, follow up break-glass approvals until they are reviewed, and recover orphaned runs.

The deadlines live in the approvals table, so there is no job store and nothing to pickle; every
job is idempotent, so several replicas may run them at once.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

from apscheduler.schedulers.background import BackgroundScheduler

from signoff.bot.slack.workers import Workers
from signoff.runtime.runner import Runner

log = logging.getLogger("signoff.bot.slack.scheduler")

EXPIRE_JOB = "expire-approvals"
RECOVER_JOB = "recover-runs"
NUDGE_JOB = "nudge-approvals"
GLASS_JOB = "follow-up-break-glass"


class JobFailures:
    """Logs a job's failure with its traceback the first time, then one line per failure until it
    succeeds again: a database that is down for a minute should not fill the log with tracebacks."""

    def __init__(self, job: str) -> None:
        self.job, self.streak = job, 0

    def failed(self, error: Exception) -> None:
        self.streak += 1
        if self.streak == 1:
            log.error("%s failed", self.job, exc_info=error)
        else:
            log.error("%s failed again (%d in a row): %s: %s", self.job, self.streak, type(error).__name__,
                      str(error).splitlines()[0] if str(error) else "")

    def succeeded(self) -> None:
        if self.streak:
            log.info("%s works again after %d failure(s)", self.job, self.streak)
        self.streak = 0


def expire_approvals(runner: Runner, workers: Workers, failures: JobFailures | None = None) -> int:
    """One sweep: expire overdue approvals; the runner updates their messages, the pool ends their runs."""
    failures = failures or JobFailures(EXPIRE_JOB)
    try:
        expired = runner.expire_due(end_run=workers.submit)
    except Exception as exc:  # the next sweep tries again; one bad sweep must not stop the clock
        failures.failed(exc)
        return 0
    failures.succeeded()
    if expired:
        log.info("expired %d approval(s): %s", len(expired), ", ".join(a.approval_id for a in expired))
    return len(expired)


def nudge_approvals(runner: Runner, failures: JobFailures | None = None) -> int:
    """One sweep: remind the people of approvals whose reminder is due, and add and tell those of
    a due escalation; each is made once, whichever replica sweeps first."""
    failures = failures or JobFailures(NUDGE_JOB)
    try:
        made = runner.nudge_due()
    except Exception as exc:  # as above: log, and let the next sweep retry
        failures.failed(exc)
        return 0
    failures.succeeded()
    if made:
        log.info("reminded or escalated %d approval(s): %s", len(made),
                 ", ".join(f"{n.approval.approval_id} ({'+'.join(n.kinds)})" for n in made))
    return len(made)


def follow_up_glass(runner: Runner, failures: JobFailures | None = None) -> int:
    """One sweep: tell, remind or say overdue each break-glass whose follow-up is due, each once,
    whichever replica sweeps first."""
    failures = failures or JobFailures(GLASS_JOB)
    try:
        made = runner.glass_due()
    except Exception as exc:  # as above: log, and let the next sweep retry
        failures.failed(exc)
        return 0
    failures.succeeded()
    if made:
        log.info("followed up %d break-glass approval(s): %s", len(made),
                 ", ".join(f"{due.approval.approval_id} ({due.kind})" for due in made))
    return len(made)


def recover_runs(runner: Runner, workers: Workers, failures: JobFailures | None = None) -> list[str]:
    """One pass: hand every run that needs a worker (orphaned, decided, commanded) to the pool."""
    failures = failures or JobFailures(RECOVER_JOB)
    try:
        run_ids = runner.recover()
    except Exception as exc:  # as above: log, and let the next pass retry
        failures.failed(exc)
        return []
    failures.succeeded()
    for run_id in run_ids:
        workers.submit(run_id)
    if run_ids:
        log.info("recovering %d run(s): %s", len(run_ids), ", ".join(run_ids))
    return run_ids


def start_scheduler(runner: Runner, workers: Workers, interval: timedelta) -> BackgroundScheduler:
    """Start every job every `interval`, first run now; missed runs coalesce into one."""
    scheduler = BackgroundScheduler(
        timezone=UTC,
        job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": int(interval.total_seconds()) + 1},
    )
    seconds = interval.total_seconds()
    now = datetime.now(UTC)
    scheduler.add_job(expire_approvals, "interval", seconds=seconds, id=EXPIRE_JOB,
                      args=(runner, workers, JobFailures(EXPIRE_JOB)), next_run_time=now)
    scheduler.add_job(nudge_approvals, "interval", seconds=seconds, id=NUDGE_JOB,
                      args=(runner, JobFailures(NUDGE_JOB)), next_run_time=now)
    scheduler.add_job(follow_up_glass, "interval", seconds=seconds, id=GLASS_JOB,
                      args=(runner, JobFailures(GLASS_JOB)), next_run_time=now)
    scheduler.add_job(recover_runs, "interval", seconds=seconds, id=RECOVER_JOB,
                      args=(runner, workers, JobFailures(RECOVER_JOB)), next_run_time=now)
    scheduler.start()
    return scheduler
