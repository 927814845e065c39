"""Benchmark: the cost of deciding a proposed call under an approval policy of 50 rules.

Every call the model proposes is evaluated before anything else happens, so this is overhead on
every step. The policy globs over a dozen tools; half its rules have a CEL `when` over the arguments.
The built-in policy (no rules) is the floor; parsing and compiling the file is paid once at start-up.
The same calls once more with an argument celpy reads but the fast check does not (a tuple) show what
a call costs when celpy evaluates every `when` itself.
`python -m bench.policy [--quick]` prints the figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from bench import report
from bench.stats import percentile
from signoff.runtime.approval_policy import ApprovalPolicy, ProposedCall, default_policy, evaluate
from signoff.runtime.policy_file import parse_policy

FULL = {"calls": 2_000, "repeats": 5, "parses": 20}
QUICK = {"calls": 100, "repeats": 1, "parses": 2}

CONDITIONS = {
    # Two conditional rules per tool, as a team would write them: thresholds, recipients, who asks.
    "issue_refund": ("args.amount <= 50", "args.amount > 1000"),
    "send_email": ("args.target.endsWith('@example.com')", "size(args.note) > 200"),
    "send_sms": ("args.target.startsWith('+1')", "requester == 'U0LEAD'"),
    "delete_user": ("args.target in ['U0TEST1', 'U0TEST2']", "usage.cost_usd > 0.5"),
    "lookup_customer": ("args.count <= 3", "channel == 'C0SUPPORT'"),
    "search_handbook": ("size(args.note) < 20", "args.count > 4"),
    "restart_service": ("args.target in ['api', 'worker']", "usage.steps > 6"),
    "deploy_service": ("args.target == 'staging'", "args.amount > 1500 && requester != 'U0LEAD'"),
    "page_oncall": ("args.count == 0", "args.target.startsWith('sev1')"),
    "mcp__github__create_issue": ("args.target.startsWith('docs/')", "size(args.note) > 400"),
    "mcp__github__merge_pr": ("args.count >= 2", "args.target == 'main'"),
    "rotate_api_key": ("args.target.endsWith('-test')", "usage.tool_calls > 3"),
}
UNUSED_TOOLS = ("export_report", "archive_*", "create_invoice", "close_ticket", "update_crm", "sync_calendar",
                "post_tweet", "run_sql", "scale_cluster", "mcp__jira__*", "mcp__linear__*", "backup_db", "wipe_cache")
UNNAMED = ("get_weather", "summarise_thread")
TARGETS = ("ana@example.com", "lee@elsewhere.org", "+15550100", "+445550100", "U0TEST1", "U0ANA", "api", "db",
           "staging", "production", "sev1-outage", "docs/readme.md", "main", "feature-x", "svc-test")


def policy_text() -> str:
    """The 50 rules: 4 tools' rules first, then rules for tools the mix never calls, then the 8 others."""
    def section(tools: list[str]) -> list[str]:
        lines = []
        for tool in tools:
            for number, when in enumerate(CONDITIONS[tool]):
                decision = "allow" if number == 0 else "ask\n    quorum: 2\n    approvers: [S0LEADS]"
                lines.append(f"  - name: {tool}-{number}\n    tool: {tool}\n    when: \"{when}\"\n"
                             f"    decision: {decision}")
            lines.append(f"  - name: {tool}-rest\n    tool: {tool}\n    decision: ask")
        return lines

    tools = list(CONDITIONS)
    middle = [f"  - name: unused-{n}\n    tool: \"{glob}\"\n    decision: deny" for n, glob in enumerate(UNUSED_TOOLS)]
    middle.append("  - name: any-send\n    tool: \"send_*\"\n    when: \"size(args.note) > 1000\"\n    decision: deny")
    rules = section(tools[:4]) + middle + section(tools[4:])
    assert len(rules) == 50, len(rules)
    return "defaults:\n  approvers: [S0OPS]\n  ttl: 30m\nrules:\n" + "\n".join(rules) + "\n"


def calls(count: int, seed: int = 7) -> list[ProposedCall]:
    """A fixed mix: every tool the rules name, and tools no rule names, with arguments drawn at random."""
    rng = random.Random(seed)
    tools = list(CONDITIONS) + list(UNNAMED)
    return [ProposedCall(tool=rng.choice(tools), side_effect=rng.random() < 0.7,
                         args={"amount": rng.randint(0, 2000), "target": rng.choice(TARGETS),
                               "count": rng.randint(0, 5), "note": "x" * rng.choice((5, 50, 300, 1200))},
                         requester=rng.choice(("U0LEAD", "U0ANA")), channel=rng.choice(("C0SUPPORT", "C0OPS")),
                         usage={"steps": rng.randint(1, 8), "tool_calls": rng.randint(0, 5),
                                "cost_usd": rng.choice((0.01, 0.2, 0.9))})
            for _ in range(count)]


def left_to_celpy(call: ProposedCall) -> ProposedCall:
    """`call` with an argument that is not plain JSON: celpy reads a tuple as a list, the fast check not at all."""
    return dataclasses.replace(call, args={**call.args, "tags": ("bench",)})


