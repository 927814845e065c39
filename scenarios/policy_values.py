"""Values a policy rule was not written for, against a running `signoff serve` with the policy guide's refund
rules (`double(args.amount_usd) <= 50.0` allows, `> 1000.0` asks): the scripted model proposes refunds
of null, of no amount at all, of true, NaN, infinity, "1e400", Arabic-Indic and full-width digits, a
list and a map.

Every one is asked about (its approval card is posted) and none runs before someone approved it; a
refund of $20 beside them runs unasked, so the rule itself still allows what it was written for.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from pydantic import BaseModel

from scenarios.drive import APPROVER, Driver
from scenarios.outcome import Outcome, observed
from scenarios.toolset import record
from scenarios.world import Policy, World
from signoff.tools.base import Tool

RULES = f"""
rules:
  - name: small-refunds
    tool: "issue_refund*"
    when: "double(args.amount_usd) <= 50.0"
    decision: allow
  - name: big-refunds
    tool: "issue_refund*"
    when: "double(args.amount_usd) > 1000.0"
    approvers: [{APPROVER}]
"""
"""The policy guide's example rules, with an approver this world has."""


class RefundArgs(BaseModel):
    order_id: str
    amount_usd: float | None = None
    """None: the whole order (the issue's own args model)."""


def issue_refund(args: dict[str, Any], key: str) -> dict[str, Any]:
    record("issue_refund", args, key)
    return {"refunded": args.get("amount_usd"), "order_id": args["order_id"]}


def issue_refund_raw(args: dict[str, Any], key: str) -> dict[str, Any]:
    record("issue_refund_raw", args, key)
    return {"refunded": args.get("amount_usd")}


TOOLS = [
    Tool("issue_refund", issue_refund, side_effect=True, args_model=RefundArgs,
         description="Refund an order; without an amount, the whole order."),
    Tool("issue_refund_raw", issue_refund_raw, side_effect=True,
         description="Refund through a gateway that takes its arguments as they come (no schema)."),
]


_ORDERS = itertools.count(1001)


def _refund(tool: str, **amount: Any) -> dict[str, Any]:
    # One order each: two proposals that validate to the same call would be refused as a repeat.
    return {"tool": tool, "args": {"order_id": f"A-{next(_ORDERS)}", **amount}}


HOSTILE = [
    _refund("issue_refund", amount_usd=None),
    _refund("issue_refund"),  # left out: the args model's default (None) is not the model's word
    _refund("issue_refund", amount_usd=math.nan),
    _refund("issue_refund", amount_usd=math.inf),
    _refund("issue_refund", amount_usd="1e400"),  # the args model reads it as infinity
    _refund("issue_refund_raw", amount_usd=True),
    _refund("issue_refund_raw", amount_usd=None),
    _refund("issue_refund_raw", amount_usd=-math.inf),
    _refund("issue_refund_raw", amount_usd="1e400"),
    _refund("issue_refund_raw", amount_usd="NaN"),
    _refund("issue_refund_raw", amount_usd="٥"),
    _refund("issue_refund_raw", amount_usd="２０"),
    _refund("issue_refund_raw", amount_usd=[20]),
    _refund("issue_refund_raw", amount_usd={"usd": 20}),
]
SMALL = _refund("issue_refund", amount_usd=20.0)
SCRIPT = [*HOSTILE, SMALL, {"final": "All refunds handled."}]


def run_policy_values(kind: str = "sqlite") -> Outcome:
    outcome = Outcome(f"hostile/policy-values/{kind}", "hostile", runs=1, hostile=len(HOSTILE))
    policy = Policy(approvers=frozenset({APPROVER}), file=RULES)
    env = {"SIGNOFF_TOOLS": "scenarios.policy_values:TOOLS", "SIGNOFF_MAX_STEPS": str(len(SCRIPT) + 2)}
    with observed(outcome, lambda: World(kind, SCRIPT, policy=policy, env=env, tools=list(TOOLS))) as world:
        serve = world.start()
        driver = Driver(world, pick=lambda: serve)
        run_id = driver.start("Refund the damaged orders")
        outcome.expect(driver.settle([run_id], 90), "the run did not finish")
        _each_hostile_refund_was_asked(world, run_id, outcome)
    return outcome


def _each_hostile_refund_was_asked(world: World, run_id: str, outcome: Outcome) -> None:
    """Each hostile proposal has a posted card that was approved before it ran; the small one none."""
    run = world.db.store.get_run(run_id)
    history = run.state.get("history", []) if run is not None else []
    proposals = [entry for entry in history if entry.get("role") == "assistant" and entry.get("tool")]
    outcome.expect(len(proposals) == len(SCRIPT) - 1, f"{len(proposals)} refunds proposed, not {len(SCRIPT) - 1}")
    ran = {line["key"] for line in world.effect_lines()}
    for proposal, scripted in zip(proposals, [*HOSTILE, SMALL], strict=False):
        key = f"{run_id}:{proposal['step']}"
        approval = world.db.store.approval_for_key(key)
        shown = f"{scripted['tool']} {scripted['args'].get('amount_usd', '(no amount)')!r}"
        if scripted is SMALL:
            outcome.expect(approval is None and key in ran, f"the $20 refund did not run unasked: {approval}")
            continue
        outcome.expect(approval is not None and approval.message, f"{shown} ran or ended with no card posted")
        outcome.expect(approval is None or approval.status == "consumed" and key in ran,
                       f"{shown}: approved and run once expected, got {approval and approval.status}")
    outcome.notes.append(f"{len(HOSTILE)} refunds of values the rule was not written for, each asked about; "
                         f"the $20 refund allowed by small-refunds")
