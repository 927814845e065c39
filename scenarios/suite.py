"""The scenario list and how it runs: light scenarios side by side in lanes, heavy ones alone."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from scenarios import (
    access_reviews,
    again,
    api,
    batches,
    break_glass,
    clocks,
    crash,
    dbdrop,
    decisions_attacked,
    drawing,
    erasure,
    gateway,
    hostile,
    leaks,
    model,
    outsiders,
    owed,
    policy_values,
    quorum,
    receipts,
    redrawn,
    replays,
    replicas,
    seeing,
    slackfaults,
    step_up,
    tool_faults,
)
from scenarios.outcome import Outcome
from scenarios.world import postgres_reachable


@dataclass(frozen=True)
class Sizes:
    """How big each scenario is; `quick()` is the smaller run."""

    kinds: tuple[str, ...] = ("sqlite", "postgres")
    both_tools: bool = True
    sigkill_kinds: tuple[str, ...] = ("sqlite", "postgres")
    replica_runs: int = 200
    expiry_runs: int = 24
    drop_runs: int = 16
    drop_seconds: float = 12.0
    crash_runs: int = 8
    server_crashes: int = 2
    quorum_runs: int = 20
    """Runs per database of the quorum races, one race after another (five kinds)."""
    slack_timeout: bool = True
    lanes: int = 3

    @classmethod
    def named(cls, name: str) -> Sizes:
        """`quick` or `full` (anything else)."""
        return cls.quick() if name.strip().lower() == "quick" else cls()

    @classmethod
    def quick(cls) -> Sizes:
        return cls(both_tools=False, sigkill_kinds=("sqlite",), replica_runs=40, expiry_runs=8, drop_runs=6,
                   drop_seconds=6.0, crash_runs=4, server_crashes=1, quorum_runs=10, slack_timeout=False)


@dataclass(frozen=True)
class Scenario:
    name: str
    run: Callable[[], Outcome]
    postgres: bool
    alone: bool = False
    """Run with nothing beside it (it measures races across replicas and needs the machine)."""


def scenarios(sizes: Sizes) -> list[Scenario]:
    found = [Scenario(c.name, functools.partial(crash.run_crash, c), c.kind == "postgres")
             for c in crash.cases(sizes.kinds, sizes.both_tools)]
    found += [Scenario(f"crash/sigkill-mid-run/{k}", functools.partial(crash.run_sigkill, k), k == "postgres")
              for k in sizes.sigkill_kinds]
    found += [Scenario(f"crash/clicking-replica-dies-holding-the-run/{k}", functools.partial(crash.run_decider_dies, k),
                       k == "postgres") for k in sizes.sigkill_kinds]
    found += [Scenario(f"crash/sweep-dies-before-telling/{k}",
                       functools.partial(owed.run_glass_told_after_the_sweeper_died, k), k == "postgres")
              for k in sizes.sigkill_kinds]
    found += [Scenario(f"slack/step-told-after-a-post-outage/{k}",
                       functools.partial(owed.run_results_told_after_a_post_outage, k), k == "postgres")
              for k in sizes.sigkill_kinds]
    found += [
        Scenario("replicas/3x-races/postgres", functools.partial(replicas.run_replicas, sizes.replica_runs), True,
                 alone=True),
        Scenario("replicas/3x-approve-vs-expiry/postgres",
                 functools.partial(replicas.run_expiry_races, sizes.expiry_runs), True, alone=True),
        Scenario("database/connection-drops/2x/postgres",
                 functools.partial(dbdrop.run_connection_drops, sizes.drop_runs, chaos_s=sizes.drop_seconds), True),
        Scenario("database/server-crash/2x/postgres",
                 functools.partial(dbdrop.run_server_crashes, sizes.crash_runs, crashes=sizes.server_crashes), True),
        # Its leases last 2 s, kept only by heartbeats: it measures them, so it needs the machine.
        Scenario("clocks/replica-90s-ahead/postgres", clocks.run_replica_ahead, True, alone=True),
        Scenario("clocks/replica-4min-behind/postgres", clocks.run_replica_behind, True),
        Scenario("slack/post-outage/sqlite", slackfaults.run_post_outage, False),
        Scenario("slack/update-outage/sqlite", slackfaults.run_update_outage, False),
        Scenario("slack/card-redrawn-by-the-other-replica/sqlite", redrawn.run_card_redrawn, False),
        Scenario("model/outage-then-retry/sqlite", model.run_model_outage, False),
        Scenario("hostile/slack-edge/sqlite", hostile.run_hostile, False),
        Scenario("hostile/what-you-see/sqlite", seeing.run_what_you_see, False),
        Scenario("hostile/replayed-run-buttons/sqlite", replays.run_replayed_buttons, False),
        Scenario("hostile/outsiders/sqlite", outsiders.run_outsiders, False),
        Scenario("hostile/echoed-credentials/sqlite", leaks.run_echoed_credentials, False),
        Scenario("hostile/server-text-draws-the-card/sqlite", drawing.run_drawing, False),
        Scenario("hostile/edit-repeats/sqlite", decisions_attacked.run_edit_repeats, False),
        Scenario("hostile/forged-approve-all/sqlite", decisions_attacked.run_forged_approve_all, False),
        Scenario("hostile/number-forms/sqlite", decisions_attacked.run_number_forms, False),
        Scenario("hostile/step-up-slack-clicks/sqlite", step_up.run_step_up_slack_clicks, False),
        Scenario("hostile/break-glass/sqlite", break_glass.run_break_glass, False),
        Scenario("hostile/policy-values/sqlite", policy_values.run_policy_values, False),
        Scenario("api/caller-dies-after-start/sqlite", api.run_caller_dies, False),
        Scenario("api/racing-starts/2x/postgres", api.run_racing_starts, True),
        Scenario("api/replayed-create/2x/postgres", api.run_replayed_create, True),
        Scenario("gateway/killed-while-waiting/sqlite", gateway.run_gateway_killed_while_waiting, False),
        Scenario("gateway/retried-request/sqlite", gateway.run_retried_request, False),
        Scenario("gateway/killed-while-waiting/postgres",
                 functools.partial(gateway.run_gateway_killed_while_waiting, "postgres"), True),
        Scenario("gateway/retried-request/postgres", functools.partial(gateway.run_retried_request, "postgres"), True),
        Scenario("access/review-once/3x-skewed/postgres", access_reviews.run_reviews_once_across_skewed_replicas,
                 True),
    ]
    for k in sizes.kinds:
        found += [
            Scenario(f"tools/mcp-server-killed-mid-call/{k}", functools.partial(tool_faults.run_mcp_server_killed, k),
                     k == "postgres"),
            Scenario(f"tools/http-api-stalls-mid-call/{k}", functools.partial(tool_faults.run_http_api_stalls, k),
                     k == "postgres"),
        ]
    found += [Scenario(f"policy/quorum-races/2x/{k}", functools.partial(quorum.run_quorum, k, sizes.quorum_runs),
                       k == "postgres") for k in sizes.kinds]
    found += [Scenario(f"expiry/request-again/2x/{k}", functools.partial(again.run_request_again, k), k == "postgres")
              for k in sizes.kinds]
    found += [Scenario(f"batch/approve-all-races/2x/{k}", functools.partial(batches.run_batches, k), k == "postgres")
              for k in sizes.kinds]
    found += [Scenario(f"hostile/audit-erasure/{k}", functools.partial(erasure.run_erasure, k), k == "postgres")
              for k in sizes.kinds]
    found += [Scenario(f"hostile/receipts-crash-and-forgery/{k}", functools.partial(receipts.run_receipts, k),
                       k == "postgres") for k in sizes.kinds]
    if sizes.slack_timeout:
        found.append(Scenario("slack/post-timeout/sqlite", slackfaults.run_post_timeout, False))
    return found


def run_all(chosen: Iterable[Scenario], lanes: int = 3,
            on_done: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    """Run the heavy scenarios one by one, then the rest `lanes` at a time; outcomes in list order."""
    chosen = list(chosen)
    have_postgres = any(s.postgres for s in chosen) and postgres_reachable()
    results: dict[str, Outcome] = {}
    lock = threading.Lock()

    def one(scenario: Scenario) -> None:
        if scenario.postgres and not have_postgres:
            outcome = Outcome(scenario.name, scenario.name.split("/")[0], skipped="PostgreSQL is not reachable")
        else:
            try:
                outcome = scenario.run()
            except Exception as exc:  # the world could not even be built: report it as this scenario's failure
                outcome = Outcome(scenario.name, scenario.name.split("/")[0])
                outcome.expectations.append(f"the scenario could not run: {type(exc).__name__}: {exc}")
            assert outcome.name == scenario.name, (outcome.name, scenario.name)
        with lock:
            results[scenario.name] = outcome
            if on_done is not None:
                on_done(outcome)

    for scenario in (s for s in chosen if s.alone):
        one(scenario)
    with ThreadPoolExecutor(max(lanes, 1), thread_name_prefix="lane") as pool:
        list(pool.map(one, [s for s in chosen if not s.alone]))
    return [results[s.name] for s in chosen]
