"""The approval policy in the pure loop: each proposed call is allowed, asked about or refused by
the first rule that matches it, the outcome is audited with the rule, and the policy as it is when
an approved call is about to run has the last, stricter word. No Slack, no SQL."""

from __future__ import annotations

import pytest
from agent_fakes import Outbox, Script, call, final, last_observation, standard_tools

from signoff.runtime import Agent
from signoff.runtime.approval_policy import ApprovalPolicy
from signoff.runtime.judging import Caller
from signoff.runtime.policy_file import parse_policy
from signoff.runtime.replay import replay

EMAIL = {"to": "ops@example.com", "subject": "Refund policy"}


def policy(text: str) -> ApprovalPolicy:
    return parse_policy(text, source="policy.yaml")


RULES = policy("""
defaults:
  approvers: [S0OPS]
rules:
  - name: internal-mail
    tool: send_email
    when: "args.to.endsWith('@example.com') && requester == 'U0ANA'"
    decision: allow
  - name: no-spam
    tool: "send_*"
    when: "args.subject.contains('offer')"
    decision: deny
    reason: marketing email goes through the campaign tool
  - name: searches-need-a-yes
    tool: search
    when: "usage.tool_calls >= 1"
    decision: ask
    quorum: 2
    approvers: [U0LEE, U0KIM]
""")


def agent_for(*decisions: object, requester: str = "U0ANA", rules: ApprovalPolicy = RULES,
              outbox: Outbox | None = None) -> tuple[Agent, Outbox, list[dict[str, object]]]:
    outbox = outbox or Outbox()
    events: list[dict[str, object]] = []
    agent = Agent(Script(*decisions), standard_tools(outbox), approval_policy=rules,
                  caller=Caller(requester=requester, channel="C0OPS"), on_event=events.append)
    return agent, outbox, events


def of(events: list[dict[str, object]], kind: str) -> list[dict[str, object]]:
    return [e for e in events if e["type"] == kind]


def test_a_side_effect_a_rule_allows_runs_without_asking_and_says_which_rule() -> None:
    agent, outbox, events = agent_for(call("send_email", **EMAIL), final("sent"))
    assert agent.start("tell ops") == "done"
    assert outbox.of("send_email") == [("send_email", {**EMAIL, "body": ""}, "run-1:1")]
    assert last_observation(agent.state)["rule"] == "internal-mail"
    [allowed] = of(events, "call_allowed_by_rule")
    assert (allowed["rule"], allowed["key"], allowed["policy"]) == ("internal-mail", "run-1:1", RULES.digest)
    assert of(events, "approval_requested") == []


def test_the_same_call_for_another_requester_falls_to_the_defaults_and_asks() -> None:
    agent, outbox, events = agent_for(call("send_email", **EMAIL), requester="U0BOB")
    assert agent.start("tell ops") == "awaiting_approval"
    asked = agent.run_state.pending.asked
    assert asked is not None and (asked.rule, asked.approvers, asked.quorum) == (None, ["S0OPS"], 1)
    assert outbox.runs == []
    [requested] = of(events, "approval_requested")
    assert (requested["rule"], requested["quorum"], requested["policy"]) == (None, 1, RULES.digest)


def test_a_denied_call_is_told_to_the_model_and_the_run_goes_on() -> None:
    offer = {"to": "all@customers.example", "subject": "A special offer"}
    agent, outbox, events = agent_for(call("send_email", **offer), final("I will not send it"))
    assert agent.start("tell everyone") == "done"
    assert outbox.runs == []
    refused = last_observation(agent.state)
    assert refused["error_kind"] == "denied_by_rule" and refused["rule"] == "no-spam"
    assert refused["error"] == "denied by policy rule no-spam: marketing email goes through the campaign tool"
    assert agent.state["usage"]["tool_calls"] == 0 and agent.state["steps"] == 2
    [denied] = of(events, "call_denied_by_rule")
    assert denied["reason"] == "marketing email goes through the campaign tool"


