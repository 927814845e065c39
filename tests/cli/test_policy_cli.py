"""The approval policy from the command line: `check`, `policy explain`, and deciding by its rules in the terminal."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from signoff.runtime.approval_policy import Allow, Ask, Deny, ProposedCall, Requirement, evaluate
from signoff.runtime.policy_file import parse_policy

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "policy.example.yaml"

POLICY = """
rules:
  - name: support-leads-write-freely
    tool: send_email
    when: 'requester == "U0BOSS" && channel == "C0SUPPORT"'
    decision: allow
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
    confirm: true
  - name: no-strangers
    tool: send_email
    when: '!args.to.endsWith("@example.com")'
    decision: deny
    reason: we only write to our own customers
"""
LOST_ORDER_REFUND = {"tool": "issue_refund", "args": {"order_id": "A-1008", "amount_usd": "1250.00",
                                                      "reason": "The printed listing binder was lost in transit."}}
SMALL_REFUND = {"tool": "issue_refund", "args": {"order_id": "A-1001", "amount_usd": "20.00",
                                                 "reason": "Part of the notebook's cover is torn."}}
STRANGER_EMAIL = {"tool": "send_email", "args": {"to": "eve@elsewhere.test", "subject": "Hello", "body": "Hi Eve"}}
CUSTOMER_EMAIL = {"tool": "send_email", "args": {"to": "ada@example.com", "subject": "Your refund",
                                                 "body": "Dear Ada, your refund is on its way."}}


@pytest.fixture
def policy(signoff) -> str:
    (signoff.cwd / "policy.yaml").write_text(POLICY)
    return "policy.yaml"


def digest_of(text: str) -> str:
    return parse_policy(text, source="any").digest


def script(signoff, name: str, *decisions: dict) -> str:
    path = signoff.cwd / f"{name}.json"
    path.write_text(json.dumps([*decisions, {"final": "done"}]))
    return f"scripted:{path}"


def refunds(signoff) -> list[dict]:
    ledger = signoff.outbox / "refunds.jsonl"
    return [json.loads(line) for line in ledger.read_text().splitlines()] if ledger.exists() else []


def run_id_of(result) -> str:
    return result.lines[-1].split()[0]


def story(signoff, run_id: str, *flags: str) -> dict:
    shown = signoff.here("runs", "show", run_id, "--json", *flags)
    assert shown.code == 0, shown.err
    return json.loads(shown.out)


# -- signoff check ---------------------------------------------------------------------------


def test_check_names_the_policy_its_rules_and_digest(signoff, policy):
    built_in = signoff.here("check")
    from_file = signoff.here("check", "--policy", policy)
    from_env = signoff.here("check", env={"SIGNOFF_POLICY": policy})

    assert "ok policy: built-in (every side effect asks SIGNOFF_APPROVERS)" in built_in.lines
    line = f"ok policy: policy.yaml - 4 rules, digest {digest_of(POLICY)}"
    assert line in from_file.lines and line in from_env.lines
    assert from_file.code == from_env.code == 0, from_file.out


def test_check_fails_on_a_bad_policy_with_the_rule_and_the_problem(signoff):
    (signoff.cwd / "policy.yaml").write_text(
        "rules:\n  - name: big-refunds\n    tool: issue_refund\n    approvers: [U0ANA, U0BEN]\n    quorum: 3\n")

    result = signoff.here("check", "--policy", "policy.yaml")

    assert result.code == 1
    assert [line for line in result.lines if line.startswith("FAIL")] == [
        "FAIL policy: --policy: policy.yaml: rule 'big-refunds': quorum 3 is more than its 2 approvers "
        "(U0ANA, U0BEN) can give"]


def test_check_warns_of_a_rule_that_names_no_tool_the_model_sees(signoff):
    (signoff.cwd / "policy.yaml").write_text(
        "rules:\n  - name: no-refunds\n    tool: issue_refnd\n    decision: deny\n"
        "  - name: mail\n    tool: send_*\n")

    result = signoff.here("check", "--policy", "policy.yaml")

    warnings = [line for line in result.lines if line.startswith("warn policy")]
    assert warnings == ["warn policy: rule 'no-refunds' names no tool the model sees (issue_refnd); check its spelling"]


def test_a_bad_policy_stops_run_before_anything_starts(signoff):
    (signoff.cwd / "policy.yaml").write_text("rules:\n  - name: x\n    tool: send_[\n")

    result = signoff.here("run", "anything", "--policy", "policy.yaml")

    assert result.code == 1
    assert result.err == ("error: --policy: policy.yaml: rule 'x': tool glob 'send_[' has a '[' at "
                          "position 6 that is never closed\n")
    assert result.out == "" and not (signoff.cwd / "signoff.db").exists()


def test_a_policy_error_names_the_flag_or_the_variable_that_gave_the_file(signoff):
    by_flag = signoff("run", "anything", "--policy", "nope.yaml")
    by_variable = signoff("run", "anything", env={"SIGNOFF_POLICY": "nope.yaml"})
    checked = signoff.here("check", "--policy", "nope.yaml")

    assert (by_flag.code, by_variable.code) == (1, 1)
    assert by_flag.err == "error: --policy: cannot read nope.yaml: No such file or directory\n"
    assert by_variable.err == "error: SIGNOFF_POLICY: cannot read nope.yaml: No such file or directory\n"
    assert "FAIL policy: --policy: cannot read nope.yaml: No such file or directory" in checked.lines


def test_serve_refuses_to_start_with_a_bad_policy(signoff):
    (signoff.cwd / "policy.yaml").write_text("rules:\n  - name: x\n    tool: send_email\n    quorum: 0\n")
    slack = {"SLACK_BOT_TOKEN": "xoxb-test", "SLACK_SIGNING_SECRET": "secret", "SIGNOFF_APPROVERS": "U0LEAD"}

    result = signoff.here("serve", "--policy", "policy.yaml", env=slack)

    assert result.code == 1
    assert result.err == ("error: --policy: policy.yaml: rule 'x': quorum must be a whole number of people, "
                          "1 or more, got 0\n")


# -- signoff policy explain ------------------------------------------------------------------


def explain(signoff, *args: str, env: dict[str, str] | None = None):
    return signoff.here("policy", "explain", *args, env=env)


def test_explain_names_the_rule_that_allows(signoff, policy):
    result = explain(signoff, "issue_refund", json.dumps(SMALL_REFUND["args"]), "--policy", policy)

    assert result.code == 0, result.err
    assert result.lines == ["rule small-refunds: allow - runs without asking anyone",
                            f"policy: policy.yaml - 4 rules, digest {digest_of(POLICY)}"]


def test_explain_says_what_an_ask_rule_requires(signoff, policy):
    result = explain(signoff, "issue_refund", json.dumps(LOST_ORDER_REFUND["args"]), "--policy", policy)

    assert result.code == 0, result.err
    assert result.lines[0] == "rule big-refunds: ask - 2 approvals from S0FINANCE, within 2h, confirm before approving"


def test_explain_quotes_a_deny_rules_reason(signoff, policy):
    result = explain(signoff, "send_email", json.dumps(STRANGER_EMAIL["args"]), env={"SIGNOFF_POLICY": policy})

    assert result.code == 0, result.err
    assert result.lines[0] == 'rule no-strangers: deny - "we only write to our own customers"'


def test_explain_falls_back_to_the_defaults_by_what_the_tool_does(signoff, policy):
    env = {"SIGNOFF_POLICY": policy, "SIGNOFF_APPROVERS": "U0LEAD,S0SUPPORT"}
    email = explain(signoff, "send_email", json.dumps(CUSTOMER_EMAIL["args"]), env=env)
    lookup = explain(signoff, "lookup_orders", '{"order_id": "A-1001"}', env=env)

    assert email.lines[0] == ("no rule matches: ask (default for side effects) - 1 approval from S0SUPPORT, U0LEAD, "
                              "within 30m")
    assert lookup.lines[0] == "no rule matches: allow (default for read-only tools) - runs without asking anyone"


def test_explain_lets_rules_see_the_requester_and_channel(signoff, policy):
    args = json.dumps(STRANGER_EMAIL["args"])
    as_lead = explain(signoff, "send_email", args, "--policy", policy, "--requester", "U0BOSS", "--channel", "C0SUPPORT")
    elsewhere = explain(signoff, "send_email", args, "--policy", policy, "--requester", "U0BOSS", "--channel", "C0DEV")

    assert as_lead.lines[0] == "rule support-leads-write-freely: allow - runs without asking anyone"
    assert elsewhere.lines[0].startswith("rule no-strangers: deny")


def test_explain_says_which_rules_could_not_be_evaluated_and_what_became_of_them(signoff, policy):
    result = explain(signoff, "issue_refund", '{"order_id": "A-1001"}', "--policy", policy)

    assert result.code == 0, result.err
    assert result.lines[:3] == [
        "rule big-refunds: ask - 2 approvals from S0FINANCE, within 2h, confirm before approving",
        "rule small-refunds could not be evaluated: no such member in mapping: 'amount_usd', so it was passed over",
        "rule big-refunds could not be evaluated: no such member in mapping: 'amount_usd', so it was applied",
    ]
    assert result.lines[3].startswith("note: the rules saw the arguments as given; a run would refuse them")
    assert "amount_usd: Field required" in result.lines[3]


def test_explain_shows_rules_the_arguments_as_the_tool_validates_them(signoff, tmp_path):
    # The tool keeps cents: "20" is "20.00" to the rules, as in a run.
    (tmp_path / "policy.yaml").write_text(
        "rules:\n  - name: exact\n    tool: issue_refund\n    when: 'args.amount_usd == \"20.00\"'\n"
        "    decision: allow\n")
    args = {**SMALL_REFUND["args"], "amount_usd": "20"}

    result = explain(signoff, "issue_refund", json.dumps(args), "--policy", "policy.yaml")

    assert result.lines[0] == "rule exact: allow - runs without asking anyone"
    assert result.lines[1] == ('note: the rules saw the arguments sent, as issue_refund validates them: {"amount_usd": '
                               '"20.00", "order_id": "A-1001", "reason": "Part of the notebook\'s cover is torn."}')


LOOSE_TOOLS = """
from pydantic import BaseModel
from signoff.tools.base import Tool

