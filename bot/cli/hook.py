"""`signoff hook claude-code`: Claude Code's PreToolUse hook, answered from Signoff's approvals.

Claude Code runs the hook before a tool call, with the call as JSON on stdin. The hook asks Signoff's
approval API for it (`SIGNOFF_URL`, `SIGNOFF_API_KEY`), waits for the decision, and prints Claude
Code's answer on stdout:

    {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow" | "deny",
                            "permissionDecisionReason": "...", "updatedInput": {...}}}

`updatedInput` only when the approver edited the call. An approved call is started (consumed, so it
runs once) before the answer is "allow", since Claude Code runs the tool itself. Set as Claude Code's
PostToolUse and PostToolUseFailure hook too, the same command reports how the call went (its
result, or its error), so it lands in the card's thread and the audit log; without them a started
call has no outcome, and once its time limit passes a person is asked whether it took effect.

It fails closed: whatever goes wrong (Signoff unreachable or answering outside its contract, nobody
deciding within `--timeout`, an input it cannot read, a bug of its own), the answer is "deny" with
the reason, and the exit status is 0 so that Claude Code reads that answer. (A status other than 0
and 2 would let the call go ahead.)

`signoff hook --help` imports this module: the client is imported only when the hook runs.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import sys
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from signoff.client import Signoff

DEFAULT_TIMEOUT = 590.0
"""Seconds to wait for a decision: less than Claude Code's default hook timeout (600 s), so the
hook denies, with its reason, before Claude Code gives up on it."""
GRACE = 5.0
"""Seconds past `--timeout` after which the hook stops waiting for Signoff's answers at all: a long
poll that outlasts its `wait`, or a start that hangs, still ends in "deny" in time."""


@click.group()
def hook() -> None:
    """Answer an agent's hook from Signoff's approvals."""


@hook.command("claude-code")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=DEFAULT_TIMEOUT,
              show_default=True, help="Seconds to wait for a decision before denying. The hook's `timeout` in "
              "Claude Code's settings must be longer, by 10 s or more (the default suits Claude Code's "
              "default of 600 s).")
def claude_code(timeout: float) -> None:
    """Claude Code's PreToolUse hook: ask Signoff whether a tool call may run, and answer.

    Reads the hook's input on stdin and prints the decision as JSON on stdout. Needs SIGNOFF_URL
    and SIGNOFF_API_KEY. Denies when anything goes wrong (fails closed), always with exit status 0.
    As the PostToolUse or PostToolUseFailure hook, reports how an approved call went instead.
    """
    raw = sys.stdin.read()
    if _event_name(raw) in REPORTED:
        _report_outcome(raw, os.environ)
        return
    try:
        with _hard_deadline(timeout + GRACE):
            answer = claude_code_answer(raw, os.environ, timeout=timeout)
    except OutOfTime:
        answer = deny(f"no decision within {math.ceil(timeout)} s (Signoff answered too slowly); "
                      "the call was not run")
    except BaseException as exc:  # a bug of ours (or Ctrl-C) is a refusal, never a silent "carry on"
        answer = deny(f"the hook failed ({type(exc).__name__}: {exc}); the call was not run")
    click.echo(json.dumps(answer))


REPORTED = frozenset({"PostToolUse", "PostToolUseFailure"})
"""The events after a tool ran (or failed), whose outcome the hook reports."""
REPORT_WITHIN = 30.0
"""Seconds a report may take: Claude Code waits for its post hooks before it goes on."""


def _event_name(raw: str) -> object:
    try:
        event = json.loads(raw)
    except ValueError:
        return None
    return event.get("hook_event_name") if isinstance(event, dict) else None


def _report_outcome(raw: str, environ: Mapping[str, str]) -> None:
    """Report what came of a call this hook let run: its result, or its error. Nothing here can
    undo or block the call; a report that fails is said on stderr, and the call, started with no
    outcome, goes to a person once its time limit passes."""
    try:
        with _hard_deadline(REPORT_WITHIN):
            said = report_outcome(json.loads(raw), environ)
    except BaseException as exc:  # never an exit status Claude Code would read as "block"
        said = f"could not report the outcome ({type(exc).__name__}: {exc}); a person will be asked whether it took effect"
    if said:
        click.echo(f"Signoff: {said}", err=True)


def report_outcome(event: dict[str, Any], environ: Mapping[str, str]) -> str | None:
    """Record the outcome a PostToolUse or PostToolUseFailure input tells of, on the approval its
    PreToolUse started; what went wrong, or None. A call Signoff did not start (a tool the hook was
    not asked about, an outcome reported already) has nothing to report."""
    from signoff.client import Signoff

    url, api_key = environ.get("SIGNOFF_URL", "").strip(), environ.get("SIGNOFF_API_KEY", "").strip()
    session, call = event.get("session_id"), event.get("tool_use_id")
    if not url or not api_key or not isinstance(session, str) or not isinstance(call, str):
        return "SIGNOFF_URL, SIGNOFF_API_KEY, session_id and tool_use_id are needed to report the outcome"
    with Signoff(url, api_key) as client:
        approval = client.find(f"{session}:{call}")
        if approval is None or approval.status != "started":
            return None
        if event.get("hook_event_name") == "PostToolUse":
            approval.succeeded(event.get("tool_response"))
        else:
            approval.failed(str(event.get("error") or "the tool failed"))
    return None


class OutOfTime(Exception):
    """The hook's own deadline passed while Signoff was still being asked."""


