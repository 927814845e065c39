"""`signoff policy test`: a policy against a cases file, as CI runs it: 0 when every case passes, 1
with a line per failing case, 2 when the cases file is malformed (naming the case and the field)."""

from __future__ import annotations

import pytest

POLICY = """
rules:
  - name: small-refunds
    tool: issue_refund
    when: "double(args.amount_usd) <= 50.0"
    decision: allow
  - name: big-refunds
    tool: issue_refund
    when: "double(args.amount_usd) > 1000.0"
    approvers: [S0FINANCE]
    quorum: 2
    ttl: 2h
  - name: middling-refunds
    tool: issue_refund
    approvers: [S0SUPPORT]
    grant: {for: 1h, same: [order_id]}
  - name: no-strangers
    tool: send_email
    when: '!args.to.endsWith("@example.com")'
    decision: deny
    reason: we only write to our own customers
  - name: boss-in-support
    tool: send_email
    when: 'requester == "U0BOSS" && channel == "C0SUPPORT" && usage.cost_usd < 1.0'
    decision: allow
"""
PASSING = """
- name: small refunds run unasked
  tool: issue_refund
  args: {order_id: A-1001, amount_usd: "20.00", reason: torn cover}
  expect: allow
  rule: small-refunds
- name: big refunds ask finance
  tool: issue_refund
  args: {order_id: A-1008, amount_usd: "1250.00", reason: lost}
  expect: ask
  rule: big-refunds
  approvers: [S0FINANCE]
  quorum: 2
  ttl: 2h
  grant: false
- name: middling refunds may be granted
  tool: issue_refund
  args: {order_id: A-1009, amount_usd: "120.00", reason: late}
  expect: ask
  approvers: [S0SUPPORT]
  grant: {for: 1h, same: [order_id]}
- tool: send_email
  args: {to: eve@elsewhere.test, subject: Hi, body: Hi}
  expect: deny
  rule: no-strangers
- name: the boss writes from support while the run is cheap
  tool: send_email
  args: {to: ada@example.com, subject: Hi, body: Hi}
  requester: U0BOSS
  channel: C0SUPPORT
  usage: {cost_usd: 0.2}
  expect: allow
- name: not once it is dear
  tool: send_email
  args: {to: ada@example.com, subject: Hi, body: Hi}
  requester: U0BOSS
  channel: C0SUPPORT
  usage: {cost_usd: 3}
  expect: ask
  rule: null
  grant: false
- name: reads run unasked
  tool: lookup_orders
  args: {order_id: A-1001}
  expect: allow
  rule: null
"""
FAILING = """
- tool: lookup_orders
  args: {order_id: A-1001}
  expect: allow
- name: big refunds need three
  tool: issue_refund
  args: {order_id: A-1008, amount_usd: "1250.00", reason: lost}
  expect: ask
  quorum: 3
"""


@pytest.fixture
def policy(signoff) -> str:
    (signoff.cwd / "policy.yaml").write_text(POLICY)
    return "policy.yaml"


def cases(signoff, text: str) -> str:
    (signoff.cwd / "cases.yaml").write_text(text)
    return "cases.yaml"


def test_every_case_passing_exits_0_with_a_summary(signoff, policy):
    result = signoff.here("policy", "test", policy, "--cases", cases(signoff, PASSING))

    assert result.code == 0, result.err
    assert result.lines == ["7 cases: all passed"]


def test_a_failing_case_is_one_line_saying_what_was_expected_and_what_the_policy_decided(signoff, policy):
    result = signoff.here("policy", "test", policy, "--cases", cases(signoff, FAILING))

    assert result.code == 1
    assert result.lines == [
        "FAIL case 2 'big refunds need three': expected ask, quorum 3; the policy decided: rule big-refunds: ask - "
        "2 approvals from S0FINANCE, within 2h (quorum differs)",
        "2 cases: 1 passed, 1 failed",
    ]


def test_a_case_expecting_another_decision_names_the_rule_that_decided(signoff, policy):
    text = PASSING.replace("  expect: deny\n  rule: no-strangers", "  expect: ask")
    result = signoff.here("policy", "test", policy, "--cases", cases(signoff, text))

    assert result.code == 1
    assert result.lines[0] == ('FAIL case 4: expected ask; the policy decided: rule no-strangers: deny - '
                               '"we only write to our own customers" (expect differs)')


@pytest.mark.parametrize(("text", "problem"), [
    ("- tool: issue_refund\n  args: {}\n", "case 1: expect: missing"),
    ("- name: typo\n  tool: issue_refund\n  expect: ask\n  quroum: 2\n", "case 1 'typo': quroum: unknown field"),
    ("- tool: issue_refund\n  expect: maybe\n", "case 1: expect: must be one of allow, ask, deny, got 'maybe'"),
    ("- tool: lookup_orders\n  expect: allow\n- tool: issue_refund\n  expect: allow\n  quorum: 2\n",
     "case 2: quorum: only an asked call has"),
    ("- name: when\n  tool: issue_refund\n  expect: ask\n  ttl: soon\n", "case 1 'when': ttl: must be a duration"),
    ("- tool: issue_refund\n  expect: ask\n  usage: {cost_usd: lots}\n", "case 1: usage: must be a mapping of numbers"),
    ("- tool: refund_everything\n  expect: deny\n", "case 1: tool: unknown tool 'refund_everything'"),
    ("tool: issue_refund\n", "expected a list of cases"),
    ("- [tool, issue_refund\n", "not valid YAML (line 2"),
])
def test_a_malformed_cases_file_exits_2_naming_the_case_and_the_field(signoff, policy, text, problem):
    result = signoff.here("policy", "test", policy, "--cases", cases(signoff, text))

    assert result.code == 2
    assert f"cases.yaml: {problem}" in result.err.replace("\n", " ") or problem in result.err
    assert result.out == ""


def test_in_a_real_process_the_exit_status_says_pass_or_fail(signoff, policy):
    (signoff.cwd / "failing.yaml").write_text(FAILING)
    passing = signoff("policy", "test", policy, "--cases", cases(signoff, PASSING))
    failing = signoff("policy", "test", policy, "--cases", "failing.yaml")

    assert (passing.code, passing.out) == (0, "7 cases: all passed\n")
    assert failing.code == 1
    assert failing.lines[0].startswith("FAIL case 2 'big refunds need three': expected ask, quorum 3;")


def test_a_policy_that_does_not_load_is_an_error_naming_the_file(signoff):
    (signoff.cwd / "broken.yaml").write_text("rules:\n  - name: x\n    tool: send_email\n    decision: maybe\n")
    result = signoff.here("policy", "test", "broken.yaml", "--cases", cases(signoff, PASSING))

    assert result.code == 1
    assert result.err.startswith("error: broken.yaml: rule 'x': decision must be one of allow, ask, deny")
