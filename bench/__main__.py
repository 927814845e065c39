"""`python -m bench [--quick] [--only steps,peers,profile,slack,scale,policy,backtest,startup,replicas,cli,api,gateway,receipts,targets]`: run the benchmarks, write the figures.

Each benchmark saves JSON to bench/results/ and rewrites its generated block in BENCHMARKS.md.
`targets` measures nothing: it judges every target from the saved results, so it runs last.
PostgreSQL parts use `SIGNOFF_BENCH_POSTGRES_URL` (default: the test server) in a schema of their
own, and are skipped, saying so, when no server answers.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

from bench import (
    api_roundtrip,
    approval_profile,
    backtest,
    cli_steps,
    gateway,
    machine,
    peers,
    pg,
    policy,
    receipts,
    replicas,
    report,
    scale,
    slack_ack,
    startup,
    steps,
    targets,
)

BENCHMARKS = ("steps", "peers", "profile", "slack", "scale", "policy", "backtest", "startup", "replicas", "cli", "api", "gateway", "receipts", "targets")
SUMMARIES = ("targets",)
"""Benchmarks that only read what the others saved: they run after every other one chosen."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks the scripts, not the speed")
    parser.add_argument("--only", default=",".join(BENCHMARKS), help="comma-separated subset of "
                        + ", ".join(BENCHMARKS))
    parser.add_argument("--no-markdown", action="store_true", help="write JSON only, leave BENCHMARKS.md alone")
    args = parser.parse_args(argv)
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    chosen.sort(key=lambda name: name in SUMMARIES)  # stable: the others keep the order given
    unknown = sorted(set(chosen) - set(BENCHMARKS))
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}")
    url = pg.postgres_url()
    postgres = url if pg.reachable(url) else None
    info = machine.describe(pg.server_version(postgres) if postgres else None)
    report.save_json("machine", info)
    if not args.no_markdown:
        report.write_block("machine", machine.markdown(info) + (" Quick mode: sizes too small to mean anything."
                                                                 if args.quick else ""))
    runs: dict[str, Callable[[], dict[str, Any]]] = {
        "steps": lambda: steps.run(args.quick, postgres),
        "peers": lambda: peers.run(args.quick),
        "profile": lambda: approval_profile.run(args.quick),
        "slack": lambda: slack_ack.run(args.quick, postgres),
        "scale": lambda: scale.run(args.quick, postgres),
        "policy": lambda: policy.run(args.quick),
        "backtest": lambda: backtest.run(args.quick),
        "api": lambda: api_roundtrip.run(args.quick),
        "gateway": lambda: gateway.run(args.quick),
        "receipts": lambda: receipts.run(args.quick),
        "startup": lambda: startup.run(args.quick),
        "replicas": lambda: replicas.run(args.quick, postgres),
        "cli": lambda: cli_steps.run(args.quick),
        "targets": lambda: targets.run(),
    }
    writers = {"steps": steps.markdown, "peers": peers.markdown, "profile": approval_profile.markdown, "slack": slack_ack.markdown, "policy": policy.markdown,
               "backtest": backtest.markdown, "api": api_roundtrip.markdown, "scale": scale.markdown, "startup": startup.markdown, "replicas": replicas.markdown,
               "cli": cli_steps.markdown, "gateway": gateway.markdown, "receipts": receipts.markdown,
               "targets": targets.markdown}
    for name in chosen:
        started = time.perf_counter()
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        result = runs[name]()
        result["machine"], result["quick"] = info, args.quick
        report.save_json(name, result)
        if not args.no_markdown:
            report.write_block(name, writers[name](result))
        print(f"bench: {name} done in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
