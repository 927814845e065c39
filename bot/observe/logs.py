"""Logging, defined once for the whole process (`configure_logging`), and `LogObserver`: each run's
story, one line per thing that happened to it.

Every line is timestamped (UTC, to the millisecond) and names the run it is about, and the approval
and idempotency key where there is one; `SIGNOFF_LOG_FORMAT=json` writes one JSON object a line with
those as fields. Slack tokens and the configured secrets are masked in everything written, whoever
logged it, tracebacks included. Arguments reach a line only as the events carry them: redacted.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, TextIO

if TYPE_CHECKING:  # configuring the log (every command does, `--help` too) needs none of the runtime
    from signoff.bot.observe.commits import ModelTurn
    from signoff.runtime.records import RunRecord

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")

RUNS_LOGGER = "signoff.runs"
"""The logger `LogObserver` tells runs' stories on."""

CHATTY = ("apscheduler", "alembic")
"""Libraries whose INFO lines are routine (each scheduler run, each migration step): shown at DEBUG only."""

_TOKEN = re.compile(r"xox[a-z]-[A-Za-z0-9-]+|xapp-[A-Za-z0-9-]+")
_MIN_SECRET = 6
"""Shorter configured values are not masked: masking "abc" everywhere would garble every line."""


class SecretFilter(logging.Filter):
    """Masks Slack tokens and our configured secrets in a record's message."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self.secrets = [s for s in secrets if s and len(s) >= _MIN_SECRET]

    def mask(self, text: str) -> str:
        masked = _TOKEN.sub("[secret]", text)
        for secret in self.secrets:
            masked = masked.replace(secret, "[secret]")
        return masked

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        masked = self.mask(text)
        if masked != text:
            record.msg, record.args = masked, None
        return True


BOLT_SIGNATURE_LOGGER = "slack_bolt.RequestVerification"
"""Where Bolt tells of a request whose signature does not verify: at INFO, with the whole body."""


class _BodyLeftOut(logging.Filter):
    """Keeps Bolt's line about a request with a bad signature, without the request's body: a body
    carries what people typed and the response URL that posts to their channel, and a request that
    failed the check may be anyone's. A filter, not a level: Bolt sets this logger's level to the
    root's each time it builds an app."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if ", body: " in message:
            record.msg, record.args = message[:message.index(", body: ")] + ", body not logged)", ()
        return True


def _timestamp(record: logging.LogRecord) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"


class TextFormatter(logging.Formatter):
    """`2026-03-01T12:30:00.123Z INFO signoff.runs: run run-3f9c2a1b7e started ...`"""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802  # logging's name
        return _timestamp(record)


_RECORD_FIELDS = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, the fields the caller gave (`extra=`),
    and the traceback as `exception`."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {"time": _timestamp(record), "level": record.levelname, "logger": record.name,
                                "message": record.getMessage()}
        for name, value in record.__dict__.items():
            if name not in _RECORD_FIELDS and not name.startswith("_") and name not in line:
                line[name] = value if value is None or isinstance(value, str | int | float | bool) else str(value)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False)


class _Handler(logging.StreamHandler[TextIO]):
    """Our handler on the root logger: masks secrets in the whole of what it writes, to `stream` or,
    without one, to whatever `sys.stderr` is when it writes (a test's capture, a CLI runner's)."""

    def __init__(self, stream: TextIO | None, secrets: SecretFilter) -> None:
        super().__init__(stream)
        self._stream = stream
        self.secrets = secrets
        self.addFilter(secrets)

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        self._stream = value

    def format(self, record: logging.LogRecord) -> str:
        return self.secrets.mask(super().format(record))  # a traceback can quote a token too


def configure_logging(level: str | int, *, log_format: LogFormat = "text", secrets: Iterable[str] = (),
                      stream: TextIO | None = None) -> None:
    """Write every record at `level` and above to stderr (or `stream`), timestamped, in `log_format`,
    with tokens and `secrets` masked.

    Replaces what an earlier call set up (the CLI's, made before the settings were read) and
    nothing else: handlers others added to the root logger stay.
    """
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _Handler)]:
        root.removeHandler(handler)
        handler.close()
    handler = _Handler(stream, SecretFilter(secrets))
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root.addHandler(handler)
    root.setLevel(level)
    level_number = root.getEffectiveLevel()
    # slack_sdk logs request headers (the bearer token among them) at DEBUG: keep it at INFO or above.
    logging.getLogger("slack_sdk").setLevel(max(logging.INFO, level_number))
    bolt_signatures = logging.getLogger(BOLT_SIGNATURE_LOGGER)
    if not any(isinstance(f, _BodyLeftOut) for f in bolt_signatures.filters):
        bolt_signatures.addFilter(_BodyLeftOut())
    for name in CHATTY:  # at INFO they tell of every sweep and migration step: worth it only when debugging
        logging.getLogger(name).setLevel(level_number if level_number <= logging.DEBUG else max(logging.WARNING,
                                                                                               level_number))


