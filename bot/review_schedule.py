"""`SIGNOFF_REVIEW_SCHEDULE` read as a cron trigger, and the review period a moment is in.

The period is the latest time the schedule fired at, by the database's clock (the caller passes
its `now`): replicas whose clocks disagree still name the same period.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from apscheduler.triggers.cron import CronTrigger

OFF = "off"
_LOOKBACKS = tuple(timedelta(minutes=2) * 30 ** n for n in range(6))
"""How far back a period's start is looked for, widening: 2 min up to 86 years (every cron fires by then)."""


def review_trigger(schedule: str) -> CronTrigger | None:
    """The trigger `schedule` (five cron fields, UTC) describes; None when reviews are off.

    Raises `ValueError` for anything else."""
    if schedule.strip().lower() in ("", OFF):
        return None
    if len(schedule.split()) != 5:
        raise ValueError(f"expected five cron fields (minute hour day month weekday), e.g. '0 9 * * 1', "
                         f"or {OFF!r}; got {schedule!r}")
    minute, hour, day, month, weekday = schedule.split()
    return CronTrigger(minute=minute, hour=hour, day=day, month=month, day_of_week=_weekdays(weekday),
                       timezone=UTC)


_DAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat", "sun")
_NUMBERED = re.compile(r"^(\*|\d)(?:-(\d))?(?:/(\d+))?$")


def _weekdays(field: str) -> str:
    """Cron's weekday field (0 or 7: Sunday) as APScheduler reads it, which counts from Monday:
    each numbered item spelled out as day names; named ones are the same in both."""
    items = []
    for item in field.split(","):
        numbered = _NUMBERED.match(item)
        if numbered is None:
            items.append(item)
            continue
        first, last, step = numbered.groups()
        start, end = (0, 6) if first == "*" else (int(first), int(last) if last is not None else int(first))
        if last is None and step is not None and first != "*":
            end = 6
        if not 0 <= start <= end <= 7:
            raise ValueError(f"weekday {item!r}: use 0-7 (0 and 7 are Sunday), a range a-b with a <= b, or names")
        items += [_DAY_NAMES[day] for day in range(start, end + 1, int(step or 1))]
    return ",".join(dict.fromkeys(items))


def review_period(trigger: CronTrigger, now: datetime) -> datetime | None:
    """The start of the period `now` is in: the schedule's latest firing at or before `now` (None: never yet)."""
    for lookback in _LOOKBACKS:
        fired = trigger.get_next_fire_time(None, now - lookback)
        if fired is None or fired > now:
            continue
        # Fewer firings lie in this window than the widening suggests: the narrower one had none.
        while (following := trigger.get_next_fire_time(fired, fired + timedelta(seconds=1))) is not None \
                and following <= now:
            fired = following
        start: datetime = fired.astimezone(UTC)
        return start
    return None