def test_a_rule_can_ask_about_a_read_only_call_and_it_runs_once_approved() -> None:
    agent, outbox, _ = agent_for(call("search", query="a"), call("search", query="b"), final("found"))
    assert agent.start("look twice") == "awaiting_approval"  # the first search ran: usage.tool_calls was 0
    assert [args["query"] for _, args, _ in outbox.of("search")] == ["a"]
    asked = agent.run_state.pending.asked
    assert asked is not None and (asked.rule, asked.quorum, asked.approvers) == ("searches-need-a-yes", 2,
                                                                                 ["U0LEE", "U0KIM"])
    assert agent.decide(True, approvals=2) == "done"
    assert [args["query"] for _, args, _ in outbox.of("search")] == ["a", "b"]


def test_an_allow_rule_whose_expression_cannot_be_evaluated_is_passed_over() -> None:
    rules = policy("""
rules:
  - name: small
    tool: send_email
    when: "args.amount_usd <= 50"
    decision: allow
""")
    agent, outbox, events = agent_for(call("send_email", **EMAIL), rules=rules)
    assert agent.start("go") == "awaiting_approval"
    assert outbox.runs == []
    [requested] = of(events, "approval_requested")
    assert requested["rule"] is None and any("small" in e for e in requested["errors"])


def test_a_policy_that_now_denies_refuses_an_approved_call() -> None:
    agent, outbox, _ = agent_for(call("send_email", **EMAIL), final("told"), requester="U0BOB")
    assert agent.start("tell ops") == "awaiting_approval"
    frozen = policy("""
rules:
  - name: mail-freeze
    tool: send_email
    decision: deny
    reason: no email during the incident
""")
    resumed = Agent.resume(agent.checkpoint(), Script(call("send_email", **EMAIL), final("told")),
                           standard_tools(outbox), approval_policy=frozen)
    assert resumed.decide(True) == "done"
    assert outbox.runs == []
    refused = last_observation(resumed.state)
    assert refused["error_kind"] == "denied_by_rule" and "the policy changed after it was approved" in refused["error"]


@pytest.mark.parametrize(("approvals", "status"), [(1, "awaiting_approval"), (2, "done")])
def test_a_policy_that_now_asks_more_approvals_waits_for_them(approvals: int, status: str) -> None:
    agent, outbox, _ = agent_for(call("send_email", **EMAIL), final("told"), requester="U0BOB")
    agent.start("tell ops")
    stricter = policy("""
rules:
  - name: two-people
    tool: send_email
    quorum: 2
    approvers: [U0LEE, U0KIM]
""")
    events: list[dict[str, object]] = []
    resumed = Agent.resume(agent.checkpoint(), Script(call("send_email", **EMAIL), final("told")),
                           standard_tools(outbox), approval_policy=stricter, on_event=events.append)
    assert resumed.decide(True, approvals=approvals) == status
    if status == "awaiting_approval":
        assert resumed.run_state.pending.asked.quorum == 2
        assert of(events, "approval_reopened")[0]["approvals"] == 1
        assert outbox.runs == []
    else:
        assert len(outbox.of("send_email")) == 1


def test_a_run_under_a_policy_replays_identically_under_it() -> None:
    agent, _, events = agent_for(call("search", query="a"), call("send_email", **EMAIL),
                                 call("send_email", to="x@customers.example", subject="an offer"), final("done"))
    assert agent.start("go") == "done"
    tools = standard_tools(Outbox())
    same = replay(agent.checkpoint(), events, tools, approval_policy=RULES, caller=Caller("U0ANA", "C0OPS"))
    assert same.divergence is None and same.status == "done"
    other = replay(agent.checkpoint(), events, tools, approval_policy=RULES, caller=Caller("U0BOB", "C0OPS"))
    assert other.divergence is not None and other.divergence.got["type"] == "approval_requested"