@contextlib.contextmanager
def quiet(name: str) -> Iterator[None]:
    """Silence logger `name` (and those under it) while a check runs whose failure we report ourselves,
    in one line: no library traceback before it."""
    logger = logging.getLogger(name)
    was = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(was)


# -- the story of each run ----------------------------------------------------------------------------

Line = tuple[int, str, dict[str, Any]]
"""(level, message, fields): what one event says, and the fields a JSON line carries besides."""


class LogObserver:
    """Tells each run's story on `signoff.runs`: one INFO line per run start, model turn (tokens and
    cost), approval requested, decision (who, by which rule), execution (tool, key, outcome,
    seconds), and ending; the rest at DEBUG."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.log = logger or logging.getLogger(RUNS_LOGGER)

    def observe(self, run: RunRecord, events: Sequence[Mapping[str, Any]]) -> None:
        if not self.log.isEnabledFor(logging.WARNING):  # the least any line is logged at
            return
        if not self.log.isEnabledFor(logging.INFO):  # only an ending is logged above INFO: a quiet
            events = [e for e in events if _commits().ending(e) is not None]  # step builds no line to drop
        turn = _commits().model_turn(run, events)
        for event in events:
            line = story_line(run, event, turn)
            if line is not None and self.log.isEnabledFor(line[0]):
                level, message, fields = line
                self.log.log(level, message, extra={"event": event["type"], "run_id": run.run_id, **fields})


def _commits() -> ModuleType:
    """What commits say (`observe.commits`), imported with the first line told, not with logging."""
    from signoff.bot.observe import commits

    return commits


def story_line(run: RunRecord, event: Mapping[str, Any], turn: ModelTurn | None = None) -> Line | None:
    """What `event` says of `run`, as one line; None for what is not worth a line (a failed post,
    which the teller has logged already)."""
    status = _commits().ending(event)
    if status is not None:
        return _ending(run, event, status)
    tell = _TELLERS.get(str(event["type"]))
    if tell is not None:
        return tell(run, event, turn)
    return logging.DEBUG, f"run {run.run_id}: {event['type']}{_key(event)}", _fields(event, "key", "approval_id")


def _started(run: RunRecord, event: Mapping[str, Any], turn: ModelTurn | None) -> Line:
    budget = event.get("budget") or {}
    limits = ", ".join(f"{name}={value}" for name, value in sorted(budget.items()) if value is not None)
    return (logging.INFO, f"run {run.run_id} started for {run.requester} (model {run.model}; budget {limits})",
            {"requester": run.requester, "model": run.model})


def _created(run: RunRecord, event: Mapping[str, Any], turn: ModelTurn | None) -> Line:
    return logging.DEBUG, f"run {run.run_id} recorded for {run.requester}", {"requester": run.requester}


def _decision(run: RunRecord, event: Mapping[str, Any], turn: ModelTurn | None) -> Line:
    kind = event.get("kind")
    said = (f"asks for {event.get('tool')}" if kind == "tool" else "answered" if kind == "final"
            else f"replied with nothing usable ({event.get('error')})")
    fields = _fields(event, "step", "tool")
    usage = ""
    if turn is not None:
        # A model that reports no usage (the scripted one) is not said to have cost nothing.
        if turn.input_tokens or turn.output_tokens or turn.cost_usd:
            usage = f" ({turn.input_tokens} in / {turn.output_tokens} out tokens, ${turn.cost_usd:.4f})"
        fields.update(model=turn.model, outcome=turn.outcome, input_tokens=turn.input_tokens,
                      output_tokens=turn.output_tokens, cost_usd=turn.cost_usd)
    return logging.INFO, f"run {run.run_id} step {event.get('step')}: {run.model} {said}{usage}", fields


def _approval_requested(run: RunRecord, event: Mapping[str, Any], turn: ModelTurn | None) -> Line:
    approval = f" {event['approval_id']}" if event.get("approval_id") else ""
    again = " again" if event.get("supersedes") or event.get("edited_by") else ""
    quorum = int(event.get("quorum") or 1)
    return (logging.INFO, f"run {run.run_id}: approval{approval} requested{again} for {event.get('tool')}{_key(event)}, "
            f"{_rule(event)}, {quorum} approval{'s' if quorum != 1 else ''} needed",
            _fields(event, "approval_id", "key", "tool", "rule", "quorum"))


def _vote(run: RunRecord, event: Mapping[str, Any], turn: ModelTurn | None) -> Line:
    return (logging.INFO, f"run {run.run_id}: approval {event.get('approval_id')} approved by {event.get('by')} "
            f"({event.get('approvals')} of {event.get('quorum')}){_key(event)}",
            _fields(event, "approval_id", "key", "by", "approvals", "quorum"))


def _recorded(run: RunRecord, event: Mapping[str, Any], turn: ModelTurn | None) -> Line:
    decided = "approved" if event.get("approved") else "denied"
    return (logging.INFO, f"run {run.run_id}: approval {event.get('approval_id')} {decided} by {event.get('by')} "
            f"after {_spoken(event.get('waited_seconds'))} ({_rule(event)}){_key(event)}",
            {**_fields(event, "approval_id", "key", "tool", "by", "rule", "waited_seconds"), "outcome": decided})


def _expired(run: RunRecord, event: Mapping[str, Any], turn: ModelTurn | None) -> Line:
    waited = f" after {_spoken(event['waited_seconds'])}" if "waited_seconds" in event else ""
    why = f": {event['reason']}" if event.get("reason") else ""
    return (logging.INFO, f"run {run.run_id}: approval {event.get('approval_id')} expired{waited}, "
            f"not executed{why}{_key(event)}", _fields(event, "approval_id", "key", "tool", "waited_seconds"))


def _allowed(run: RunRecord, event: Mapping[str, Any], turn: ModelTurn | None) -> Line:
    grant = f"grant {event.get('grant_id')} of {event.get('granted_by')}" if event.get("grant_id") else None
    return (logging.INFO, f"run {run.run_id}: {event.get('tool')} runs without asking, allowed by "
            f"{grant or _rule(event)}{_key(event)}", _fields(event, "key", "tool", "rule", "grant_id"))


def _denied(run: RunRecord, event: Mapping[str, Any], turn: ModelTurn | None) -> Line:
    return (logging.INFO, f"run {run.run_id}: {event.get('tool')} refused by {_rule(event)}: {event.get('reason')}"
            f"{_key(event)}", _fields(event, "key", "tool", "rule"))


def _execution_started(run: RunRecord, event: Mapping[str, Any], turn: ModelTurn | None) -> Line:
    return (logging.DEBUG, f"run {run.run_id}: starting {event.get('tool')}{_key(event)}, attempt {event.get('attempt')}",
            _fields(event, "key", "tool", "attempt"))


def _executed(run: RunRecord, event: Mapping[str, Any], turn: ModelTurn | None) -> Line:
    took = _commits().seconds(event.get("seconds"))
    fields = {**_fields(event, "key", "tool"), "seconds": took}
    if event["type"] == "tool_executed":
        return logging.INFO, f"run {run.run_id}: {event.get('tool')} succeeded in {took:.3f}s{_key(event)}", {
            **fields, "outcome": "ok"}
    error = str(event.get("error") or "").strip().splitlines()
    return (logging.INFO, f"run {run.run_id}: {event.get('tool')} failed in {took:.3f}s{_key(event)}: "
            f"{(error[0] if error else 'no reason given')[:300]}", {**fields, "outcome": "failed"})


def _command(run: RunRecord, event: Mapping[str, Any], turn: ModelTurn | None) -> Line:
    return (logging.INFO, f"run {run.run_id}: {event.get('op')} requested by {event.get('by')}",
            {**_fields(event, "by", "approval_id"), "command": event.get("op")})


def _command_refused(run: RunRecord, event: Mapping[str, Any], turn: ModelTurn | None) -> Line:
    return (logging.INFO, f"run {run.run_id}: {event.get('op')} request of {event.get('by')} dropped: "
            f"{event.get('reason')}", {**_fields(event, "by"), "command": event.get("op")})


def _nudged(run: RunRecord, event: Mapping[str, Any], turn: ModelTurn | None) -> Line:
    what = (f"escalated to {', '.join(event.get('added') or ()) or 'nobody new'}"
            if event["type"] == "approval_escalated" else "reminded its approvers")
    return (logging.INFO, f"run {run.run_id}: approval {event.get('approval_id')} {what}{_key(event)}",
            _fields(event, "approval_id", "key"))


def _grant(run: RunRecord, event: Mapping[str, Any], turn: ModelTurn | None) -> Line:
    made = event["type"] == "grant_created"
    what = (f"made by {event.get('by')} for similar {event.get('tool')} calls ({event.get('scope')} scope, "
            f"until {event.get('expires_at')})" if made else f"revoked by {event.get('by')}")
    return logging.INFO, f"run {run.run_id}: grant {event.get('grant_id')} {what}", _fields(
        event, "grant_id", "approval_id", "by", "tool")


def _budget_extended(run: RunRecord, event: Mapping[str, Any], turn: ModelTurn | None) -> Line:
    limits = ", ".join(f"{name}={value}" for name, value in sorted((event.get("limits") or {}).items()))
    return logging.INFO, f"run {run.run_id}: goes on ({limits or 'repeats forgiven'})", {}


def _ending(run: RunRecord, event: Mapping[str, Any], status: str) -> Line:
    usage = event.get("usage") or {}
    tokens = int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))
    cost = float(usage.get("cost_usd", 0.0))
    paid = f"{tokens} tokens, ${cost:.4f}, " if tokens or cost else ""  # none reported: nothing to say
    spent = (f"{usage.get('model_calls', 0)} model calls, {usage.get('tool_calls', 0)} tool calls, "
             f"{paid}{float(usage.get('seconds', 0.0)):.1f}s running")
    fields = {"status": status, **{name: usage[name] for name in ("model_calls", "tool_calls", "input_tokens",
                                                                  "output_tokens", "cost_usd") if name in usage}}
    if status == "done":
        return logging.INFO, f"run {run.run_id} done: {spent}", fields
    if status == "budget_exhausted":
        fields["limit"] = event.get("budget")
        return logging.INFO, f"run {run.run_id} stopped, out of budget: {event.get('reason')} ({spent})", fields
    # A failure, a stall or an unknown outcome waits for an operator: worth a warning.
    level = logging.WARNING if status in ("failed", "stalled", "needs_reconciliation") else logging.INFO
    return level, f"run {run.run_id} stopped as {status}: {event.get('reason')} ({spent})", fields


def _nothing(run: RunRecord, event: Mapping[str, Any], turn: ModelTurn | None) -> None:
    return None


_TELLERS: dict[str, Callable[[RunRecord, Mapping[str, Any], ModelTurn | None], Line | None]] = {
    "run_created": _created,
    "run_started": _started,
    "decision": _decision,
    "approval_requested": _approval_requested,
    "approval_vote_recorded": _vote,
    "approval_recorded": _recorded,
    "approval_expired": _expired,
    "call_allowed_by_rule": _allowed,
    "call_allowed_by_grant": _allowed,
    "call_denied_by_rule": _denied,
    "execution_started": _execution_started,
    "tool_executed": _executed,
    "tool_failed": _executed,
    "command_recorded": _command,
    "command_refused": _command_refused,
    "approval_reminded": _nudged,
    "approval_escalated": _nudged,
    "grant_created": _grant,
    "grant_revoked": _grant,
    "budget_extended": _budget_extended,
    "notify_failed": _nothing,  # the teller logged it as it happened
}


def _fields(event: Mapping[str, Any], *names: str) -> dict[str, Any]:
    return {name: event[name] for name in names if event.get(name) is not None}


def _key(event: Mapping[str, Any]) -> str:
    return f" (key {event['key']})" if event.get("key") else ""


def _rule(event: Mapping[str, Any]) -> str:
    return f"policy rule {event['rule']}" if event.get("rule") else "the default policy"


def _spoken(value: Any) -> str:
    total = _commits().seconds(value)
    if total < 60:
        return f"{total:.1f}s"
    minutes, secs = divmod(int(total), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes}m" if hours else f"{minutes}m {secs}s"