class RefundArgs(BaseModel):
    order_id: str
    amount_usd: float | None = None
    \"\"\"None: the whole order.\"\"\"

def act(args, key):
    return {"done": True}

TOOLS = [Tool("raw_action", act, side_effect=True, description="Anything goes."),
         Tool("refund", act, side_effect=True, args_model=RefundArgs, description="Refund an order.")]
"""
LOOSE_POLICY = """
rules:
  - name: say-how-much
    tool: refund
    when: "!has(args.amount_usd)"
    decision: deny
    reason: name the amount
  - name: small-refunds
    tool: refund
    when: "double(args.amount_usd) <= 50.0"
    decision: allow
  - name: small
    tool: raw_action
    when: "double(args.amount) <= 50.0"
    decision: allow
"""


@pytest.fixture
def loose(signoff, monkeypatch) -> tuple[str, ...]:
    """Tools whose arguments let null, bools and NaN through to the policy, and rules that convert them."""
    (signoff.cwd / "loose_tools.py").write_text(LOOSE_TOOLS)
    (signoff.cwd / "policy.yaml").write_text(LOOSE_POLICY)
    monkeypatch.syspath_prepend(str(signoff.cwd))  # the in-process CLI imports the toolset as a run would
    return ("--tools", "loose_tools:TOOLS", "--policy", "policy.yaml")


@pytest.mark.parametrize("amount", ["true", "false", "null", "NaN", "Infinity", "-Infinity", "1e400", '"1e400"',
                                    '"\u0665"', '" 5"', '"NaN"'])
def test_explain_never_allows_a_value_the_rule_was_not_written_for(signoff, loose, amount):
    result = explain(signoff, "raw_action", f'{{"amount": {amount}}}', *loose)

    assert result.code == 0, result.err
    assert result.lines[0].startswith("no rule matches: ask (default for side effects)")
    assert result.lines[1].startswith("rule small could not be evaluated: ")
    assert result.lines[1].endswith(", so it was passed over")


def test_explain_shows_the_rules_no_default_the_model_did_not_send(signoff, loose):
    left_out = explain(signoff, "refund", '{"order_id": "A-1001"}', *loose)
    sent_null = explain(signoff, "refund", '{"order_id": "A-1001", "amount_usd": null}', *loose)

    assert left_out.lines[:2] == [
        'rule say-how-much: deny - "name the amount"',
        'note: the rules saw the arguments sent, as refund validates them, without the default it fills in for '
        'amount_usd: {"order_id": "A-1001"}']
    assert sent_null.lines[:2] == [
        "no rule matches: ask (default for side effects) - 1 approval from the approvers, within 30m",
        "rule small-refunds could not be evaluated: double() of null: only a number or a numeric string converts "
        "to double, so it was passed over"]


def test_explain_refuses_an_unknown_tool_naming_the_known_ones(signoff, policy):
    result = explain(signoff, "delete_user", "{}", "--policy", policy)

    assert result.code == 1
    assert result.err == ("error: unknown tool 'delete_user'; the tools are search_handbook, lookup_orders, "
                          "send_email, issue_refund\n")


@pytest.mark.parametrize(("args", "problem"), [
    ('{"amount_usd": 20,}', "Invalid value for ARGS: not valid JSON: Expecting property name enclosed in double "
                            "quotes (line 1, column 19)"),
    ("[20]", "Invalid value for ARGS: must be a JSON object of arguments, got list"),
])
def test_explain_with_bad_arguments_is_a_usage_error_naming_the_problem(signoff, policy, args, problem):
    result = explain(signoff, "issue_refund", args, "--policy", policy)

    assert result.code == 2
    assert problem in result.err


def test_explain_with_a_bad_policy_is_the_one_line_error(signoff):
    (signoff.cwd / "policy.yaml").write_text("rules:\n  - name: x\n    tool: send_email\n    decision: maybe\n")

    result = explain(signoff, "send_email", "{}", "--policy", "policy.yaml")

    assert result.code == 1
    assert result.err == ("error: --policy: policy.yaml: rule 'x': decision must be one of allow, ask, deny, "
                          "got 'maybe'\n")


# -- deciding in the terminal ----------------------------------------------------------------


def test_rules_that_allow_and_deny_show_in_the_steps_show_and_export(signoff, policy):
    model = script(signoff, "mixed", SMALL_REFUND, STRANGER_EMAIL)

    result = signoff.here("run", "sort out Ada's order", "--model", model, "--policy", policy)

    assert result.code == 0, result.err  # nothing was asked: no answers needed
    assert "Approval needed" not in result.out
    assert "          allowed by rule small-refunds\n          -> {" in result.out
    assert "          x refused by rule no-strangers: we only write to our own customers\n" in result.out
    assert [(r["order_id"], r["amount_usd"]) for r in refunds(signoff)] == [("A-1001", "20.00")]
    assert not list(signoff.outbox.glob("*.eml"))
    run_id = run_id_of(result)

    shown = signoff.here("runs", "show", run_id)
    history = shown.out[shown.out.index("history"):shown.out.index("audit events")]
    assert "allowed by rule small-refunds" in history
    assert "x refused by rule no-strangers: we only write to our own customers" in history
    events = shown.out[shown.out.index("audit events"):shown.out.index("approvals:")]
    assert "call_allowed_by_rule" in events and "rule=small-refunds" in events
    assert "call_denied_by_rule" in events and "rule=no-strangers" in events

    exported = [json.loads(line) for line in signoff.here("runs", "export", run_id).lines]
    tool_entries = [r["data"] for r in exported if r["record"] == "history" and r["data"]["role"] == "tool"]
    assert [(e["tool"], e.get("rule"), e.get("error_kind")) for e in tool_entries] == [
        ("issue_refund", "small-refunds", None), ("send_email", "no-strangers", "denied_by_rule")]
    ruled = [(r["data"]["type"], r["data"]["rule"]) for r in exported
             if r["record"] == "event" and r["data"]["type"] in ("call_allowed_by_rule", "call_denied_by_rule")]
    assert ruled == [("call_allowed_by_rule", "small-refunds"), ("call_denied_by_rule", "no-strangers")]


def test_a_quorum_of_two_counts_the_terminal_as_one_and_waits_for_another(signoff, policy):
    model = script(signoff, "lost", LOST_ORDER_REFUND)

    first = signoff.here("run", "refund Margaret's lost order", "--model", model, "--policy", policy,
                         "--user", "cli:ana", answers="a\nissue_refund\n")

    assert first.code == 3, first.err
    card = first.out[first.out.index("+-- Approval needed: issue_refund"):]
    assert ("| Who decides:  2 approvals from S0FINANCE (rule big-refunds); you count as one, the others approve in "
            "Slack; approving asks you to confirm") in card
    assert "  1 of 2 approvals: cli:ana\n" in first.out
    assert ("  This rule (big-refunds) needs 1 more approval from S0FINANCE, in Slack. The run stays paused.\n"
            in first.out)
    run_id = run_id_of(first)
    assert first.lines[-1] == (f"{run_id} awaiting_approval (resume with: signoff runs resume {run_id} "
                               "--policy policy.yaml)")
    assert refunds(signoff) == []

    again = signoff.here("runs", "resume", run_id, "--policy", policy, "--user", "cli:ana", answers="a\n")

    assert again.code == 3, again.err
    assert ("  you approved it already (1 of 2 approvals: cli:ana); this rule (big-refunds) needs 1 more approval "
            "from S0FINANCE, in Slack. The run stays paused.") in again.out
    assert "Approve [a]" not in again.out and refunds(signoff) == []

    second = signoff.here("runs", "resume", run_id, "--policy", policy, "--user", "cli:ben",
                          answers="a\nissue_refund\n")

    assert second.code == 0, second.err
    assert [r["key"] for r in refunds(signoff)] == [f"{run_id}:1"]
    [approval] = story(signoff, run_id)["approvals"]
    assert [(v["user"], v["approved"]) for v in approval["votes"]] == [("cli:ana", True), ("cli:ben", True)]
    shown = signoff.here("runs", "show", run_id)
    assert (f"  {run_id}:1  issue_refund  approved and executed by cli:ben  rule big-refunds  approvals 2/2: "
            "cli:ana, cli:ben  contract ") in shown.out


def test_confirm_wants_the_tool_name_and_anything_else_cancels(signoff, policy):
    model = script(signoff, "lost", LOST_ORDER_REFUND)

    result = signoff.here("run", "refund Margaret's lost order", "--model", model, "--policy", policy,
                          answers="a\nissue_refnd\nq\n")

    assert result.code == 3, result.err
    assert ("Rule big-refunds asks you to confirm: type issue_refund to approve it, anything else cancels: "
            "issue_refnd\n  cancelled; nothing was decided\nApprove [a], deny [d], edit [e] or quit [q]? q\n") in result.out
    [approval] = story(signoff, run_id_of(result))["approvals"]
    assert (approval["status"], approval["votes"]) == ("pending", [])


def test_confirm_does_not_loop_forever_on_piped_answers(signoff, policy):
    model = script(signoff, "lost", LOST_ORDER_REFUND)

    result = signoff.here("run", "refund Margaret's lost order", "--model", model, "--policy", policy,
                          answers="a\n" * 1000)

    assert result.code == 3, result.err
    assert result.out.count("cancelled; nothing was decided") == 3
    assert "not confirmed after 3 tries; stopping here" in result.out
    assert refunds(signoff) == []


def test_a_rule_that_forbids_self_approval_leaves_the_run_for_someone_else(signoff):
    (signoff.cwd / "policy.yaml").write_text(
        "rules:\n  - name: careful-emails\n    tool: send_email\n    allow_self_approval: false\n")
    model = script(signoff, "email", CUSTOMER_EMAIL)

    mine = signoff.here("run", "write to Ada", "--model", model, "--policy", "policy.yaml", "--user", "cli:ana",
                        answers="a\n")

    assert mine.code == 3, mine.err
    assert ("  not done: you started this run, so someone else has to approve its calls (policy rule "
            "careful-emails); the run stays paused\n") in mine.out
    assert "Approve [a]" not in mine.out

    theirs = signoff.here("runs", "resume", run_id_of(mine), "--policy", "policy.yaml", "--user", "cli:lee",
                          answers="a\n")

    assert theirs.code == 0, theirs.err
    assert "approved by cli:lee" in theirs.out
    assert len(list(signoff.outbox.glob("*.eml"))) == 1


# -- the example policy ----------------------------------------------------------------------


def test_the_example_policy_does_what_its_comments_say(signoff):
    policy = parse_policy(EXAMPLE.read_text(encoding="utf-8"), source=str(EXAMPLE))

    def verdict(tool: str, side_effect: bool = True, **args: object) -> object:
        return evaluate(policy, ProposedCall(tool, args, side_effect))

    finance = Requirement(("S0FINANCE",), 2, timedelta(hours=2), allow_self_approval=False, confirm=True)
    ops = Requirement(("S0OPS",), 1, timedelta(minutes=30), allow_self_approval=False)
    on_call = Requirement(("S0SREONCALL",), 2, timedelta(minutes=15), allow_self_approval=False)
    assert verdict("issue_refund", amount_usd="20.00") == Allow("small-refunds")
    assert verdict("issue_refund", amount_usd=20000) == Ask("big-refunds", finance)
    assert verdict("issue_refund", amount_usd="500.00") == Ask(None, ops)
    assert verdict("restart_service", environment="production") == Ask("production-restarts", on_call)
    assert verdict("restart_service", environment="staging") == Allow("staging-restarts")
    assert verdict("delete_user", user="U0ANA") == Deny("no-deletes", "deletes are done by hand, never by the agent")
    assert verdict("lookup_customer", side_effect=False, email="ada@example.com") == Ask(
        "customer-records", Requirement(("S0SUPPORT",), 1, timedelta(minutes=30), allow_self_approval=False))
    assert verdict("search_handbook", side_effect=False, query="refunds") == Allow(None)

    checked = signoff.here("check", "--policy", str(EXAMPLE))
    assert f"ok policy: {EXAMPLE} - {len(policy.rules)} rules, digest {policy.digest}" in checked.lines


def test_a_run_replays_identically_under_the_policy_it_went_by(signoff, policy):
    model = script(signoff, "mixed", SMALL_REFUND, STRANGER_EMAIL)
    run_id = run_id_of(signoff.here("run", "sort out Ada's order", "--model", model, "--policy", policy))

    same = signoff.here("runs", "replay", run_id, "--policy", policy)
    without = signoff.here("runs", "replay", run_id)

    assert same.code == 0, same.out + same.err
    [verdict] = same.lines
    assert verdict.startswith(f"{run_id}: identical (") and verdict.endswith(" loop events, ends done)")
    assert without.code == 1
    assert without.lines[0].startswith(f"{run_id}: DIVERGED at step 1")
    assert without.lines[1].split()[:2] == ["expected:", "call_allowed_by_rule"]
    assert without.lines[2].split()[:2] == ["got:", "approval_requested"]


def test_check_warns_of_an_allow_rule_reading_an_argument_a_tool_lets_be_no_number(signoff, loose):
    (signoff.cwd / "check.yaml").write_text("""
