"""The scenarios x invariants table, with totals, as plain text for a terminal and as markdown."""

from __future__ import annotations

from collections.abc import Sequence

from scenarios.invariants import INVARIANTS
from scenarios.outcome import Outcome
from signoff.runtime.failpoints import POINTS

COLUMNS = ("Scenario", "Runs", "Faults", "Races", "Hostile", *INVARIANTS, "E", "Secs")
LEGEND = [f"{code} {name}" for code, name in INVARIANTS.items()] + [
    "E   the scenario's own expectations (the fault fired, the refusal was given, the run finished)"]


def _cell(found: int) -> str:
    return "ok" if found == 0 else f"FAIL {found}"


def rows(outcomes: Sequence[Outcome]) -> list[list[str]]:
    table = []
    for o in outcomes:
        if o.skipped:
            table.append([o.name, "-", "-", "-", "-", *["skip"] * (len(INVARIANTS) + 1), "-"])
            continue
        table.append([o.name, str(o.runs), str(o.faults), str(o.races), str(o.hostile),
                      *[_cell(len(o.violations[i])) for i in INVARIANTS], _cell(len(o.expectations)),
                      f"{o.seconds:.0f}"])
    ran = [o for o in outcomes if not o.skipped]
    table.append(["TOTAL", str(sum(o.runs for o in ran)), str(sum(o.faults for o in ran)),
                  str(sum(o.races for o in ran)), str(sum(o.hostile for o in ran)),
                  *[str(sum(len(o.violations[i]) for o in ran)) for i in INVARIANTS],
                  str(sum(len(o.expectations) for o in ran)), ""])
    return table


def totals(outcomes: Sequence[Outcome], wall_seconds: float) -> list[str]:
    ran = [o for o in outcomes if not o.skipped]
    crash_runs = [o for o in ran if o.group == "crash" and "sigkill" not in o.name]
    databases = sorted({o.name.rsplit("/", 1)[1] for o in crash_runs})
    points = sorted({o.name.split("/")[1] for o in crash_runs})
    violations = sum(len(v) for o in ran for v in o.violations.values())
    expectations = sum(len(o.expectations) for o in ran)
    lines = [
        f"crash points x databases: {len(points)} x {len(databases)} = {len(points) * len(databases)} "
        f"(of {len(POINTS)} points; {len(crash_runs)} crash scenarios with tool variants, "
        f"plus {sum(1 for o in ran if 'sigkill' in o.name)} plain SIGKILLs)",
        f"injected faults: {sum(o.faults for o in ran)}",
        f"races: {sum(o.races for o in ran)}",
        f"hostile inputs: {sum(o.hostile for o in ran)}",
        f"runs driven: {sum(o.runs for o in ran)}",
        f"invariant violations: {violations}; scenario expectations not met: {expectations}",
        f"scenarios: {len(ran)} ran, {len(outcomes) - len(ran)} skipped; wall time {wall_seconds:.0f} s",
    ]
    return lines


def text(outcomes: Sequence[Outcome], wall_seconds: float) -> str:
    table = [list(COLUMNS), *rows(outcomes)]
    widths = [max(len(r[i]) for r in table) for i in range(len(COLUMNS))]
    out = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table]
    out.insert(1, "  ".join("-" * w for w in widths))
    out += ["", *totals(outcomes, wall_seconds), "", *failure_lines(outcomes)]
    return "\n".join(out).rstrip() + "\n"


def markdown(outcomes: Sequence[Outcome], wall_seconds: float) -> str:
    table = rows(outcomes)
    out = ["# Signoff scenario suite", "", "| " + " | ".join(COLUMNS) + " |",
           "|" + "|".join(["---"] + ["---:"] * (len(COLUMNS) - 1)) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in table]
    out += ["", "## Totals", "", *[f"- {line}" for line in totals(outcomes, wall_seconds)]]
    out += ["", "## Legend", "", *[f"- {line}" for line in LEGEND]]
    failures = failure_lines(outcomes)
    out += ["", "## Failures", ""] + ([f"- {line}" for line in failures] if failures else ["None."])
    notes = [(o.name, n) for o in outcomes for n in o.notes if not n.startswith("Traceback")]
    if notes:
        out += ["", "## Notes", "", *[f"- {name}: {note}" for name, note in notes]]
    return "\n".join(out) + "\n"


def failure_lines(outcomes: Sequence[Outcome]) -> list[str]:
    return [line for o in outcomes for line in o.failures()]
