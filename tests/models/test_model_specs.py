"""Model specs: parsing, descriptions, missing keys, and the scripted policy."""

from __future__ import annotations

import json

import pytest

from signoff.runtime import Agent, ConfigError
from signoff.runtime.models import ScriptedPolicy, check_model, describe_model, policy_from_spec


@pytest.mark.parametrize(("spec", "message"), [
    ("gpt-4o", "expected openai:<model>, anthropic:<model> or scripted:<path"),
    ("ollama:llama3", "unknown provider 'ollama'"),
    ("openai:", "has no model name"),
    ("scripted:  ", "has no path"),
    ("", "is not valid"),
])
def test_bad_specs_are_config_errors(spec, message, tools):
    with pytest.raises(ConfigError, match=message):
        policy_from_spec(spec, tools, env={})
    with pytest.raises(ConfigError, match=message):
        describe_model(spec)


def test_missing_keys_are_config_errors(tools):
    with pytest.raises(ConfigError, match="OPENAI_API_KEY is not set"):
        policy_from_spec("openai:gpt-4o", tools, env={"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY is not set"):
        policy_from_spec("anthropic:claude-sonnet-4", tools, env={})


def test_descriptions_say_what_answers():
    assert describe_model("openai:gpt-4o") == "OpenAI-compatible Chat Completions, model 'gpt-4o'"
    assert describe_model("anthropic:claude-sonnet-4") == "Anthropic Messages API, model 'claude-sonnet-4'"
    assert describe_model("scripted:demo/refund.json") == (
        "scripted decisions from 'refund.json' (scripted, not a model)")


def test_scripted_spec_replays_a_file_and_says_it_is_not_a_model(tmp_path, tools, desk):
    script = tmp_path / "refund.json"
    script.write_text(json.dumps([
        {"tool": "lookup_order", "args": {"order_id": "A-1"}},
        {"tool": "refund", "args": {"order_id": "A-1", "amount_usd": 5}},
        {"final": "Refunded."},
    ]))
    agent = Agent(policy_from_spec(f"scripted:{script}", tools, env={}), tools, run_id="run-s")

    assert agent.start("refund A-1") == "awaiting_approval"
    assert agent.decide(True) == "done"

    assert agent.state["answer"] == "Refunded."
    assert agent.state["model"]["name"] == "scripted:refund.json (scripted, not a model)"
    assert len(desk.refunds) == 1
    assert check_model(f"scripted:{script}", {}) == (
        "ok: scripted:refund.json has 3 decision(s) (scripted, not a model)")


def test_scripted_policy_resumes_at_the_right_decision_in_a_new_process(tools):
    decisions = [{"tool": "lookup_order", "args": {"order_id": "A-1"}},
                 {"tool": "refund", "args": {"order_id": "A-1", "amount_usd": 5}},
                 {"final": "Done."}]
    first = Agent(ScriptedPolicy(decisions), tools, run_id="run-r")
    assert first.start("refund") == "awaiting_approval"

    again = Agent.resume(first.checkpoint(), ScriptedPolicy(decisions), tools)

    assert again.decide(True) == "done" and again.state["answer"] == "Done."


def test_a_script_that_runs_out_says_so(tools):
    agent = Agent(ScriptedPolicy([{"tool": "lookup_order", "args": {"order_id": "A-1"}}]), tools)

    assert agent.start("look") == "done"

    assert agent.state["answer"] == (
        "The script ran out after 1 decision(s); this run was driven by a script, not a model.")


def test_bad_script_files_are_config_errors(tmp_path, tools):
    (tmp_path / "obj.json").write_text('{"final": "x"}')
    (tmp_path / "items.json").write_text('[{"final": "x"}, 3]')

    with pytest.raises(ConfigError, match="must be a JSON list"):
        policy_from_spec(f"scripted:{tmp_path / 'obj.json'}", tools, env={})
    with pytest.raises(ConfigError, match="decision 1 is not a JSON object"):
        policy_from_spec(f"scripted:{tmp_path / 'items.json'}", tools, env={})
    with pytest.raises(ConfigError, match="cannot read script"):
        policy_from_spec(f"scripted:{tmp_path / 'nope.json'}", tools, env={})


def test_a_registry_mapping_of_tools_is_accepted(openai_server, openai_env, tools):
    from tests.fakes.openai_server import completion

    openai_server.script(completion("hi"))
    policy = policy_from_spec("openai:gpt-4o", {t.name: t for t in tools}, env=openai_env)

    assert policy([{"role": "user", "content": "hello"}])["final"] == "hi"
    assert [t["function"]["name"] for t in openai_server.bodies[0]["tools"]] == [t.name for t in tools]


def test_scripted_policy_counts_a_batch_turn_as_one_reply(batch_history):
    batch = {"calls": [{"tool": "lookup_order", "args": {"order_id": "A-1"}, "call_id": "c1"},
                       {"tool": "refund", "args": {"order_id": "A-1", "amount_usd": 5}, "call_id": "c2"}]}
    decisions = [batch, {"error": "no reply"}, {"tool": "lookup_order", "args": {"order_id": "A-2"}},
                 {"final": "Done."}]
    policy = ScriptedPolicy(decisions)

    first = policy(batch_history[:1])
    after_batch = policy(batch_history[:7])  # three calls and their answers, all at step 1
    after_three = policy(batch_history)  # then a malformed reply at step 2 and one call at step 3

    assert first == {**batch, "model": policy.model}
    assert after_batch == {"error": "no reply", "model": policy.model}
    assert after_three == {"final": "Done.", "model": policy.model}