rules:
  - {name: small-refunds, tool: refund, when: "double(args.amount_usd) <= 50.0", decision: allow}
  - {name: guarded, tool: refund, when: "has(args.amount_usd) && args.amount_usd <= 50.0", decision: allow}
  - {name: one-order, tool: refund, when: "args.order_id == 'A-1001'", decision: allow}
  - {name: big-refunds, tool: refund, when: "double(args.amount_usd) > 1000.0", decision: ask}
  - {name: small, tool: "raw_*", when: "int(args.amount) < 50", decision: allow}
""")

    result = signoff.here("check", "--policy", "check.yaml", env={"SIGNOFF_TOOLS": "loose_tools:TOOLS"})

    assert [line for line in result.lines if line.startswith("warn policy")] == [
        "warn policy: rule 'small-refunds' converts args.amount_usd, which refund lets be null or left out: such a "
        "call is asked about, not allowed (write `has(args.amount_usd) && ...` to say what you mean)",
        "warn policy: rule 'guarded' compares args.amount_usd, which refund lets be null: such a call is asked "
        "about, not allowed (write `has(args.amount_usd) && ...` to say what you mean)",
        "warn policy: rule 'small' converts args.amount, which raw_action lets be anything (its schema does not "
        "declare it): such a call is asked about, not allowed (write `has(args.amount) && ...` to say what you mean)",
    ]

