"""`signoff check`'s audit webhook line: is the receiver taking the events, or has it been down long?"""

from __future__ import annotations

from urllib.parse import urlsplit

from signoff.bot.settings import Settings


def check_audit_webhook(settings: Settings) -> str:
    """`ok audit webhook: ...`, `FAIL ...` (no secret, or a receiver down for long), or `skip ...`."""
    from signoff.bot.wiring import audit_webhook_status
    from signoff.runtime.audit_webhook import DOWN_FOR_LONG, target_of
    from signoff.runtime.errors import ConfigError

    url = settings.audit_webhook_url
    if url is None:
        return "skip audit webhook: SIGNOFF_AUDIT_WEBHOOK_URL is not set"
    problems = settings.audit_webhook_problems()
    if problems:
        return f"FAIL audit webhook: {problems[0]}"
    host = urlsplit(url).netloc.rpartition("@")[2]
    try:
        status = audit_webhook_status(settings.database_url)
    except ConfigError:
        return f"skip audit webhook: {host}: the database line says why it cannot be read"
    if status is None or status.target != target_of(url):
        return f"ok audit webhook: {host} gets the events written from the next `signoff serve` on"
    down = status.down_for
    if down is not None and down >= DOWN_FOR_LONG:
        return (f"FAIL audit webhook: {host} has taken no event for {_minutes(down.total_seconds())} "
                f"({status.failures} failed deliveries in a row, the last: {status.last_error}); "
                f"{status.behind} events wait, and are delivered once it takes them")
    behind = f"{status.behind} events wait ({_minutes(status.lag_seconds)} behind)" if status.behind else "caught up"
    return f"ok audit webhook: {host}: {behind}"


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"