@contextlib.contextmanager
def _hard_deadline(seconds: float) -> Iterator[None]:
    """Raise `OutOfTime` in this (the main) thread after `seconds`, whatever it is blocked on.

    Claude Code lets a tool call go ahead when its hook runs out of time (unless the hook's settings
    say `"onFailure": "block"`), so the hook answers "deny" before then however slowly Signoff
    answers. Where there is no SIGALRM (Windows), only the client's own timeouts bound the wait.
    """
    if not hasattr(signal, "setitimer"):
        yield
        return

    def out_of_time(signum: int, frame: object) -> None:
        raise OutOfTime()

    previous = signal.signal(signal.SIGALRM, out_of_time)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def claude_code_answer(raw: str, environ: Mapping[str, str], *, timeout: float) -> dict[str, Any]:
    """The answer to one PreToolUse input (`raw`, the JSON on stdin)."""
    started = time.monotonic()
    try:
        event = json.loads(raw)
    except ValueError:
        return deny("the hook's input is not JSON; the call was not run")
    problem = _input_problem(event)
    if problem:
        return deny(f"{problem}; the call was not run")
    url, api_key = environ.get("SIGNOFF_URL", "").strip(), environ.get("SIGNOFF_API_KEY", "").strip()
    if not url or not api_key:
        missing = " and ".join(name for name, value in (("SIGNOFF_URL", url), ("SIGNOFF_API_KEY", api_key))
                               if not value)
        return deny(f"{missing} not set, so nobody could be asked; the call was not run")

    from signoff.client import Signoff, SignoffError

    try:
        with Signoff(url, api_key) as client:
            return _ask(client, event, timeout - (time.monotonic() - started), timeout)
    except SignoffError as exc:
        return deny(f"could not get a decision ({exc}); the call was not run")


def _input_problem(event: Any) -> str | None:
    if not isinstance(event, dict):
        return "the hook's input is not a JSON object"
    if event.get("hook_event_name", "PreToolUse") != "PreToolUse":
        return f"this hook answers PreToolUse, not {event.get('hook_event_name')}"
    for name in ("session_id", "tool_use_id", "tool_name"):
        if not isinstance(event.get(name), str) or not event[name]:
            return f"the hook's input has no {name}"
    if not isinstance(event.get("tool_input"), dict):
        return "the hook's input has no tool_input object"
    return None


def _ask(client: Signoff, event: dict[str, Any], remaining: float, timeout: float) -> dict[str, Any]:
    from signoff.client import decider_words

    tool, tool_input = event["tool_name"], event["tool_input"]
    approval = client.request(
        tool, tool_input, key=f"{event['session_id']}:{event['tool_use_id']}", side_effect=True,
        requester="Claude Code", preview=_preview(tool_input),
        description=f"Claude Code session {event['session_id']} in {event.get('cwd') or 'an unknown directory'}")
    approval.wait(max(0.0, remaining))
    if approval.status == "pending":
        return deny(f"nobody decided within {math.ceil(timeout)} s; the call was not run")
    if approval.status != "approved":
        who = f" by {decider_words(approval.decided_by)}" if approval.decided_by else ""
        why = f": {approval.reason}" if approval.reason else ""
        if approval.status in ("denied", "expired"):
            return deny(f"{approval.status}{who}{why}")
        return deny(f"this call's approval is {approval.status} already (a call runs once); not run again")
    args = approval.start()
    who = decider_words(approval.decided_by)
    edited = args != tool_input
    reason = f"approved by {who}" + (" with edits" if edited else "") + \
        (f": {approval.reason}" if approval.reason else "")
    return allow(reason, args if edited else None)


def _preview(tool_input: dict[str, Any]) -> str | None:
    """A line for the card: the command of a Bash call, the file of a Write or Edit."""
    for name in ("command", "file_path", "url", "pattern"):
        if isinstance(tool_input.get(name), str):
            return str(tool_input[name])[:500]
    return None


def deny(reason: str) -> dict[str, Any]:
    """Claude Code's answer that the call may not run; `reason` is shown to Claude."""
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                   "permissionDecisionReason": f"Signoff: {reason}"}}


def allow(reason: str, updated_input: dict[str, Any] | None) -> dict[str, Any]:
    """Claude Code's answer that the call may run, with `updated_input` in place of its own if given."""
    output: dict[str, Any] = {"hookEventName": "PreToolUse", "permissionDecision": "allow",
                              "permissionDecisionReason": f"Signoff: {reason}"}
    if updated_input is not None:
        output["updatedInput"] = updated_input
    return {"hookSpecificOutput": output}
