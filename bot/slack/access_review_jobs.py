"""The clock of reviews of standing access: one job that opens the current period's review (see
`bot.review_schedule`), once across replicas, and nudges unanswered ones."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger

from signoff.bot.review_schedule import review_period, review_trigger
from signoff.bot.settings import ENV_VARS, Settings
from signoff.bot.slack.access_reviews import SlackReviews
from signoff.bot.slack.notifier import SlackNotifier
from signoff.bot.slack.scheduler import JobFailures
from signoff.bot.wiring import access_reviews
from signoff.runtime.api_keys import ApiKeys
from signoff.runtime.reviewing import AccessReviewer, ReviewConfig
from signoff.runtime.runner import Runner

log = logging.getLogger("signoff.bot.slack.access_review_jobs")

REVIEW_JOB = "review-access"
def review_access(reviewer: AccessReviewer, trigger: CronTrigger, failures: JobFailures | None = None) -> None:
    """One tick: open (and post) this period's review if no replica has, and nudge unanswered ones."""
    failures = failures or JobFailures(REVIEW_JOB)
    try:
        period = review_period(trigger, reviewer.reviews.now())
        opened = reviewer.open_due(period) if period is not None else None
        nudged = reviewer.nudge_due()
    except Exception as exc:  # as every job: log, and let the next tick try again
        failures.failed(exc)
        return
    failures.succeeded()
    if opened is not None:
        log.info("posted review %s of standing access (%d line(s))", opened.review_id, len(opened.lines))
    for review, kind in nudged:
        log.info("%s review %s of standing access", "reminded of" if kind == "remind" else "escalated", review.review_id)


def access_reviewer(settings: Settings, runner: Runner, notifier: SlackNotifier,
                    keys: ApiKeys) -> AccessReviewer | None:
    """The reviews `settings` ask for: None when `SIGNOFF_REVIEW_SCHEDULE` is off, or when there is
    no `SIGNOFF_APPROVAL_CHANNEL` to post them in (said in the log)."""
    if review_trigger(settings.review_schedule) is None:
        return None
    if settings.approval_channel is None:
        # Loud only for a schedule someone chose; the default one quietly waits for a channel.
        chosen = settings.review_schedule != ENV_VARS["SIGNOFF_REVIEW_SCHEDULE"]
        log.log(logging.WARNING if chosen else logging.INFO, "reviews of standing access are off: "
                "SIGNOFF_REVIEW_SCHEDULE needs SIGNOFF_APPROVAL_CHANNEL to post them in")
        return None
    config = ReviewConfig(channel=settings.approval_channel, remind_after=settings.review_remind_after)
    return AccessReviewer(runner, access_reviews(runner.store), keys,
                          SlackReviews(notifier, config, settings.approvers), config)


def start_access_reviews(scheduler: BackgroundScheduler, reviewer: AccessReviewer, settings: Settings) -> None:
    """Check every sweep (first now) whether a review is due: the database's clock decides, not
    this host's, so the check runs often rather than at the schedule's times on this clock."""
    trigger = review_trigger(settings.review_schedule)
    assert trigger is not None, "reviews are on"
    scheduler.add_job(review_access, "interval", seconds=settings.sweep_interval.total_seconds(), id=REVIEW_JOB,
                      args=(reviewer, trigger, JobFailures(REVIEW_JOB)), next_run_time=datetime.now(UTC))
