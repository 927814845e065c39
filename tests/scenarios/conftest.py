"""The scenario suite inside pytest: every selected scenario runs once per session, side by side in
lanes as `python -m scenarios` runs them, and each test reads its scenario's outcome.

`SIGNOFF_SCENARIOS=quick` runs the smaller sizes. The report is written where `python -m scenarios`
writes it, and the table is printed at the end of the session (CI keeps it in its output).

Under pytest-xdist the suite's tests are all in one file, which `--dist loadfile` keeps on one worker,
so the suite runs once, on that worker's own database; the worker sends the table back.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `scenarios/` is a directory of the repository, not an installed package
    sys.path.insert(0, str(ROOT))

from scenarios import report  # noqa: E402
from scenarios.__main__ import DEFAULT_REPORT  # noqa: E402
from scenarios.outcome import Outcome  # noqa: E402
from scenarios.suite import Scenario, Sizes, run_all, scenarios  # noqa: E402
from tests.conftest import worker_summary  # noqa: E402

SIZES = Sizes.named(os.environ.get("SIGNOFF_SCENARIOS", "full"))
SCENARIOS = {s.name: s for s in scenarios(SIZES)}
_ran: list[Outcome] = []
_wall: list[float] = []


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The suite's tests first: under xdist the longest piece of work starts first, and the other
    workers share out the rest while it runs."""
    suite = [item for item in items if "suite_outcomes" in getattr(item, "fixturenames", ())]
    chosen = set(suite)
    items[:] = [*suite, *(item for item in items if item not in chosen)]


@pytest.fixture(scope="session")
def suite_outcomes(request: pytest.FixtureRequest) -> dict[str, Outcome]:
    """Run the scenarios this session selected, all at once; name -> outcome."""
    wanted = [item.callspec.params["name"] for item in request.session.items
              if hasattr(item, "callspec") and item.callspec.params.get("name") in SCENARIOS]
    chosen: list[Scenario] = [SCENARIOS[name] for name in dict.fromkeys(wanted)]
    started = time.monotonic()
    outcomes = run_all(chosen, lanes=SIZES.lanes)
    _wall.append(time.monotonic() - started)
    _ran.extend(outcomes)
    DEFAULT_REPORT.write_text(report.markdown(outcomes, _wall[0]), encoding="utf-8")
    return {o.name: o for o in outcomes}


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _ran:
        worker_summary(session.config, "scenario suite", _table())


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _ran and not hasattr(terminalreporter.config, "workeroutput"):
        terminalreporter.section("scenario suite")
        terminalreporter.write(_table())


def _table() -> str:
    return report.text(_ran, _wall[0]) + f"report: {DEFAULT_REPORT}\n"

