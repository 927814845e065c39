"""One Approve click followed through Signoff's own code, from the listener to the tool.

The real bot (bolt over signed HTTP, a SQLite file, FakeSlack) asks about a refund; then one
Approve click is recorded with a profile hook on every thread: each call of a function of Signoff
(`runtime/`, `bot/`, `tools/`) until the refund tool runs. It prints:

- the chain of calls on the stack where the click's decision is committed (the listener's thread),
  where the run's worker hands the call over, and where the tool is called (the thread that runs
  it): the hops a click takes to each;
- how many calls of Signoff's functions the click made before the tool ran, in how many modules;
- every call from the core (`runtime/`) into an edge (`bot/`): a call back into the edge.

`python -m bench.click_path [--json]`. Nothing here is timed: the figures are counts.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OWN = ("runtime/", "bot/", "tools/")
"""Signoff's own code, as paths under the `signoff` package."""
COMMIT = "runtime/approval_commands.py:decide"
"""Where a click's decision is committed: its unit of work ends as this function returns."""
HANDOFF = "runtime/tool_calls.py:call_tool"
"""Where the worker hands the call to the thread that runs it, time-limited."""


def own_place(frame: FrameType) -> str | None:
    """`module/path.py:function` of a frame in Signoff's own code, else None."""
    path = frame.f_code.co_filename.replace("\\", "/")
    marker = path.rfind("/signoff/")
    if marker < 0:
        return None
    inside = path[marker + len("/signoff/"):]
    return f"{inside}:{frame.f_code.co_name}" if inside.startswith(OWN) else None


class Recorder:
    """A profile hook: counts calls of Signoff's functions and keeps the stacks that matter."""

    def __init__(self) -> None:
        self.recording = False
        self.calls: Counter[str] = Counter()
        self.edge_calls: Counter[str] = Counter()
        self.stacks: dict[str, list[str]] = {}
        self.lock = threading.Lock()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or not self.recording or "tool" in self.stacks:
            return
        place = own_place(frame)
        if place is None:
            return
        caller = next((p for f in _callers(frame.f_back) if (p := own_place(f)) is not None), None)
        with self.lock:
            self.calls[place] += 1
            if place.startswith("bot/") and caller is not None and caller.startswith("runtime/"):
                self.edge_calls[f"{caller} -> {place}"] += 1
        if place in (COMMIT, HANDOFF):
            self._keep("decision" if place == COMMIT else "handoff", frame)

    def tool_called(self, caller: FrameType) -> None:
        """The tool runs, called from `caller`: the click's path ends here."""
        if self.recording:
            self._keep("tool", caller)

    def _keep(self, name: str, frame: FrameType | None) -> None:
        stack = [p for f in _callers(frame) if (p := own_place(f)) is not None][::-1]
        with self.lock:
            self.stacks.setdefault(name, stack)


def _callers(frame: FrameType | None) -> list[FrameType]:
    found = []
    while frame is not None:
        found.append(frame)
        frame = frame.f_back
    return found


def follow_one_click() -> dict[str, Any]:
    """Ask about one refund through the real bot, then record one Approve click to the tool."""
    path = sys.path[:]
    sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "bot")]  # the bot's test harness, as its tests use it
    try:
        from bot_fakes import Ledger, final, tool_call  # type: ignore[import-not-found]
        from slack_harness import Signoff  # type: ignore[import-not-found]

        from tests.fakes.slack import FakeSlack
    finally:
        sys.path[:] = path

    from signoff.bot.slack.blocks import APPROVE_ACTION
    from signoff.runtime.adapters.db import make_engine, upgrade

    recorder = Recorder()

    class WatchedLedger(Ledger):  # type: ignore[misc]
        def refund(self, args: dict[str, Any], key: str) -> dict[str, Any]:
            # Read from the tool itself: the thread that runs tools may predate the profile hook.
            recorder.tool_called(sys._getframe(1))
            return dict(super().refund(args, key))

    ledger = WatchedLedger()
    threading.setprofile(recorder)  # every thread the bot starts from here on
    sys.setprofile(recorder)
    with tempfile.TemporaryDirectory() as folder, FakeSlack(channels={"C0RUNS": ["U0ASKER", "U0LEAD"]}) as slack:
        url = f"sqlite:///{folder}/click.db"
        engine = make_engine(url)
        upgrade(engine)
        engine.dispose()
        signoff = Signoff(slack, url, ledger, {})
        try:
            signoff.script.decisions = [tool_call("issue_refund", order_id="42", amount_usd=20.0), final("Refunded.")]
            signoff.command("Refund $20 of order 42")
            card = signoff.approval_message()
            recorder.recording = True
            signoff.click(card, APPROVE_ACTION, "U0LEAD")
            recorder.recording = False
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
            signoff.close()
    assert dict(ledger.calls) and "tool" in recorder.stacks, "the click did not run the tool"
    return summary(recorder)


def summary(recorder: Recorder) -> dict[str, Any]:
    modules = {place.split(":")[0] for place in recorder.calls}
    return {
        "to_the_decision": recorder.stacks.get("decision", []),
        "to_the_handoff": recorder.stacks.get("handoff", []),
        "to_the_tool": recorder.stacks["tool"],
        "calls": sum(recorder.calls.values()),
        "functions": len(recorder.calls),
        "modules": len(modules),
        "calls_into_the_edge": dict(sorted(recorder.edge_calls.items())),
    }


def markdown(found: dict[str, Any]) -> str:
    lines = ["# One Approve click, from the listener to the tool", ""]
    for name, title in (("to_the_decision", "to the decision's commit (the listener's thread)"),
                        ("to_the_handoff", "to the call's start (the run's worker)"),
                        ("to_the_tool", "to the tool (the thread that runs it, time-limited)")):
        stack = found[name]
        lines += [f"## {len(stack)} hops {title}", "", *(f"{i}. `{place}`" for i, place in enumerate(stack, 1)), ""]
    lines += [f"Calls of Signoff's functions before the tool ran: {found['calls']} ({found['functions']} "
              f"functions in {found['modules']} modules).", "", "## Calls from the core into an edge", ""]
    lines += [f"- `{edge}` ×{count}" for edge, count in found["calls_into_the_edge"].items()] or ["- none"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    found = follow_one_click()
    print(json.dumps(found, indent=2) if args.json else markdown(found))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