def where_decided(policy: ApprovalPolicy, call: ProposedCall) -> tuple[str, int]:
    """Which part of the policy decided `call` ("early", "middle", "late", "none") and how many `when`s it evaluated."""
    verdict = evaluate(policy, call)
    named = [(n, rule) for n, rule in enumerate(policy.rules, start=1) if rule.names(call.tool)]
    last = next((n for n, rule in named if rule.name == verdict.rule), len(policy.rules))
    evaluated = sum(1 for n, rule in named if n <= last and rule.when is not None)
    if verdict.rule is None:
        return "none", evaluated
    return ("early" if last <= 12 else "late" if last > 38 else "middle"), evaluated


def time_calls(policy: ApprovalPolicy, mix: list[ProposedCall], repeats: int) -> list[list[float]]:
    """Seconds per call, for each call of the mix, over `repeats` passes."""
    per_call: list[list[float]] = [[] for _ in mix]
    clock = time.perf_counter
    for _ in range(repeats):
        for samples, call in zip(per_call, mix, strict=True):
            start = clock()
            evaluate(policy, call)
            samples.append(clock() - start)
    return per_call


def microseconds(seconds: list[float]) -> dict[str, Any]:
    us = [s * 1e6 for s in seconds]
    return {"n": len(us), "median_us": round(statistics.median(us), 2), "p99_us": round(percentile(us, 99), 2),
            "mean_us": round(statistics.fmean(us), 2)}


def time_parse(text: str, parses: int) -> list[float]:
    timings = []
    for _ in range(parses):
        start = time.perf_counter()
        parse_policy(text, source="bench.yaml")
        timings.append(time.perf_counter() - start)
    return timings


def run(quick: bool = False) -> dict[str, Any]:
    plan = QUICK if quick else FULL
    text = policy_text()
    rules = parse_policy(text, source="bench.yaml")
    mix = calls(plan["calls"])
    built_in = default_policy(["S0OPS"])
    for policy in (rules, built_in):
        time_calls(policy, mix[:50], 1)  # warm-up: celpy's first evaluations, branch caches
    timings = time_calls(rules, mix, plan["repeats"])
    groups: dict[str, list[float]] = {}
    cel: dict[str, list[int]] = {}
    for call, samples in zip(mix, timings, strict=True):
        part, evaluated = where_decided(rules, call)
        for name in ("all", part):
            groups.setdefault(name, []).extend(samples)
            cel.setdefault(name, []).append(evaluated)
    floor = [s for samples in time_calls(built_in, mix, plan["repeats"]) for s in samples]
    celpy_mix = [left_to_celpy(call) for call in mix]
    in_celpy = [s for samples in time_calls(rules, celpy_mix, plan["repeats"]) for s in samples]
    return {
        "plan": dict(plan),
        "policy": {"rules": len(rules.rules), "with_when": sum(r.when is not None for r in rules.rules),
                   "tools_called": len(CONDITIONS) + len(UNNAMED), "calls": len(mix)},
        "rules_50": {name: {**microseconds(samples), "when_evaluated_mean": round(statistics.fmean(cel[name]), 2)}
                     for name, samples in groups.items()},
        "built_in": microseconds(floor),
        "in_celpy": {**microseconds(in_celpy),
                     "when_evaluated_mean": round(statistics.fmean(cel["all"]), 2)},
        "parse_ms": {k.replace("_us", "_ms"): round(v / 1000, 2) if k != "n" else v
                     for k, v in microseconds(time_parse(text, plan["parses"])).items()},
    }


GROUPS = {"all": "every call of the mix", "early": "decided by rules 1–12", "middle": "decided by rules 13–38",
          "late": "decided by rules 39–50", "none": "no rule matched (defaults)"}


def markdown(result: dict[str, Any]) -> str:
    shape, plan = result["policy"], result["plan"]
    rows = [[f"50 rules: {GROUPS[name]}", f"{data['n']:,}", data["median_us"], data["p99_us"], data["mean_us"],
             data["when_evaluated_mean"]]
            for name in GROUPS if (data := result["rules_50"].get(name))]
    in_celpy = result["in_celpy"]
    rows.append(["50 rules, every `when` left to celpy (an argument not plain JSON)", f"{in_celpy['n']:,}",
                 in_celpy["median_us"], in_celpy["p99_us"], in_celpy["mean_us"], in_celpy["when_evaluated_mean"]])
    floor = result["built_in"]
    rows.append(["built-in policy (no rules)", f"{floor['n']:,}", floor["median_us"], floor["p99_us"],
                 floor["mean_us"], 0])
    parse = result["parse_ms"]
    return "\n".join([
        f"`evaluate` per proposed call, µs ({shape['rules']} rules, {shape['with_when']} with a CEL `when`; "
        f"{shape['calls']:,} calls over {shape['tools_called']} tools, {plan['repeats']} passes):", "",
        report.table(["policy, calls", "samples", "median", "p99", "mean", "`when`s evaluated per call"], rows), "",
        f"Parsing and compiling the 50-rule file: median {parse['median_ms']} ms, p99 {parse['p99_ms']} ms "
        f"({parse['n']} parses), once at start-up.",
    ])


def main(argv: list[str] | None = None, out: Callable[[str], Any] = print) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.policy", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks the script, not the speed")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    out(markdown(run(args.quick)))
    print(f"bench: policy done in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
