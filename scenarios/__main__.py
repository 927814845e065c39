"""`python -m scenarios`: run the scenario suite, print the scenarios x invariants table, write it as
markdown. Exit status 1 when any invariant or expectation failed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from scenarios import report
from scenarios.suite import Sizes, run_all, scenarios

DEFAULT_REPORT = Path(__file__).resolve().parent / "last-report.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scenarios", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes (fewer runs, fewer variants)")
    parser.add_argument("--report", type=Path, default=DEFAULT_REPORT, help="where to write the markdown report")
    parser.add_argument("--only", action="append", default=[], metavar="TEXT",
                        help="run only scenarios whose name contains TEXT (repeatable)")
    parser.add_argument("--lanes", type=int, default=None, help="scenarios run side by side (default 3)")
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    args = parser.parse_args(argv)

    sizes = Sizes.quick() if args.quick else Sizes()
    chosen = [s for s in scenarios(sizes) if not args.only or any(t in s.name for t in args.only)]
    if args.list:
        print("\n".join(s.name for s in chosen))
        return 0
    started = time.monotonic()
    outcomes = run_all(chosen, lanes=args.lanes or sizes.lanes, on_done=lambda o: print(
        f"{'skip' if o.skipped else 'ok  ' if o.total == 0 else 'FAIL'} {o.name} ({o.seconds:.0f}s)", flush=True))
    wall = time.monotonic() - started
    print()
    print(report.text(outcomes, wall))
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(report.markdown(outcomes, wall), encoding="utf-8")
    print(f"report written to {args.report}")
    return 0 if all(o.total == 0 for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
