"""A scripted policy's place in its script is the number of replies in the history it is handed,
whoever hands it: one policy drives several runs at once, and a run resumed elsewhere (its entries
read back as new objects) continues at the right decision."""

from __future__ import annotations

from typing import Any

from signoff.runtime.models.scripted import ScriptedPolicy

SCRIPT = [{"tool": "lookup", "args": {"q": str(i)}} for i in range(4)] + [{"final": "done"}]


def reply(policy: ScriptedPolicy, history: list[dict[str, Any]]) -> dict[str, Any]:
    """The policy's decision, and the history grown as the agent grows it (new entries appended)."""
    decision = policy(list(history))
    step = len({e["step"] for e in history if e["role"] == "assistant"}) + 1
    history.append({"role": "assistant", "step": step, "tool": decision.get("tool"), "final": decision.get("final")})
    history.append({"role": "tool", "step": step, "result": "ok"})
    return decision


def test_runs_interleaved_on_one_policy_each_follow_the_script_from_the_start() -> None:
    policy = ScriptedPolicy(SCRIPT)
    first: list[dict[str, Any]] = [{"role": "user", "content": "a"}]
    second: list[dict[str, Any]] = [{"role": "user", "content": "b"}]
    taken_first, taken_second = [], []
    for _ in range(3):
        taken_first.append(reply(policy, first)["args"]["q"])
        taken_second.append(reply(policy, second)["args"]["q"])
    assert taken_first == taken_second == ["0", "1", "2"]


def test_a_history_read_back_as_new_objects_continues_at_the_right_decision() -> None:
    policy = ScriptedPolicy(SCRIPT)
    history: list[dict[str, Any]] = [{"role": "user", "content": "a"}]
    reply(policy, history)
    reply(policy, history)
    copied = [dict(entry) for entry in history]  # as another process reads it from the store
    assert reply(policy, copied)["args"]["q"] == "2"
    assert reply(policy, history)["args"]["q"] == "2", "the original history is counted as it is, not as cached"


def test_a_history_with_the_same_first_entry_but_other_entries_is_counted_again() -> None:
    policy = ScriptedPolicy(SCRIPT)
    goal = {"role": "user", "content": "a"}
    history: list[dict[str, Any]] = [goal]
    for _ in range(3):
        reply(policy, history)
    shorter = [goal, *[dict(entry) for entry in history[1:3]]]  # one reply, rebuilt from the same goal entry
    assert policy(shorter)["args"]["q"] == "1"
