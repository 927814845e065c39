"""The policy file read against its schema: a wrong value at any depth is one message naming the file, the
rule and the field, in Signoff's words, never pydantic's. Pure: no Slack, no SQL."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from signoff.runtime.approval_policy import Ask, PolicyError, ProposedCall, evaluate
from signoff.runtime.policy_file import parse_policy


def load_error(text: str) -> str:
    with pytest.raises(PolicyError) as caught:
        parse_policy(text, source="policy.yaml")
    message = str(caught.value)
    assert "\n" not in message
    return message


def rule(*lines: str) -> str:
    return "rules:\n  - name: r\n    tool: t\n" + "".join(f"    {line}\n" for line in lines)


DURATION = "ttl must be a duration like 90s, 15m, 2h, 1h30m or 1d, or a number of seconds"
WRONG_AT_EACH_DEPTH = [
    # the file, and its two fields
    ("[]\n", "policy.yaml: expected a mapping with 'defaults' and 'rules' at the top, the file is a list"),
    ("defaults: []\n", "policy.yaml: defaults: expected a mapping, got list"),
    ("defaults:\n", "policy.yaml: defaults: expected a mapping, got nothing"),
    ("rules:\n", "policy.yaml: rules must be a list, got nothing"),
    ("1: x\n", "policy.yaml: unknown field 1 (allowed: defaults, rules)"),
    # a field of the defaults, and of the mapping inside one
    ("defaults:\n  quorum: true\n", "policy.yaml: defaults: quorum must be a whole number of people, 1 or more, "
                                   "got True"),
    ("defaults:\n  quorum: '2'\n", "policy.yaml: defaults: quorum must be a whole number of people, 1 or more, "
                                  "got '2'"),
    ("defaults:\n  allow_self_approval: 'no'\n",
     "policy.yaml: defaults: allow_self_approval must be true or false, got 'no'"),
    ("defaults:\n  allow_self_approval:\n", "policy.yaml: defaults: allow_self_approval must be true or false, got None"),
    ("defaults:\n  approvers: [U0ANA, 5]\n", "policy.yaml: defaults: approvers must be a list of Slack ids, "
                                            "got ['U0ANA', 5]"),
    ("defaults:\n  remind: [50%, half]\n",
     "policy.yaml: defaults: remind: 'half' is not a percentage of the ttl between 0% and 100%, like 50%"),
    ("defaults:\n  escalate: {after: soon, to: [S0LEADS]}\n", f"policy.yaml: defaults: escalate: {DURATION}, got 'soon'"),
    ("defaults:\n  escalate: {after: 5m, to: [bob]}\n",
     "policy.yaml: defaults: escalate: approver 'bob' is not a Slack user id (U..., W...), a user group id (S...), "
     "'*' or an on-call schedule (pagerduty:<schedule id>, opsgenie:<schedule name>)"),
    ("defaults:\n  escalate: {after: 5m, to: [S0LEADS], too: 1}\n",
     "policy.yaml: defaults: escalate: unknown field 'too' (allowed: after, to)"),
    # a field of a rule, and of the mappings inside one
    ("rules: [7]\n", "policy.yaml: rule 1: expected a mapping with name, tool and decision, got number"),
    (rule("quorum: 2.0"), "policy.yaml: rule 'r': quorum must be a whole number of people, 1 or more, got 2.0"),
    (rule("quorum:"), "policy.yaml: rule 'r': quorum must be a whole number of people, 1 or more, got None"),
    (rule("ttl: 2024-01-01"), f"policy.yaml: rule 'r': {DURATION}, got datetime.date(2024, 1, 1)"),
    (rule("tool_glob: x", "true: 1"), "policy.yaml: rule 'r': unknown fields 'tool_glob', True (allowed: name, "
     "tool, when, decision, approvers, quorum, ttl, allow_self_approval, confirm, on_expiry, grant, remind, "
     "escalate, step_up, break_glass, reason)"),
    (rule("remind: [50%, 1.5]"),
     "policy.yaml: rule 'r': remind: 1.5 is not a percentage of the ttl between 0% and 100%, like 50%"),
    (rule("remind: 50%"), "policy.yaml: rule 'r': remind must be a list of percentages of the ttl, like [50%, 90%], "
                          "got text"),
    (rule("grant:"), "policy.yaml: rule 'r': grant: expected a mapping with for, same and scope, got nothing"),
    (rule("grant: {for: 0}"), "policy.yaml: rule 'r': grant: ttl must be longer than zero, got 0"),
    (rule("grant: {same: [service]}"),
     "policy.yaml: rule 'r': grant: for is missing (how long later calls may run unasked, e.g. 30m)"),
    (rule("grant: {for: 30m, same: [service, '']}"), "policy.yaml: rule 'r': grant: same must be a list of argument "
                                                     "names"),
    (rule("grant: {for: 30m, lasting: 1h}"),
     "policy.yaml: rule 'r': grant: unknown field 'lasting' (allowed: for, same, scope)"),
    (rule("escalate: later"), "policy.yaml: rule 'r': escalate: expected a mapping with after and to, got text"),
    (rule("escalate: {after: 5m, to: []}"), "policy.yaml: rule 'r': escalate: to is empty: name who is added"),
    (rule("escalate: {to: [S0LEADS]}"), "policy.yaml: rule 'r': escalate: after is missing"),
]


@pytest.mark.parametrize(("text", "message"), WRONG_AT_EACH_DEPTH,
                         ids=[m.split(": ", 1)[-1][:60] for _, m in WRONG_AT_EACH_DEPTH])
def test_a_wrong_value_at_any_depth_names_the_file_the_rule_and_the_field(text: str, message: str) -> None:
    assert load_error(text) == message


@pytest.mark.parametrize(("lines", "message"), [
    (("zz: 1", "decision: maybe"), "unknown field 'zz'"),  # an unknown field before anything else
    (("quorum: 0", "zz: 1"), "unknown field 'zz'"),
    (("decision: dney", "reason: typo"), "decision must be one of allow, ask, deny, got 'dney'"),
    (("decision: deny", "confirm: true", "quorum: 2"), "quorum, confirm would be ignored on a deny rule"),
    (("decision: allow", "reason: fine", "grant: {for: 1h}"), "grant would be ignored on an allow rule"),
])
def test_of_several_problems_in_a_rule_the_one_told_is_the_one_to_fix_first(lines: tuple[str, ...],
                                                                            message: str) -> None:
    assert load_error(rule(*lines)).startswith(f"policy.yaml: rule 'r': {message}")


def test_a_missing_field_is_told_before_a_wrong_value() -> None:
    assert load_error("rules:\n  - name: r\n    quorum: 0\n") == "policy.yaml: rule 'r': tool is missing"


def test_a_rule_left_without_allow_self_approval_written_as_null_inherits_the_default() -> None:
    policy = parse_policy(rule("allow_self_approval:"), source="policy.yaml", allow_self_approval=True)
    asked = evaluate(policy, ProposedCall("t", {}, True))
    assert policy.rules[0].allow_self_approval is None
    assert isinstance(asked, Ask) and asked.requirement.allow_self_approval is True


def test_a_whole_file_read_into_the_schema_keeps_every_value_it_gives() -> None:
    policy = parse_policy(rule("approvers: [S0SRE, U0ANA]", "ttl: 1h30m", "on_expiry: continue",
                               "grant: {for: 15m, same: [service], scope: requester}", "remind: [90%, 50%, 50%]",
                               "escalate: {after: 10m, to: ['*']}"), source="policy.yaml")
    loaded = policy.rules[0]
    assert (loaded.approvers, loaded.ttl, loaded.on_expiry, loaded.remind) == (
        ("S0SRE", "U0ANA"), datetime.timedelta(minutes=90), "continue", (0.5, 0.9))
    assert loaded.grant is not None and loaded.grant.to_json() == {"for_seconds": 900, "same": ["service"],
                                                                   "scope": "requester"}
    assert loaded.escalate is not None and loaded.escalate.to_json() == {"after_seconds": 600, "to": ["*"]}


NAMES = ["name", "tool", "when", "decision", "approvers", "quorum", "ttl", "allow_self_approval", "confirm",
         "on_expiry", "grant", "remind", "escalate", "reason", "for", "same", "scope", "after", "to", "defaults",
         "rules", "zz", 1, None, True]
ODD_VALUES = [None, True, False, 0, 1, 2, -1, 1.5, "", " ", "x", "U0ANA", "S0OPS", "*", "30m", "50%", "ask", "allow",
              "deny", "end", "run", "args.x > 1", "send_[", datetime.date(2024, 1, 1)]
VALUES = st.recursive(st.sampled_from(ODD_VALUES), lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.sampled_from(NAMES), inner, max_size=4), max_leaves=12)
RULES = st.fixed_dictionaries({"name": st.just("r"), "tool": st.just("t")}, optional={
    name: VALUES for name in NAMES if isinstance(name, str) and name not in ("name", "tool")})
PYDANTIC_WORDS = ("Input should", "Field required", "Extra inputs", "Value error", "pydantic", "validation error")


@settings(max_examples=300, deadline=None)
@given(st.fixed_dictionaries({"rules": st.lists(RULES | VALUES, max_size=3)}, optional={"defaults": VALUES}))
def test_any_file_loads_or_is_refused_in_one_line_of_our_words(document: dict[str, Any]) -> None:
    try:
        parse_policy(yaml.safe_dump(document, sort_keys=False), source="policy.yaml")
    except PolicyError as exc:
        message = str(exc)
        assert message.startswith("policy.yaml: ") and "\n" not in message
        assert not any(words in message for words in PYDANTIC_WORDS), message
