"""`python -m scenarios.skewed SECONDS MODULE [ARG ...]`: run MODULE as `python -m MODULE ARG ...` would,
with this process's wall clock moved by SECONDS (negative: behind), as on a host whose clock is off.

Every wall-clock reading the process makes through Python (`time.time`, `datetime.now`, ...) is
moved, in forked children too (gunicorn's worker); monotonic clocks and sleeps are not, nor is
the database server's clock. time-machine does the moving.
"""

from __future__ import annotations

import runpy
import sys
from datetime import UTC, datetime, timedelta

import time_machine


def main() -> None:
    offset, module, *args = sys.argv[1:]
    sys.argv = [module, *args]
    with time_machine.travel(datetime.now(UTC) + timedelta(seconds=float(offset)), tick=True):
        runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
